"""The schedule 8 → 16 → 32 under 2-process DDP (torchrun, gloo): HF Trainer and the plain-loop helper train
exactly those global batches at those sample counts, the LR × √2 per doubling, and end on the same weights."""

import math

import pytest
from torchrun_launch import run_two_processes

pytest.importorskip("accelerate")
pytestmark = [pytest.mark.slow, pytest.mark.multiproc]  # two processes: run under the CPU lock

from schedule_runs import BASE_LR, EXPECTED_BATCHES  # noqa: E402

EXPECTED_LRS = [BASE_LR * m for m in [1.0] * 8 + [math.sqrt(2)] * 8 + [2.0] * 4]


def test_hf_and_plain_loop_train_the_schedule_under_two_process_ddp(tmp_path):
    result = run_two_processes("ddp_schedule_script.py", tmp_path)
    assert result["world_size"] == 2
    for run in ("hf", "plain"):
        assert [n for n, _ in result[run]] == EXPECTED_BATCHES, run
        assert [lr for _, lr in result[run]] == pytest.approx(EXPECTED_LRS, rel=1e-12), run
    assert result["logged_batches"] == EXPECTED_BATCHES
    assert result["weight_difference"] < 1e-4 < result["moved"] / 100
    # Stages 2 and 3 accumulate (2 and 4 micro-batches a process): 12 steps measured, a finite B_simple.
    assert result["noise_steps"] == 12 and result["b_simple"] is not None
