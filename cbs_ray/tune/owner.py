"""One owner per experiment: the driver that starts or resumes an experiment holds an exclusive ``flock`` until it
has reported, and a second driver is refused in one line. The kernel drops a ``flock`` when its holder's descriptor
closes, so the lock dies with its process (a SIGKILL, an OOM kill), and a resume after a crash is never refused
(flock(2); ``fcntl.flock`` in Python's docs).

What is locked is the experiment folder itself, through a descriptor on the directory: a lock file alone could be
removed or replaced (by a link, a FIFO) while its owner ran, and the next driver would lock the new file and start
a second Tune run on the same folder. The folder cannot be swapped from under its owner's descriptor. The lock file
``<experiment>/.cbs_owner.lock`` is locked as well (on NFS its ``flock`` reaches the server, so a driver on another
machine is refused too); it is opened without following a link or waiting on a FIFO, must be a regular file, and
must still be the file at that path once locked. Experiments on object storage (``s3://``, ``gs://``) have no local
folder to lock: they are not guarded."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import stat
from pathlib import Path

from cbs_ray.spec.errors import SpecError

__all__ = ["OWNER_LOCK", "ExperimentBusy", "experiment_owner"]

OWNER_LOCK = ".cbs_owner.lock"


class ExperimentBusy(SpecError):
    """Another driver holds the experiment (it is running or resuming it): the message says which and what to do."""


def _busy(experiment_path: str) -> ExperimentBusy:
    return ExperimentBusy(
        f"{experiment_path}: another cbs-ray process is running or resuming this experiment (it holds "
        f"{OWNER_LOCK}); wait for it to end, or stop it, then: cbs-ray search --resume "
        f"{shlex.quote(experiment_path)}")


def _lock(descriptor: int, experiment_path: str) -> None:
    """An exclusive ``flock`` on ``descriptor`` at once, or ``ExperimentBusy``."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(experiment_path) from None


def _open_lock_file(lock: Path, experiment_path: str) -> int:
    """A descriptor on the regular file at ``lock`` (made if missing), neither following a link nor waiting on a
    FIFO; ``SpecError`` for anything else standing there."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(lock, flags, 0o644)
    except OSError as e:
        raise SpecError(f"{experiment_path}: cannot open its owner lock {lock} ({e.strerror or e}; cbs-ray never "
                        "follows a link there): remove it, then run again") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise SpecError(f"{experiment_path}: its owner lock {lock} is not a regular file (a FIFO or a device); "
                        "remove it, then run again")
    return descriptor


def _still_at(lock: Path, descriptor: int) -> bool:
    """Whether the file ``descriptor`` has open is still the one at ``lock`` (not removed or replaced since)."""
    try:
        on_disk = os.stat(lock, follow_symlinks=False)
    except OSError:
        return False
    held = os.fstat(descriptor)
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


@contextlib.contextmanager
def experiment_owner(experiment_path: str):
    """Hold ``experiment_path`` (a local experiment folder) against any other driver while inside; raises
    ``ExperimentBusy`` at once if another process holds it, ``SpecError`` where its folder cannot be opened or its
    lock file is not a regular file. Object storage: nothing is held."""
    if "://" in experiment_path and not experiment_path.startswith("file://"):
        yield
        return
    folder = Path(experiment_path.removeprefix("file://"))
    lock = folder / OWNER_LOCK
    with contextlib.ExitStack() as held:  # closing a descriptor releases its lock
        try:
            if experiment_path.startswith("file://"):  # Tune makes a file:// experiment's folder later
                folder.mkdir(parents=True, exist_ok=True)
            folder_descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise SpecError(f"{experiment_path}: cannot open the experiment folder ({e.strerror or e})") from None
        held.callback(os.close, folder_descriptor)
        _lock(folder_descriptor, experiment_path)
        lock_descriptor = _open_lock_file(lock, experiment_path)
        held.callback(os.close, lock_descriptor)
        _lock(lock_descriptor, experiment_path)
        if not _still_at(lock, lock_descriptor):
            raise SpecError(f"{experiment_path}: its owner lock {lock} was replaced while cbs-ray locked it; "
                            "run again")
        yield
