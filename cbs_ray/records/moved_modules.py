"""Reading and resuming experiments written before the search methods moved into ``cbs_ray.methods``
(and the methods' spec sections out of ``cbs_ray.spec``).

Tune pickles what a search hands it by module and name (the searcher, the scheduler, the stoppers and callbacks
with the experiment's state; the trials' configs), so an experiment written before the move names the old modules
(``cbs_ray.tune.branch``, ``cbs_ray.tune.per_batch_asha``, ``cbs_ray.analysis.ladder_stop``, ...). While
inside ``moved_module_names`` each old name imports as the module it became (``MOVED_MODULES``): ``pickle`` finds the
same class under its old path, so ``--resume`` restores the searcher's and the stoppers' state as before and the
report reads the experiment as before. The names resolve only when ``pickle`` asks for them (a finder on
``sys.meta_path``: no module is loaded that the pickle does not name) and are taken away on the way out, so that no
new code can import an old path. Like ``records.legacy`` (the older flat modules) it imports nothing of the package
by name: the module a name became is imported by its dotted path when asked for.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Iterator, Optional, Sequence

__all__ = ["MOVED_MODULES", "moved_module_names"]

MOVED_MODULES: dict[str, str] = {
    "cbs_ray.tune.scratch": "cbs_ray.methods.scratch.search",
    "cbs_ray.tune.bisection_search": "cbs_ray.methods.scratch.bisection_search",
    "cbs_ray.tune.per_batch_asha": "cbs_ray.methods.scratch.per_batch_asha",
    "cbs_ray.analysis.summary": "cbs_ray.methods.scratch.reading",
    "cbs_ray.report.scratch": "cbs_ray.methods.scratch.report",
    "cbs_ray.analysis.summary_record": "cbs_ray.methods.scratch.summary",
    "cbs_ray.analysis.answer": "cbs_ray.methods.scratch.answer",
    "cbs_ray.analysis.readings": "cbs_ray.methods.scratch.critical_batch",
    "cbs_ray.report.text": "cbs_ray.methods.scratch.headline",
    "cbs_ray.tune.branch": "cbs_ray.methods.branch.search",
    "cbs_ray.tune.branch_gate": "cbs_ray.methods.branch.gate",
    "cbs_ray.tune.trunk_watch": "cbs_ray.methods.branch.trunk_watch",
    "cbs_ray.tune.fair_controls": "cbs_ray.methods.branch.fair_controls",
    "cbs_ray.analysis.branch_summary": "cbs_ray.methods.branch.reading",
    "cbs_ray.analysis.branch_points": "cbs_ray.methods.branch.reading_points",
    "cbs_ray.analysis.branch_schedule": "cbs_ray.methods.branch.reading_schedule",
    "cbs_ray.analysis.branch_trend": "cbs_ray.methods.branch.reading_trend",
    "cbs_ray.analysis.schedule_verdicts": "cbs_ray.methods.branch.reading_verdicts",
    "cbs_ray.report.branch": "cbs_ray.methods.branch.report",
    "cbs_ray.report.same_spec": "cbs_ray.methods.branch.same_spec",
    "cbs_ray.report.trainer_snippets": "cbs_ray.methods.branch.trainer_snippets",
    "cbs_ray.analysis.control_configs": "cbs_ray.methods.branch.control_configurations",
    "cbs_ray.tune.ladder": "cbs_ray.methods.ladder.search",
    "cbs_ray.analysis.ladder_summary": "cbs_ray.methods.ladder.reading",
    "cbs_ray.analysis.ladder_stop": "cbs_ray.methods.ladder.reading_stop",
    "cbs_ray.report.ladder": "cbs_ray.methods.ladder.report",
    "cbs_ray.spec.ladder_section": "cbs_ray.methods.ladder.settings",
    "cbs_ray.spec.branch_section": "cbs_ray.methods.branch.settings",
}
"""Each module that moved into ``cbs_ray.methods``, by its old dotted path: the path it has now (a module that was
split keeps its old path: ``report.page`` and ``report.plots`` hold what every method's report shares)."""


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module it became: that very module, not a copy (its classes are the same)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return importlib.import_module(self.new)

    def exec_module(self, module: types.ModuleType) -> None:
        return None  # imported already, by create_module


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds each old name of ``MOVED_MODULES`` (and only those), noting what it found so it can be taken away."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[types.ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        new = MOVED_MODULES.get(fullname)
        if new is None:
            return None
        self.found.append(fullname)
        return importlib.util.spec_from_loader(fullname, _Alias(new))


@contextlib.contextmanager
def moved_module_names() -> Iterator[None]:
    """While inside: every old path of ``MOVED_MODULES`` imports as the module it became (what ``pickle`` does
    with a pickled name of an old module). Everything added is taken away on the way out: the finder, the old
    names in ``sys.modules`` and as attributes of their packages."""
    finder = _MovedFinder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for old in dict.fromkeys(finder.found):
            aliased = sys.modules.pop(old, None)
            parent_name, _, child = old.rpartition(".")
            parent = sys.modules.get(parent_name)
            if aliased is not None and parent is not None and getattr(parent, child, None) is aliased:
                delattr(parent, child)
