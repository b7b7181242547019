"""Run by torchrun --nproc-per-node 2 (gloo, CPU) from test_ddp_resume.py: an unmodified HF Trainer trains the
schedule 8 → 16 → 32 with a checkpoint every 2 steps, then fresh Trainers resume from checkpoints in stages 0, 1
and 2; rank 0 writes every run's per-step (samples over both processes, LR). Then the noise callback reads the
known-answer problem (B_simple = 64) at accumulation 2 on each process (global batch 16).

    torchrun --nproc-per-node 2 tests/integrations/ddp_resume_script.py OUT.json OUTPUT_DIR
"""

import json
import sys
from pathlib import Path

import torch.distributed as dist
from tiny_runs import hf_trainer

SETTINGS = {"lr_scheduler_type": "linear", "warmup_steps": 5}


def noise_reading(output_dir: Path) -> dict:
    from test_noise_scale_hooks import MICRO, STEPS, Linear, Samples
    from transformers import Trainer, TrainingArguments

    from cbs_ray.integrations.hf import NoiseScaleCallback

    callback = NoiseScaleCallback()
    args = TrainingArguments(output_dir=str(output_dir), per_device_train_batch_size=MICRO,
                             gradient_accumulation_steps=2, max_steps=STEPS, learning_rate=1e-6, max_grad_norm=0.1,
                             train_sampling_strategy="sequential", report_to="none", save_strategy="no",
                             logging_steps=50, disable_tqdm=True, use_cpu=True)
    data = Samples(STEPS * MICRO * 2 * dist.get_world_size(), as_dict=True)
    Trainer(model=Linear(), args=args, train_dataset=data, callbacks=[callback]).train()
    reading = callback.hook.reading
    return {"b_simple": reading.b_simple, "grad_sq": reading.grad_sq, "trace_sigma": reading.trace_sigma,
            "steps": reading.steps, "batch_size": reading.batch_size}


def main(out: str, output_dir: str) -> None:
    root = Path(output_dir)
    trainer, recorder = hf_trainer(str(root / "full"), save_strategy="steps", save_steps=2, **SETTINGS)
    trainer.train()
    result = {"world_size": dist.get_world_size(), "full": recorder.records}
    for checkpoint in (4, 12, 18):
        resumed, resumed_recorder = hf_trainer(str(root / f"resumed-{checkpoint}"), **SETTINGS)
        resumed.train(resume_from_checkpoint=str(root / "full" / f"checkpoint-{checkpoint}"))
        result[str(checkpoint)] = resumed_recorder.records
    result["noise"] = noise_reading(root / "noise")
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
