"""Issue 40 row 1: a disk that fills under storage_path while a search runs. Before, Tune's experiment state and
every trial's result.json were truncated (rc 1 after 855 stderr lines; neither --resume nor the report found a
trial). Now the search stops while there is room, in one line naming the path and the resume command, and what
the trials wrote stays readable by `cbs-ray report` and restorable by `--resume`. Needs root (a small tmpfs)."""

import os
import subprocess
import sys

import pytest

from cbs_ray.records.storage import damaged_tune_state
from cbs_ray.tune.disk_watch import MIN_FREE_BYTES


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    size = MIN_FREE_BYTES + 3 * 2 ** 20  # room for a few checkpoints of the tiny model above the margin
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow  # ≈ 60 s on 2 cores, its own Ray
def test_a_filling_disk_stops_the_search_in_one_line_and_keeps_every_result(small_disk, tmp_path):
    argv = [sys.executable, "-m", "cbs_ray.search", "--output", str(tmp_path / "out"),
            "--set", "search.num_trials=4", "--set", "search.batch_sizes=[16, 32]",
            "--set", f"storage_path={small_disk / 'ray'}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 1 and len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith(f"error: storage_path: {small_disk / 'ray'} had ") and \
        "cbs-ray search --resume" in errors[0], errors[0]
    [experiment] = (small_disk / "ray").glob("tiny-bert-sentiment-*")
    assert damaged_tune_state(str(experiment)) is None
    from ray import tune

    assert tune.Tuner.can_restore(str(experiment))
    report = subprocess.run([sys.executable, "-m", "cbs_ray.report", str(experiment), "--output",
                             str(tmp_path / "report")], capture_output=True, text=True, timeout=200)
    assert report.returncode == 0, report.stderr[-2000:]
    assert (tmp_path / "report" / "summary.json").is_file()
