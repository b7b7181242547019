"""Run by torchrun --nproc-per-node 2 (gloo, CPU) from test_noise_scale_callback_against_trial_e2e.py: HF Trainer,
unmodified, with ``NoiseScaleCallback`` on the run of ``noise_runs`` for each seed given; rank 0 writes, per
seed, the (|G|², tr Σ) the callback logged at every log.

    torchrun --nproc-per-node 2 tests/e2e/noise_scale_ddp_script.py OUT.json OUTPUT_DIR SEED [SEED ...]
"""

import json
import sys

import torch
import torch.distributed as dist
from noise_runs import (
    BATCH,
    BUDGET_SAMPLES,
    EVERY_SAMPLES,
    MICRO,
    PEAK_LR,
    STEPS,
    WARMUP_FRACTION,
    WORLD,
    collate,
    datasets_pair,
    gpt2,
)

from cbs_ray.integrations.hf import NoiseScaleCallback


def train(seed: int, output_dir: str) -> dict:
    from transformers import Trainer, TrainingArguments, set_seed

    set_seed(seed)
    model = gpt2()
    train_dataset, _ = datasets_pair()
    noise = NoiseScaleCallback()
    args = TrainingArguments(
        output_dir=f"{output_dir}/seed{seed}", per_device_train_batch_size=MICRO,
        gradient_accumulation_steps=BATCH // (MICRO * WORLD), max_steps=STEPS, learning_rate=PEAK_LR,
        lr_scheduler_type="linear", warmup_steps=round(WARMUP_FRACTION * STEPS), optim="adamw_torch",
        weight_decay=0.01, max_grad_norm=1.0, seed=seed, report_to="none", save_strategy="no",
        logging_steps=EVERY_SAMPLES // BATCH, disable_tqdm=True, use_cpu=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=train_dataset, data_collator=collate,
                      callbacks=[noise])
    trainer.train()
    logs = [r for r in trainer.state.log_history if "loss" in r and "noise_grad_sq" in r]  # not the summary's
    return {"grad_sq": [r["noise_grad_sq"] for r in logs], "trace_sigma": [r["noise_trace_sigma"] for r in logs],
            "b_simple": [r["b_simple"] for r in logs], "loss": [r["loss"] for r in logs],
            "steps": noise.hook.reading.steps, "samples": BUDGET_SAMPLES, "world_size": dist.get_world_size()}


def main(out: str, output_dir: str, seeds: list[int]) -> None:
    torch.set_num_threads(1)
    result = {str(seed): train(seed, output_dir) for seed in seeds}
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3:]])
