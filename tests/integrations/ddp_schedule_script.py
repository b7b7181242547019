"""Run by torchrun --nproc-per-node 2 (gloo, CPU) from test_ddp_schedule.py: HF Trainer with the schedule and
noise-scale callbacks, then the plain-loop helper under DDP, on the same data; rank 0 writes what each trained.

    torchrun --nproc-per-node 2 tests/integrations/ddp_schedule_script.py OUT.json OUTPUT_DIR
"""

import json
import sys

import torch.distributed as dist
from schedule_runs import max_weight_difference, tiny_gpt2, token_rows, train_hf, train_plain

from cbs_ray.integrations.hf import NoiseScaleCallback


def main(out: str, output_dir: str) -> None:
    rows = token_rows()
    hf_model, plain_model = tiny_gpt2(), tiny_gpt2()
    noise = NoiseScaleCallback()
    hf = train_hf(hf_model, rows, output_dir, callbacks=[noise])  # TrainingArguments start the gloo group
    plain = train_plain(plain_model, rows, ddp=True)
    result = {"world_size": dist.get_world_size(), "hf": hf.records, "plain": plain.records,
              "weight_difference": max_weight_difference(hf_model, plain_model),
              "moved": max_weight_difference(hf_model, tiny_gpt2()),
              "b_simple": noise.hook.reading.b_simple if noise.hook.reading else None,
              "noise_steps": noise.hook.reading.steps if noise.hook.reading else 0,
              "logged_batches": [r["effective_batch_size"] for r in hf.trainer.state.log_history if "loss" in r]}
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
