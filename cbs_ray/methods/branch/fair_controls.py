"""``branch.controls_from`` on the driver: find the from-scratch search whose best
configuration per batch the schedule validation's fixed-batch controls train at (a named experiment, or this
experiment's own ``controls`` stage), and read it; and choose the controls' batches (``branch.frontier``: the
schedule's grid, or the dense frontier around the best tuned batch, the same for every rule). The choice of each
control's configuration is control_configurations.py. A search qualifies by its method's registry entry
(``MethodEntry.best_per_batch``), not by the method's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

from cbs_ray.maths.frontier_batches import dense_batches
from cbs_ray.methods.branch.control_configurations import (
    NONE,
    TRUNK,
    best_configurations,
    budget_problem,
    control_configurations,
)
from cbs_ray.methods.branch.reading_schedule import control_batches, dense_controls
from cbs_ray.methods.branch.settings import ResolvedBranchSettings, branch_settings
from cbs_ray.records.columns import Column
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.method_registry import method_entry
from cbs_ray.records.storage import META_FILE, ReportError, load_history
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.paths import expand_user
from cbs_ray.spec.schema import SearchSpec

__all__ = ["CONTROLS_STAGE", "SCRATCH", "GRID", "DENSE", "ChosenControls", "TunedControls", "best_batch",
           "tuned_controls", "recorded_controls_stage",
           "chosen_controls", "frontier_batches", "validation_controls", "unused_controls_warning"]

SCRATCH = "scratch"
"""``branch.controls_from: scratch``: the from-scratch search run as a stage of this experiment (``CONTROLS_STAGE``)
before the validation, resumed like every stage."""
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


def recorded_controls_stage(meta: ExperimentMeta, path: str) -> Optional[str]:
    """The ``controls`` stage's experiment the branch experiment at ``path`` (its metadata ``meta``) recorded, or
    None where it ran none."""
    return dict(meta.stage_record("search", path)).get(CONTROLS_STAGE)


def _controls_stage_owner(path: str) -> Optional[ExperimentMeta]:
    """The metadata of the branch experiment whose ``controls`` stage ``path`` is (``<experiment>-controls``, which
    that experiment's stage record names), or None: a stage keeps no metadata of its own, its owner's budget and
    metric are its."""
    stage = Path(path)
    suffix = f"-{CONTROLS_STAGE}"
    if not stage.name.endswith(suffix) or (stage / META_FILE).exists():
        return None
    owner = stage.with_name(stage.name[:-len(suffix)])
    try:
        meta = ExperimentMeta.read(str(owner))
    except ReportError:
        return None
    recorded = recorded_controls_stage(meta, str(owner))
    return meta if recorded and Path(recorded).name == stage.name else None


def unused_controls_warning(spec: SearchSpec) -> Optional[str]:
    """The plan's warning where ``branch.controls_from`` is set without ``--validate-schedule``: only the schedule's
    validation trains fixed-batch controls, so the value goes unused (and ``--resume`` cannot add the validation
    later); a named experiment that does not exist is said too (it was once accepted without a word). A warning,
    not a refusal: the run reads nothing from it."""
    value = branch_settings(spec).controls_from
    if branch_settings(spec).validate_schedule or value == NONE:
        return None
    missing = ""
    if value != SCRATCH:
        try:
            _named(spec, value)
        except (SpecError, RuntimeError, OSError, ValueError):  # RuntimeError: "~nosuchuser/…"
            missing = f", and names no experiment (neither a directory nor a folder in {spec.storage_uri})"
    return (f"  warning: branch.controls_from={value!r:.200} is ignored without --validate-schedule (only the "
            f"schedule's validation trains fixed-batch controls){missing}")


class TunedControls(NamedTuple):
    """What ``tuned_controls`` read: where from, each batch's best configuration, and the metric that ranked them
    (a named experiment's own, which can differ from this spec's: a branch search's ``controls`` stage records
    ``eval_loss`` where the spec ranks by ``excess_loss``)."""

    source: str
    """``controls_from`` as recorded: the experiment's path, or ``none``."""
    best: dict[int, dict]
    """batch → its best configuration (control_configurations.py's ``best_configurations``), the value of
    ``metric`` among its keys."""
    metric: str
    mode: str

    def best_batch(self) -> Optional[int]:
        """B*, the best tuned fixed batch, ranked by the metric the configurations were chosen by."""
        return best_batch(self.best, metric=self.metric, mode=self.mode)


def tuned_controls(spec: SearchSpec, budget_samples: int, *,
                   stage_experiment: Optional[str] = None) -> TunedControls:
    """(``controls_from`` as recorded: the experiment's path, or ``none``; each batch's best configuration in
    it, control_configurations.py's ``best_configurations``; the metric and mode that ranked them). A ``SpecError``
    (one line, exit 2) where a named experiment is missing, unreadable, not a from-scratch search (nor another branch
    search's ``controls`` stage), ran another budget, or completed no trial. ``scratch``: the stage's experiment
    ``stage_experiment`` (it trained this budget, on the spec's metric); before the stage has run (the check before
    Ray) or where it completed no trial, ``none`` (the latter said)."""
    value = branch_settings(spec).controls_from
    none = TunedControls(NONE, {}, spec.search.metric, spec.search.mode)
    if value == NONE:
        return none
    if value == SCRATCH:
        if stage_experiment is None:
            return none
        best = best_configurations(load_history(stage_experiment), metric=spec.search.metric,
                                   mode=spec.search.mode, budget_samples=int(budget_samples))
        if not best:
            print(f"schedule: the from-scratch stage {stage_experiment} completed no trial: the controls train at "
                  f"the trunk's configuration", flush=True)
            return none
        return TunedControls(stage_experiment, best, spec.search.metric, spec.search.mode)
    path = _named(spec, value)
    try:
        owner = _controls_stage_owner(path)  # another branch search's controls stage: a from-scratch search
        meta = owner or ExperimentMeta.read(path)
        if owner is None and not method_entry(meta.method).best_per_batch:
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
    return TunedControls(path, best, meta.metric, meta.mode)


def best_batch(best: dict[int, dict], *, metric: str, mode: str) -> Optional[int]:
    """The batch whose best configuration reached the best ``metric`` (``mode``: ``min`` or ``max``; a tie: the
    smaller batch): B*, the best tuned fixed batch at the budget (``branch.seesaw_start: tuned``); None without one."""
    scored = [(float(v[metric]) * (1 if mode == "min" else -1), int(b)) for b, v in best.items() if metric in v]
    return min(scored)[1] if scored else None


GRID, DENSE = "grid", "dense"
"""``branch.frontier``'s values (``settings.BranchSettings.frontier``)."""


def frontier_batches(spec: SearchSpec, br: ResolvedBranchSettings, tuned: TunedControls) -> list[int]:
    """The dense frontier's fixed batches (``branch.frontier: dense``; ``maths.frontier_batches.dense_batches``):
    √2 apart around B* (``TunedControls.best_batch`` of the tuned configurations; the trunk's batch without one), from
    the smaller of B*/2 and the trunk's batch to twice the larger of B* and the largest branch batch, with the
    trunk's and every branch batch (every batch a schedule can train at), each dividing the report cadence on the
    trial's workers, none above the training set. It reads nothing a rule decides: the same set for every rule of a
    setting that shares its tuned configurations."""
    center = int(tuned.best_batch() or br.trunk_batch)
    return dense_batches(center, low=min(br.trunk_batch, center / 2), high=2 * max(br.largest_batch, center),
                         every=spec.training.eval_every_samples, workers=spec.resources.workers_per_trial,
                         largest_allowed=br.train_examples, include=(br.trunk_batch, *br.branch_batches))


def validation_controls(spec: SearchSpec, br: ResolvedBranchSettings, schedule: Sequence[Sequence[int]],
                        tuned: TunedControls) -> list[tuple[str, int]]:
    """The validation's fixed-batch controls, ``(name, batch)``, by ``branch.frontier``: ``grid``, the schedule's own
    (``methods.branch.reading_schedule.control_batches``); ``dense``, ``frontier_batches`` named by the schedule
    (``methods.branch.reading_schedule.dense_controls``)."""
    if branch_settings(spec).frontier == DENSE:
        return dense_controls(schedule, frontier_batches(spec, br, tuned))
    return control_batches(schedule, br.budget_samples, largest_allowed=br.train_examples)


@dataclass(frozen=True)
class ChosenControls:
    """The validation's fixed-batch controls and what each trains at, decided once before its runs."""

    source: str
    """``controls_from`` as recorded: the from-scratch experiment's path, or ``none``."""
    controls: list
    """``(name, batch)`` per control (``validation_controls``)."""
    configurations: list
    """Each control batch's configuration record (control_configurations.py's ``control_configurations``)."""
    tuned: dict
    """batch → (alpha, warmup) of the controls that train at a tuned configuration, for
    ``methods.branch.runs.validation_configs``; the rest train at the trunk's."""


def chosen_controls(spec: SearchSpec, br: ResolvedBranchSettings, schedule: Sequence[Sequence[int]], *, alpha: float,
                    recorded: Optional[dict] = None, stage_experiment: Optional[str] = None) -> ChosenControls:
    """The validation's controls and their configurations (``ChosenControls``): as ``recorded`` in the experiment's
    metadata where the validation was decided before (a resume; a record without ``controls``, from before the
    dense frontier, was the grid's), else read now (``tuned_controls``; ``stage_experiment``: the ``scratch``
    stage's) and chosen by ``validation_controls``; with the dense frontier a control batch the from-scratch search
    did not train takes its neighbours' configuration interpolated in log B."""
    if recorded and recorded.get("control_configurations") is not None:
        source, configs = str(recorded.get("controls_from", NONE)), list(recorded["control_configurations"])
        controls = ([(str(n), int(b)) for n, b in recorded["controls"]] if recorded.get("controls") is not None
                    else control_batches(schedule, br.budget_samples, largest_allowed=br.train_examples))
    else:
        tuned_read = tuned_controls(spec, br.budget_samples, stage_experiment=stage_experiment)
        source, best = tuned_read.source, tuned_read.best
        controls = validation_controls(spec, br, schedule, tuned_read)
        dense = branch_settings(spec).frontier == DENSE
        configs = control_configurations(controls, best, alpha=alpha, warmup_fraction=br.warmup_fraction,
                                         source=source, base_batch=spec.training.base_batch if dense else None)
    tuned = {int(c[Column.batch_size]): (float(c[Column.alpha]), float(c[Column.warmup_fraction]))
             for c in configs if c["source"] != TRUNK}
    return ChosenControls(source, controls, configs, tuned)
