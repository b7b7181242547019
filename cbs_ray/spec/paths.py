"""The one expansion of a user's path (``~``, ``~user``): every path a user gives (``data.path``, ``storage_path``,
``--output``, ``--resume``, the experiment a report reads, ``branch.controls_from``, ...) is expanded here, so that
a home folder that cannot be found (``~nosuchuser/x``; no ``$HOME``) is one line naming the field, not pathlib's
bare ``RuntimeError``."""

from __future__ import annotations

import os
from pathlib import Path

from cbs_ray.spec.errors import SpecError

__all__ = ["expand_user"]


def expand_user(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded (``Path.expanduser``); a ``SpecError`` naming ``what``
    (the field or flag the path came from) where that home folder is unknown."""
    try:
        return Path(path).expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory"
        user = str(path)[1:].split("/", 1)[0]
        whose = f"user {user!r}" if user else "this user ($HOME is unset)"
        raise SpecError(f"{what}: {path}: no home folder is known for {whose} (~{user} cannot be expanded)") from None
