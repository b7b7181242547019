"""One owner per experiment (issue 47): two ``--resume`` of one experiment at once both ran, trained the same point
twice in two trial folders, retrained a finished trial and wrote three Tune states. The driver that starts or
resumes an experiment now holds an exclusive ``flock`` on ``<experiment>/.cbs_owner.lock`` until it has reported;
a second driver is refused in one line. The kernel drops a ``flock`` when its holder's descriptor closes, so the
lock dies with its process (a SIGKILL, an OOM kill), and a resume after a crash is never refused (flock(2);
``fcntl.flock`` in Python's docs). Experiments on object storage (``s3://``, ``gs://``) have no local folder to
lock: they are not guarded."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
from pathlib import Path

from cbs_ray.spec.errors import SpecError

__all__ = ["OWNER_LOCK", "ExperimentBusy", "experiment_owner"]

OWNER_LOCK = ".cbs_owner.lock"


class ExperimentBusy(SpecError):
    """Another driver holds the experiment (it is running or resuming it): the message says which and what to do."""


@contextlib.contextmanager
def experiment_owner(experiment_path: str):
    """Hold ``experiment_path`` (a local experiment folder) against any other driver while inside; raises
    ``ExperimentBusy`` at once if another process holds it. Object storage: nothing is held."""
    if "://" in experiment_path and not experiment_path.startswith("file://"):
        yield
        return
    folder = Path(experiment_path.removeprefix("file://"))
    lock = folder / OWNER_LOCK
    try:
        if experiment_path.startswith("file://"):  # Tune makes a file:// experiment's folder later
            folder.mkdir(parents=True, exist_ok=True)
        if lock.is_symlink():  # not cbs-ray's: its target is never opened
            lock.unlink()
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise SpecError(f"{experiment_path}: cannot open its owner lock {lock} ({e.strerror or e})") from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ExperimentBusy(
                f"{experiment_path}: another cbs-ray process is running or resuming this experiment (it holds "
                f"{OWNER_LOCK}); wait for it to end, or stop it, then: cbs-ray search --resume "
                f"{shlex.quote(experiment_path)}") from None
        yield
    finally:
        os.close(descriptor)  # closing releases the lock
