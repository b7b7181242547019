"""The folder a report is written to, held by one experiment at a time (issue 29 row 18).

A report folder that holds another experiment's report (its ``summary.json`` names another experiment) is
cleared of that report's files first, with a line saying so, so that a new report never sits beside a stale
``trials.csv`` or plot of another search; and two reports written into one folder at once take turns
(an exclusive lock on ``.cbs_report.lock`` while the files are written).

No writer follows a link it did not make (issue 40 row 2): the lock file is opened with ``O_NOFOLLOW`` and never
truncated, and a report file's name that is a symbolic link (or anything but a plain file) is removed on the way
in, so that the file written there is a new one in this folder, never the link's target."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Iterator

from cbs_ray.records.method_registry import method_report_files
from cbs_ray.records.storage import ReportError

__all__ = ["COMMON_REPORT_FILES", "report_files", "LOCK_FILE", "report_folder", "FolderError"]

LOCK_FILE = ".cbs_report.lock"



class FolderError(ReportError):
    """The report folder cannot be held or written; the message names the folder and how to rebuild the report."""


COMMON_REPORT_FILES = ("summary.json", "report.md", "report.html", "trials.csv", "history.csv", "metric_vs_batch.png",
                       "steps_vs_samples.png", "pareto.png", "lr_vs_batch.png", "noise_scale.png",
                       "cbs_over_training.png", "schedule_frontier.png")
"""The files the built-in reports write; a method's own beyond them are in its registry entry."""


def report_files() -> tuple[str, ...]:
    """Every file a report of any registered method writes, and only those: nothing else in the folder is
    touched."""
    return COMMON_REPORT_FILES + tuple(f for f in method_report_files() if f not in COMMON_REPORT_FILES)


@contextlib.contextmanager
def report_folder(directory: str | os.PathLike[str], experiment_path: str | None) -> Iterator[Path]:
    """Hold ``directory`` (made if missing) for the report of ``experiment_path`` while inside: locked
    against a second writer, and cleared of another experiment's report files on the way in."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = _open_lock(directory / LOCK_FILE)
    except OSError as e:
        raise FolderError(_cannot_write(directory, experiment_path, e)) from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _clear_another_experiments_report(directory, experiment_path)
        _unlink_foreign_entries(directory)
        yield directory
    except OSError as e:  # a full disk, a read-only folder: the experiment itself is intact
        raise FolderError(_cannot_write(directory, experiment_path, e)) from None
    finally:
        os.close(lock)  # closing releases the lock


def _cannot_write(directory: Path, experiment_path: str | None, e: OSError) -> str:
    rebuild = (f"; the experiment is intact: rebuild the report with cbs-ray report {shlex.quote(experiment_path)} "
               f"--output DIR") if experiment_path else ""
    return f"report: cannot write to {directory} ({e.strerror or e}){rebuild}"


def _open_lock(path: Path) -> int:
    """The lock file's descriptor: created if missing, never truncated, never through a link (a link in its
    place is not cbs-ray's: it is removed, its target untouched)."""
    if path.is_symlink():
        path.unlink()
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)


def _unlink_foreign_entries(directory: Path) -> None:
    """Remove each report file's name that is a link (or not a plain file), which cbs-ray did not make, so that
    writing the report replaces the name instead of following it."""
    for name in report_files():
        entry = directory / name
        if entry.is_symlink():
            entry.unlink()
            print(f"report: {entry} was a symbolic link; it was removed (its target is untouched) and a report "
                  f"file is written in its place", file=sys.stderr, flush=True)
        elif entry.exists() and not entry.is_file():
            raise FolderError(f"report: {entry} is not a file; the report cannot be written there")


def _clear_another_experiments_report(directory: Path, experiment_path: str | None) -> None:
    try:
        held = json.loads((directory / "summary.json").read_text()).get("experiment_path")
    except (OSError, ValueError, AttributeError):  # no report there yet (or not ours to read): nothing to clear
        return
    if held and experiment_path and held != experiment_path:
        removed = [name for name in report_files()
                   if (directory / name).is_file() and not (directory / name).is_symlink()]
        for name in removed:
            (directory / name).unlink()
        print(f"report: {directory} held the report of {held}; its {len(removed)} files were removed",
              file=sys.stderr, flush=True)
