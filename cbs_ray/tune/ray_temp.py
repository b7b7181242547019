"""Where a local Ray keeps its session: a private folder under a temp dir short enough for Ray's AF_UNIX sockets.

Linux allows an AF_UNIX socket path of 107 bytes (``sun_path`` is 108 with its NUL; Ray checks the same in
``ray._private.utils.validate_socket_filepath``). Ray 2.59-2.60 makes every socket of a session in
``<temp dir>/session_<date>_<time>_<microseconds>_<pid>/sockets/``: the raylet's (``raylet``), the object store's
(``plasma_store``: ``ray._private.node.Node._prepare_socket_file``) and one per dashboard head module that runs
as a subprocess (``dash_<class name>``: ``ray.dashboard.subprocesses.utils.get_socket_path``), whose longest,
``dash_TaskEventsHead``, is 7 bytes longer than ``plasma_store``. The check counted ``plasma_store``: a TMPDIR of
29 characters passed it and then the dashboard's ``MetricsHead`` failed to start. The private folder is
``cbs-ray-<uid>``, or where that cannot be used a ``tempfile.mkdtemp`` named ``cbs-ray-`` and 8 random characters
(``tempfile._RandomNameSequence``), 7 bytes longer than ``cbs-ray-0``: each is checked with its own length.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from cbs_ray.spec.errors import SpecError

__all__ = ["UNIX_SOCKET_PATH_MAX", "RAY_SOCKET_NAMES", "RAY_SESSION_DIR", "RAY_SOCKET_TAIL", "PRIVATE_TEMP_DIR",
           "MKDTEMP_PREFIX", "MKDTEMP_NAME", "fits_ray_sockets", "private_temp_dir", "temp_roots"]

UNIX_SOCKET_PATH_MAX = 107
"""Linux's limit on an AF_UNIX socket's path (``sun_path`` is 108 bytes with its NUL)."""

RAY_SOCKET_NAMES = ("raylet", "plasma_store", "dash_JobHead", "dash_DataHead", "dash_NodeHead", "dash_EventHead",
                    "dash_StateHead", "dash_ServeHead",
                    "dash_TrainHead", "dash_ReportHead", "dash_MetricsHead", "dash_TaskEventsHead")
"""Every socket Ray 2.60 makes in a session's ``sockets/`` (the dashboard's: ``dash_`` and each
``SubprocessModule``'s class name; ``tests/tune/test_ray_temp_dir.py`` reads them from the installed Ray)."""

RAY_SESSION_DIR = "session_2026-12-02_02-51-03_123456_4194304"
"""The longest session folder: ``session_`` and ``%Y-%m-%d_%H-%M-%S_%f`` and the pid, up to Linux's largest
``pid_max`` (4194304, 2**22)."""

RAY_SOCKET_TAIL = f"/{RAY_SESSION_DIR}/sockets/{max(RAY_SOCKET_NAMES, key=len)}"
"""The longest path Ray puts under its temp dir for a socket."""

PRIVATE_TEMP_DIR = "cbs-ray-{uid}"
"""Ray's temp dir of a local search, under the system's temp dir, private to the user (mode 0700)."""

MKDTEMP_PREFIX = "cbs-ray-"
MKDTEMP_NAME = MKDTEMP_PREFIX + "x" * 8
"""As long as the fallback's name: ``mkdtemp`` adds 8 characters to its prefix."""


def fits_ray_sockets(private_dir: str) -> bool:
    """Whether Ray's longest socket path fits AF_UNIX's limit with Ray's temp dir ``<private_dir>/ray``."""
    return len(f"{private_dir}/ray{RAY_SOCKET_TAIL}".encode()) <= UNIX_SOCKET_PATH_MAX


def temp_roots() -> list[str]:
    """Where the private folder may go, in order: the system's temp dir (``TMPDIR``), then ``/tmp``."""
    return list(dict.fromkeys((tempfile.gettempdir(), "/tmp")))


def _own_private_dir(root: str) -> str | None:
    """``<root>/cbs-ray-<uid>``, made 0700 if new, where it is a directory this user owns with no access for
    others; else None."""
    path = Path(root) / PRIVATE_TEMP_DIR.format(uid=os.getuid())
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = path.lstat()
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
            return str(path)
    except OSError:
        pass
    return None


def private_temp_dir() -> str:
    """``<tmp>/cbs-ray-<uid>`` (0700), else a fresh ``mkdtemp`` (0700 too) where that is not usable, under the
    first temp root where the folder's own name leaves Ray's sockets within the limit; a ``SpecError`` naming
    the cause and the fix where none does."""
    for root in temp_roots():
        if not (os.path.isdir(root) and os.access(root, os.W_OK | os.X_OK)):
            continue
        if fits_ray_sockets(f"{root}/{PRIVATE_TEMP_DIR.format(uid=os.getuid())}"):
            own = _own_private_dir(root)
            if own is not None:
                return own
        if fits_ray_sockets(f"{root}/{MKDTEMP_NAME}"):
            return tempfile.mkdtemp(prefix=MKDTEMP_PREFIX, dir=root)
    raise SpecError(f"TMPDIR: {tempfile.gettempdir()} is too long for Ray's socket paths (AF_UNIX allows "
                    f"{UNIX_SOCKET_PATH_MAX} bytes) and /tmp cannot be written; set TMPDIR to a short folder")
