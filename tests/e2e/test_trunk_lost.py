"""A trunk whose process is killed (an OOM kill) ends the branch search in one line, in well under a minute,
instead of the branches that wait for its checkpoints holding every trial slot for ever (issue 29 row 1)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

LM = "search_spaces/tiny_causal_lm.yaml"
# Trunk B=8 over 8192 samples, reports every 1024, checkpoints at 2048 and 4096; no restart of a dead trial.
SMALL = ["search.method=branch", "training.budget_samples=8192", "training.eval_every_samples=1024",
         "asha.grace_period_samples=1024", "search.batch_sizes=[8, 16, 32]", "data.builtin_eval_examples=256",
         "data.builtin_train_examples=8192", "branch.checkpoints=[2048, 4096]", "branch.window=1024",
         "branch.batch_sizes=[16, 32]", "resources.max_failures=0"]


def _trial_processes() -> list[int]:
    """Ray's trial actors on this machine (one Ray cluster at a time: the tests' lock)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and b"ImplicitFunc" in Path(f"/proc/{entry}/cmdline").read_bytes():
                pids.append(int(entry))
        except OSError:
            continue
    return pids


@pytest.mark.slow  # ≈ 60 s on 2 cores, its own Ray: CI runs it in its `pytest -m slow` step beside plain pytest (issue 25)
def test_a_killed_trunk_ends_the_branch_search_in_under_a_minute(tmp_path):
    argv = [sys.executable, "-m", "cbs_ray.search", "--space", LM, "--output", str(tmp_path / "out")]
    for o in SMALL + [f"storage_path={tmp_path / 'ray_results'}"]:
        argv += ["--set", o]
    log = open(tmp_path / "search.log", "w")
    search = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, killed_at = time.monotonic() + 240, None
        while killed_at is None and time.monotonic() < deadline and search.poll() is None:
            reported = list((tmp_path / "ray_results").glob("*/trunk_*/result.json"))
            if reported and reported[0].stat().st_size and _trial_processes():
                for pid in _trial_processes():  # only the trunk runs before its first checkpoint
                    os.kill(pid, signal.SIGKILL)
                killed_at = time.monotonic()
            time.sleep(0.5)
        assert killed_at is not None, (tmp_path / "search.log").read_text()[-3000:]
        search.wait(timeout=90)
        ended_in = time.monotonic() - killed_at
    finally:
        if search.poll() is None:
            search.kill()
            search.wait()
    text = (tmp_path / "search.log").read_text()
    assert ended_in <= 60, (ended_in, text[-3000:])
    # Killed before 2048 or between 2048 and 4096: the branches from the checkpoints it never wrote are not run.
    # (2 branch batches at alpha 0.5 per checkpoint: the paper's one LR per batch)
    assert ("at 2048, 4096 samples; their 4 branches are not run" in text
            or "at 4096 samples; their 2 branches are not run" in text), text[-3000:]
    # Issue 40 row 6: a trunk that failed for good ends the search non-zero in one line, with no schedule
    # recommended from branches that never had their checkpoints; the report of what was measured is written.
    assert search.returncode == 1, text[-3000:]
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "the trunk (B=8) failed for good" in errors[0], text[-3000:]
    assert "interrupted" not in text and "Recommend" not in text, text[-3000:]
    assert (tmp_path / "out" / "summary.json").is_file()
