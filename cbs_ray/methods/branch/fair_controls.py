"""``branch.controls_from`` on the driver (issue 50, item 4; issue 60): find the from-scratch search whose best
configuration per batch the schedule validation's fixed-batch controls train at (a named experiment, or this
experiment's own ``controls`` stage), and read it. The choice of each
control's configuration is ``analysis.control_configs``; this module only locates and reads the experiment. A
search qualifies by its method's registry entry (``MethodEntry.best_per_batch``), not by the method's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from cbs_ray.analysis.control_configs import NONE, TRUNK, best_configurations, budget_problem, control_configurations
from cbs_ray.records.columns import Column
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.method_registry import method_entry
from cbs_ray.records.storage import ReportError, load_history
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.paths import expand_user
from cbs_ray.spec.schema import SearchSpec

__all__ = ["CONTROLS_STAGE", "SCRATCH", "best_batch", "tuned_controls", "chosen_controls", "unused_controls_warning"]

SCRATCH = "scratch"
"""``branch.controls_from: scratch``: the from-scratch search run as a stage of this experiment (``CONTROLS_STAGE``)
before the validation, resumed like every stage (issue 60)."""
CONTROLS_STAGE = "controls"
"""The stage's name in the experiment's stage record (``ExperimentMeta.stages``)."""


def _named(spec: SearchSpec, value: str) -> str:
    """The experiment ``value`` names: a directory, or a folder of that name in the storage; else one line."""
    for where in (expand_user(value, "branch.controls_from"), Path(spec.storage_uri) / value):
        if where.is_dir():
            return str(where)
    raise SpecError(f"branch.controls_from: no experiment {value!r} (neither a directory nor a folder in "
                    f"{spec.storage_uri}); name a from-scratch search at this budget, or set "
                    f"branch.controls_from=none")


def unused_controls_warning(spec: SearchSpec) -> Optional[str]:
    """The plan's warning where ``branch.controls_from`` is set without ``--validate-schedule``: only the schedule's
    validation trains fixed-batch controls, so the value goes unused (and ``--resume`` cannot add the validation
    later); a named experiment that does not exist is said too (issue 58: it was accepted without a word). A warning,
    not a refusal: the run reads nothing from it."""
    value = spec.branch.controls_from
    if spec.branch.validate_schedule or value == NONE:
        return None
    missing = ""
    if value != SCRATCH:
        try:
            _named(spec, value)
        except (SpecError, RuntimeError, OSError, ValueError):  # RuntimeError: "~nosuchuser/…"
            missing = f", and names no experiment (neither a directory nor a folder in {spec.storage_uri})"
    return (f"  warning: branch.controls_from={value!r:.200} is ignored without --validate-schedule (only the "
            f"schedule's validation trains fixed-batch controls){missing}")


def tuned_controls(spec: SearchSpec, budget_samples: int, *,
                   stage_experiment: Optional[str] = None) -> tuple[str, dict[int, dict]]:
    """(``controls_from`` as recorded: the experiment's path, or ``none``; each batch's best configuration in
    it, ``analysis.control_configs.best_configurations``). A ``SpecError`` (one line, exit 2) where a named
    experiment is missing, unreadable, not a from-scratch search, ran another budget, or completed no trial.
    ``scratch``: the stage's experiment ``stage_experiment`` (it trained this budget, on the spec's metric);
    before the stage has run (the check before Ray) or where it completed no trial, ``none`` (the latter said)."""
    value = spec.branch.controls_from
    if value == NONE:
        return NONE, {}
    if value == SCRATCH:
        if stage_experiment is None:
            return NONE, {}
        best = best_configurations(load_history(stage_experiment), metric=spec.search.metric,
                                   mode=spec.search.mode, budget_samples=int(budget_samples))
        if not best:
            print(f"schedule: the from-scratch stage {stage_experiment} completed no trial: the controls train at "
                  f"the trunk's configuration", flush=True)
            return NONE, {}
        return stage_experiment, best
    path = _named(spec, value)
    try:
        meta = ExperimentMeta.read(path)
        if not method_entry(meta.method).best_per_batch:
            raise SpecError(f"branch.controls_from: {path} is a {meta.method} search, not a from-scratch one")
        problem = budget_problem(meta.budget_samples, budget_samples, where=path)
        if problem:
            raise SpecError(problem)
        best = best_configurations(load_history(path), metric=meta.metric, mode=meta.mode,
                                   budget_samples=int(budget_samples))
    except ReportError as e:
        raise SpecError(f"branch.controls_from: {path}: {e}") from None
    if not best:
        raise SpecError(f"branch.controls_from: {path}: no trial completed the budget, so it has no configuration "
                        f"to give the controls")
    return path, best


def best_batch(best: dict[int, dict], *, metric: str, mode: str) -> Optional[int]:
    """The batch whose best configuration reached the best ``metric`` (``mode``: ``min`` or ``max``; a tie: the
    smaller batch): B*, the best tuned fixed batch at the budget (``branch.seesaw_start: tuned``); None without one."""
    scored = [(float(v[metric]) * (1 if mode == "min" else -1), int(b)) for b, v in best.items() if metric in v]
    return min(scored)[1] if scored else None


def chosen_controls(spec: SearchSpec, budget_samples: int, controls, *, alpha: float, warmup_fraction: float,
                    recorded: Optional[dict] = None, stage_experiment: Optional[str] = None,
                    ) -> tuple[str, list[dict], dict[int, tuple[float, float]]]:
    """(``controls_from``, each control batch's configuration record, batch → (alpha, warmup) of the tuned ones
    for ``methods.branch.runs.validation_configs``): as ``recorded`` in the experiment's metadata where the validation was
    decided before (a resume), else read now (``tuned_controls``; ``stage_experiment``: the ``scratch`` stage's)."""
    if recorded and recorded.get("control_configurations") is not None:
        source, configs = str(recorded.get("controls_from", NONE)), list(recorded["control_configurations"])
    else:
        source, best = tuned_controls(spec, budget_samples, stage_experiment=stage_experiment)
        configs = control_configurations(controls, best, alpha=alpha, warmup_fraction=warmup_fraction,
                                         source=source)
    tuned = {int(c[Column.batch_size]): (float(c[Column.alpha]), float(c[Column.warmup_fraction]))
             for c in configs if c["source"] != TRUNK}
    return source, configs, tuned

