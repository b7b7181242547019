"""The folder a report is written to, held by one experiment at a time.

A report folder that holds another experiment's report (its ``summary.json`` names another experiment) is
cleared of that report's files first, with a line saying so, so that a new report never sits beside a stale
``trials.csv`` or plot of another search; and two reports written into one folder at once take turns
(an exclusive lock on ``.cbs_report.lock`` while the files are written).

No writer follows a link it did not make: the lock file is opened with ``O_NOFOLLOW`` and never
truncated, and a report file's name that is a symbolic link (or anything but a plain file) is removed on the way
in, so that the file written there is a new one in this folder, never the link's target.

A report file with another hard link (``st_nlink > 1``: a ``cp -al`` snapshot's copy) is unlinked
the same way, so the snapshot keeps its own bytes; a report folder that is itself a symbolic link (one planted as
``./cbs_results/<name>``; an ``--output`` is resolved before it gets here) is refused; ``summary.json`` is read
only as a regular file of at most ``MAX_SUMMARY_BYTES``, opened without following a link or waiting on a FIFO; and
another experiment's report is cleared only where it is an earlier report of the same search (the same name
and method, a re-run): a scratch search named ``golden-ladder`` shares ``./cbs_results/golden-ladder`` with
the ladder report of ``golden``, and is refused there instead of deleting it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Iterator

from cbs_ray.records.bounded_file import read_regular_file
from cbs_ray.records.method_registry import DEFAULT_METHOD, method_report_files
from cbs_ray.records.storage import ReportError

__all__ = ["COMMON_REPORT_FILES", "report_files", "LOCK_FILE", "MAX_SUMMARY_BYTES", "report_folder", "FolderError",
           "held_summary", "foreign_report"]

LOCK_FILE = ".cbs_report.lock"

MAX_SUMMARY_BYTES = 256 * 2**20
"""The largest ``summary.json`` read back (256 MiB): a search of thousands of trials writes a few MB; a link to
``/dev/zero`` or a huge planted file is not read."""



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
def report_folder(directory: str | os.PathLike[str], experiment_path: str | None, *, name: str | None = None,
                  method: str | None = None) -> Iterator[Path]:
    """Hold ``directory`` (made if missing) for the report of ``experiment_path`` (of the search ``name`` by
    ``method``) while inside: locked against a second writer, and cleared of an earlier report of the same
    search on the way in (a report of another search there: ``FolderError``, nothing removed)."""
    directory = Path(directory)
    if directory.is_symlink():
        raise FolderError(f"report: {directory} is a symbolic link (to {os.readlink(directory)}), which cbs-ray did "
                          f"not make; nothing was written through it: remove it, or name the folder you mean with "
                          f"--output" + _rebuild(experiment_path))
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = _open_lock(directory / LOCK_FILE)
    except OSError as e:
        raise FolderError(_cannot_write(directory, experiment_path, e)) from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _clear_another_experiments_report(directory, experiment_path, name, method)
        _unlink_foreign_entries(directory)
        yield directory
    except OSError as e:  # a full disk, a read-only folder: the experiment itself is intact
        raise FolderError(_cannot_write(directory, experiment_path, e)) from None
    finally:
        os.close(lock)  # closing releases the lock


def _rebuild(experiment_path: str | None) -> str:
    return (f"; the experiment is intact: rebuild the report with cbs-ray report {shlex.quote(experiment_path)} "
            f"--output DIR") if experiment_path else ""


def _cannot_write(directory: Path, experiment_path: str | None, e: OSError) -> str:
    return f"report: cannot write to {directory} ({e.strerror or e}){_rebuild(experiment_path)}"


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
        elif entry.exists() and entry.lstat().st_nlink > 1:
            entry.unlink()
            print(f"report: {entry} had another hard link; this name was removed (the other keeps its content) and "
                  f"a new report file is written in its place", file=sys.stderr, flush=True)


def held_summary(directory: Path) -> dict | None:
    """The ``summary.json`` in ``directory`` as a dict, or None where there is none to read: not a regular file
    (a FIFO, a device, a link: opened with ``O_NOFOLLOW | O_NONBLOCK``, so nothing blocks or follows), over
    ``MAX_SUMMARY_BYTES``, or not a JSON object."""
    try:
        held = json.loads(read_regular_file(directory / "summary.json", MAX_SUMMARY_BYTES, follow_symlinks=False))
    except (OSError, ValueError, RecursionError):
        return None
    return held if isinstance(held, dict) else None


def foreign_report(directory: Path, experiment_path: str | None, name: str | None, method: str | None) -> str | None:
    """The line refusing ``directory`` when it holds the report of another search (another name or method, not
    an earlier run of this one), else None."""
    held = held_summary(directory)
    if not held or name is None or held.get("experiment_path") in (None, experiment_path):
        return None
    held_name, held_method = held.get("name"), held.get("method") or DEFAULT_METHOD
    if held_name is None or (held_name, held_method) == (name, method or DEFAULT_METHOD):
        return None
    return (f"report: {directory} holds the report of another search ({held_name!r}, {held_method}: "
            f"{held.get('experiment_path')}); nothing was removed; name another folder with --output"
            + _rebuild(experiment_path))


def _clear_another_experiments_report(directory: Path, experiment_path: str | None, name: str | None,
                                      method: str | None) -> None:
    problem = foreign_report(directory, experiment_path, name, method)
    if problem:
        raise FolderError(problem)
    held = (held_summary(directory) or {}).get("experiment_path")
    if held and experiment_path and held != experiment_path:
        removed = [name for name in report_files()
                   if (directory / name).is_file() and not (directory / name).is_symlink()]
        for name in removed:
            (directory / name).unlink()
        print(f"report: {directory} held the report of {held}; its {len(removed)} files were removed",
              file=sys.stderr, flush=True)
