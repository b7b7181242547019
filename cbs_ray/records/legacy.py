"""Reading experiments written before the package moved into subpackages (format 1, up to commit 37a5436).

Tune pickles what a search handed it (the stopper and callbacks, the per-batch ASHA, the searcher, the
trial-name function) by module and name, and those experiments name the old flat modules
(``cbs_ray.nothing_fits``, ``cbs_ray.trial``, ``cbs_ray.experiment``, ...). ``old_module_names`` makes each
old name resolve to the objects it held, now in the new modules, while Tune unpickles such an experiment
(the report, ``--resume``), and removes the stand-ins afterwards, so that no new code can import an old path.

The new modules are named here as strings and imported only inside ``old_module_names``: this module sits in
the bottom layer (``records``) and must not import the layers above it at import time.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types

__all__ = ["OLD_MODULES", "RENAMED", "old_module_names"]

OLD_MODULES: dict[str, tuple[str, ...]] = {
    "cbs_ray.branch_plan": ("cbs_ray.maths.budget", "cbs_ray.spec.branch_section", "cbs_ray.train.run_plan"),
    "cbs_ray.branch_search": ("cbs_ray.tune.branch",),
    "cbs_ray.budget": ("cbs_ray.maths.budget", "cbs_ray.spec.resolve"),
    "cbs_ray.checkpoint": ("cbs_ray.train.checkpoint",),
    "cbs_ray.data": ("cbs_ray.data.arrays", "cbs_ray.data.prepare", "cbs_ray.data.seq2seq_pairs"),
    "cbs_ray.experiment": ("cbs_ray.tune.api", "cbs_ray.tune.probe", "cbs_ray.tune.runner", "cbs_ray.tune.scratch"),
    "cbs_ray.metrics": ("cbs_ray.train.gauges",),
    "cbs_ray.nothing_fits": ("cbs_ray.tune.nothing_fits",),
    "cbs_ray.per_batch_asha": ("cbs_ray.tune.per_batch_asha",),
    "cbs_ray.spec": ("cbs_ray.spec.checks", "cbs_ray.spec.errors", "cbs_ray.spec.schema"),
    "cbs_ray.study": ("cbs_ray.tune.study",),
    "cbs_ray.tracker_callbacks": ("cbs_ray.tune.tracker_callbacks",),
    "cbs_ray.train_loop": ("cbs_ray.records.trial_report", "cbs_ray.train.loop"),
    "cbs_ray.trial": ("cbs_ray.train.config", "cbs_ray.train.trial"),
    "cbs_ray.trunk_watch": ("cbs_ray.tune.trunk_watch",),
    "cbs_ray.user_objects": ("cbs_ray.sources.user_objects",),
}
"""Each old flat module Tune may have pickled a name of, and the new modules that hold its names now."""

RENAMED: dict[str, dict[str, tuple[str, str]]] = {
    "cbs_ray.spec": {"SearchParams": ("cbs_ray.spec.schema", "SearchSection")},
    "cbs_ray.branch_plan": {"BranchPlan": ("cbs_ray.train.run_plan", "RunPlan")},
}
"""Names renamed with the move: old module → old name → (new module, new name)."""


@contextlib.contextmanager
def old_module_names():
    """While inside: every ``OLD_MODULES`` name resolves for ``pickle`` (a stand-in module holding the new
    modules' names; where the old name is now a package, ``cbs_ray.spec``, its names are added to the package
    for the while). Everything added is taken away on the way out."""
    added_modules, added_attributes = [], []
    for old, news in OLD_MODULES.items():
        names = {}
        for new in news:
            module = importlib.import_module(new)
            names.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
        for name, (new, new_name) in RENAMED.get(old, {}).items():
            module = importlib.import_module(new)
            if hasattr(module, new_name):  # (RunPlan only once the run plan has its new name)
                names[name] = getattr(module, new_name)
        present = sys.modules.get(old)
        if present is None:
            stand_in = types.ModuleType(old, f"stand-in for the old module {old} (records.legacy)")
            vars(stand_in).update(names)
            sys.modules[old] = stand_in
            added_modules.append(old)
        else:  # the old module's name is a package now
            for k, v in names.items():
                if not hasattr(present, k):
                    setattr(present, k, v)
                    added_attributes.append((present, k))
    try:
        yield
    finally:
        for old in added_modules:
            sys.modules.pop(old, None)
        for module, k in added_attributes:
            delattr(module, k)
