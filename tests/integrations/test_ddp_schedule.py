"""The schedule 8 → 16 → 32 under 2-process DDP (torchrun, gloo): HF Trainer and the plain-loop helper train
exactly those global batches at those sample counts, the LR × √2 per doubling, and end on the same weights."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("accelerate")
pytestmark = [pytest.mark.slow, pytest.mark.multiproc]  # two processes: run under the CPU lock

from schedule_runs import BASE_LR, EXPECTED_BATCHES  # noqa: E402

EXPECTED_LRS = [BASE_LR * m for m in [1.0] * 8 + [math.sqrt(2)] * 8 + [2.0] * 4]
HERE = Path(__file__).parent


def test_hf_and_plain_loop_train_the_schedule_under_two_process_ddp(tmp_path):
    out = tmp_path / "result.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parents[1]),
                                                        os.environ.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(HERE / "ddp_schedule_script.py"), str(out), str(tmp_path / "hf")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    start = done.stderr.find("Traceback")
    assert done.returncode == 0, done.stderr[start:start + 4000] if start >= 0 else done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    for run in ("hf", "plain"):
        assert [n for n, _ in result[run]] == EXPECTED_BATCHES, run
        assert [lr for _, lr in result[run]] == pytest.approx(EXPECTED_LRS, rel=1e-12), run
    assert result["logged_batches"] == EXPECTED_BATCHES
    assert result["weight_difference"] < 1e-4 < result["moved"] / 100
    # Stages 2 and 3 accumulate (2 and 4 micro-batches a process): 12 steps measured, a finite B_simple.
    assert result["noise_steps"] == 12 and result["b_simple"] is not None
