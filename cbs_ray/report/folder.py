"""The folder a report is written to, held by one experiment at a time (issue 29 row 18).

A report folder that holds another experiment's report (its ``summary.json`` names another experiment) is
cleared of that report's files first, with a line saying so, so that a new report never sits beside a stale
``trials.csv`` or plot of another search; and two reports written into one folder at once take turns
(an exclusive lock on ``.cbs_report.lock`` while the files are written)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import sys
from pathlib import Path

__all__ = ["REPORT_FILES", "report_folder"]

REPORT_FILES = ("summary.json", "report.md", "report.html", "trials.csv", "history.csv", "metric_vs_batch.png",
                "steps_vs_samples.png", "pareto.png", "lr_vs_batch.png", "noise_scale.png", "cbs_over_training.png",
                "schedule_frontier.png", "ladder.png")
"""Every file a report of either method writes, and only those: nothing else in the folder is touched."""


@contextlib.contextmanager
def report_folder(directory, experiment_path: str | None):
    """Hold ``directory`` (made if missing) for the report of ``experiment_path`` while inside: locked
    against a second writer, and cleared of another experiment's report files on the way in."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".cbs_report.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            _clear_another_experiments_report(directory, experiment_path)
            yield directory
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _clear_another_experiments_report(directory: Path, experiment_path: str | None) -> None:
    try:
        held = json.loads((directory / "summary.json").read_text()).get("experiment_path")
    except (OSError, ValueError, AttributeError):  # no report there yet (or not ours to read): nothing to clear
        return
    if held and experiment_path and held != experiment_path:
        removed = [name for name in REPORT_FILES if (directory / name).is_file()]
        for name in removed:
            (directory / name).unlink()
        print(f"report: {directory} held the report of {held}; its {len(removed)} files were removed",
              file=sys.stderr, flush=True)
