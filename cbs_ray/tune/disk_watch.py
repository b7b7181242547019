"""Free space under ``storage_path``: a disk that filled during a search truncated Tune's
experiment state and every trial's ``result.json`` while Tune synced them, so neither ``--resume`` nor
``cbs-ray report`` found anything of a search that had trained for minutes.

Two guards, for local storage (object storage does not fill): before Ray starts, a ``storage_path`` with less
than ``MIN_FREE_BYTES`` free is refused in one line; while the search runs, ``DiskWatch`` (a Tune callback on
the driver) checks the free space at most once a second and, below the same margin, stops the search as
Ctrl-C does (Tune saves its state, intact, while there is still room) and the search ends in one line naming
the path and the command that continues it once space is freed."""

from __future__ import annotations

import os
import signal
import time

from ray.tune import Callback

from cbs_ray.records.names import resume_command
from cbs_ray.records.storage import ReportError
from cbs_ray.tune.free_space import MIN_FREE_BYTES, check_free_space, free_bytes, megabytes

__all__ = ["MIN_FREE_BYTES", "DiskWatch", "StorageLow", "check_free_space", "free_bytes", "stopped_for"]

stopped_for: dict = {}
"""What the watch saw when it stopped the search in this driver (``path``, ``free``), for the one line after it."""


class StorageLow(ReportError):
    """The search stopped because ``storage_path`` was nearly full; its message says where and how to go on."""


def storage_low_message(experiment_path: str) -> str:
    """The one line of a search the watch stopped."""
    return (f"storage_path: {stopped_for['path']} had {megabytes(stopped_for['free'])} free, under the "
            f"{megabytes(MIN_FREE_BYTES)} a search keeps free: the search stopped before the disk filled, every "
            f"trial's results and checkpoints kept; free space, then continue with: {resume_command(experiment_path)}")


class DiskWatch(Callback):
    """Stops the search, as Ctrl-C does, once the free space under ``storage`` falls below ``MIN_FREE_BYTES``
    (checked at most every ``every_s`` seconds, at the start of Tune's steps)."""

    def __init__(self, storage: str, every_s: float = 1.0):
        self.storage, self.every_s = storage, every_s
        self._checked_at = 0.0

    def on_step_begin(self, iteration, trials, **info):
        now = time.monotonic()
        if now - self._checked_at < self.every_s or stopped_for:
            return
        self._checked_at = now
        left = free_bytes(self.storage)
        if left is not None and left < MIN_FREE_BYTES:
            stopped_for.update(path=self.storage, free=left)
            os.kill(os.getpid(), signal.SIGINT)  # Tune's own graceful stop: it saves the state and ends
