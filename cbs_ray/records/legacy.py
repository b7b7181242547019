"""Reading experiments written before the package moved into subpackages (format 1, up to commit 37a5436).

Tune's state of each trial holds what a search handed Tune, pickled by module and name (the trial-name function
above all; the stopper, callbacks, per-batch ASHA and searcher in its other files), and those experiments name the
old flat modules (``cbs_ray.nothing_fits``, ``cbs_ray.trial``, ``cbs_ray.experiment``, ...). Reading such an
experiment (the report, ``records.storage``) uses none of those objects, only the trials' ids, states, configs and
files: ``old_module_names`` makes every name of an old module resolve, while inside, to an inert stand-in
(``StandIn``) that takes whatever arguments and state were pickled, and takes the stand-ins away on the way out, so
that no new code can import an old path. It imports nothing of the package: the bottom layer reads an old
experiment without loading the layers above it by name. Such an experiment is read, not resumed (``--resume``
refuses format 1: ``tune.api``).
"""

from __future__ import annotations

import contextlib
import sys
import types
from pathlib import Path
from typing import Any, Iterator

__all__ = ["OLD_MODULES", "StandIn", "old_module_names"]

OLD_MODULES: tuple[str, ...] = (
    "cbs_ray.branch_plan", "cbs_ray.branch_search", "cbs_ray.budget", "cbs_ray.checkpoint", "cbs_ray.data",
    "cbs_ray.experiment", "cbs_ray.metrics", "cbs_ray.nothing_fits", "cbs_ray.per_batch_asha", "cbs_ray.spec",
    "cbs_ray.study", "cbs_ray.tracker_callbacks", "cbs_ray.train_loop", "cbs_ray.trial", "cbs_ray.trunk_watch",
    "cbs_ray.user_objects",
)
"""Each old flat module Tune may have pickled a name of (``cbs_ray.data`` and ``cbs_ray.spec`` are packages now)."""


class StandIn:
    """What a name of an old module unpickles as while an old experiment is read: it takes any arguments
    (``pickled_args``) and any state (``pickled_state``), and does nothing."""

    def __new__(cls, *args: Any, **kwargs: Any) -> StandIn:
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.pickled_args = args, kwargs

    def __setstate__(self, state: Any) -> None:
        self.__dict__["pickled_state"] = state

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None


def stand_in(module: str, name: str) -> type:
    """A ``StandIn`` class named as the old module's name was (what the reader's repr shows)."""
    return type(name, (StandIn,), {"__module__": module, "__qualname__": name})


def is_package_now(old: str) -> bool:
    """Whether the old module's name is a package of today's (``cbs_ray.data``, ``cbs_ray.spec``): a stand-in
    module must not hide it."""
    root = sys.modules["cbs_ray"]
    return any(Path(folder, old.rsplit(".", 1)[1], "__init__.py").is_file() for folder in root.__path__)


@contextlib.contextmanager
def old_module_names() -> Iterator[None]:
    """While inside: every name of an ``OLD_MODULES`` module resolves for ``pickle`` to a ``stand_in`` (a module
    of stand-ins; where the old name is a package now, the package's missing names for the while, PEP 562's
    module ``__getattr__``). Everything added is taken away on the way out."""
    added_modules, patched_packages = [], []
    for old in OLD_MODULES:
        made: dict[str, type] = {}

        def missing(name: str, old: str = old, made: dict[str, type] = made) -> type:
            if name.startswith("__") and name.endswith("__"):
                raise AttributeError(name)
            return made.setdefault(name, stand_in(old, name))

        present = sys.modules.get(old)
        if present is None and is_package_now(old):  # not imported here, so nothing of it was read: left alone
            continue
        if present is None:
            module = types.ModuleType(old, f"stand-in for the old module {old} (records.legacy)")
            setattr(module, "__getattr__", missing)  # PEP 562: a module's own __getattr__
            sys.modules[old] = module
            added_modules.append(old)
        elif "__getattr__" not in vars(present):  # the old module's name is a package now
            setattr(present, "__getattr__", missing)
            patched_packages.append(present)
    try:
        yield
    finally:
        for old in added_modules:
            sys.modules.pop(old, None)
        for package in patched_packages:
            del package.__getattr__
