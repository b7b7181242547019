"""Run by torchrun --nproc-per-node 2 (gloo, CPU) from test_ddp_resume.py: an unmodified HF Trainer trains the
schedule 8 → 16 → 32 with a checkpoint every 2 steps, then fresh Trainers resume from checkpoints in stages 0, 1
and 2; rank 0 writes every run's per-step (samples over both processes, LR).

    torchrun --nproc-per-node 2 tests/integrations/ddp_resume_script.py OUT.json OUTPUT_DIR
"""

import json
import sys
from pathlib import Path

import torch.distributed as dist
from tiny_runs import hf_trainer

SETTINGS = {"lr_scheduler_type": "linear", "warmup_steps": 5}


def main(out: str, output_dir: str) -> None:
    root = Path(output_dir)
    trainer, recorder = hf_trainer(str(root / "full"), save_strategy="steps", save_steps=2, **SETTINGS)
    trainer.train()
    result = {"world_size": dist.get_world_size(), "full": recorder.records}
    for checkpoint in (4, 12, 18):
        resumed, resumed_recorder = hf_trainer(str(root / f"resumed-{checkpoint}"), **SETTINGS)
        resumed.train(resume_from_checkpoint=str(root / "full" / f"checkpoint-{checkpoint}"))
        result[str(checkpoint)] = resumed_recorder.records
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
