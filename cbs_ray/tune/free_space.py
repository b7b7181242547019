"""Free space under a local ``storage_path``, measured without Ray: the check before a search
starts (``check_free_space``, which a ``--dry-run`` makes too) and what ``tune.disk_watch.DiskWatch`` reads while
one runs."""

from __future__ import annotations

import shutil
from typing import Callable, Optional

from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.paths import expand_user

__all__ = ["MIN_FREE_BYTES", "free_bytes", "check_free_space", "megabytes"]

MIN_FREE_BYTES = 64 * 2 ** 20
"""The free space a search keeps under a local ``storage_path``: room for Tune's next snapshot of the experiment
and a few trials' checkpoints of a small model. Below it a search does not start, and a running one stops."""


def free_bytes(path: str) -> Optional[int]:
    """Free bytes on the filesystem of ``path`` (its nearest existing folder; a ``file://`` URI is a local path
too), None for another URI or an unreadable one."""
    if path.startswith("file://"):
        path = path.removeprefix("file://")
    elif "://" in path:
        return None
    folder = expand_user(path, "storage_path")
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def megabytes(n: int) -> str:
    return f"{n / 2 ** 20:.1f} MB"


def check_free_space(storage: str, *, free: Callable[[str], Optional[int]] = free_bytes) -> None:
    """A ``SpecError`` before Ray starts when a local ``storage`` has less than ``MIN_FREE_BYTES`` free."""
    left = free(storage)
    if left is not None and left < MIN_FREE_BYTES:
        raise SpecError(f"storage_path: {storage} has {megabytes(left)} free, under the {megabytes(MIN_FREE_BYTES)} "
                        f"a search keeps free (a full disk truncates Tune's state and the trials' results); free "
                        f"space there or choose another storage_path")
