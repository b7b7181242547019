"""Branch mode's settings as its experiment's metadata recorded them (``RecordedBranchSettings``: the
``ResolvedBranchSettings.to_meta`` of ``methods.branch.settings``, the schedule run's ``schedule`` beside them), read
back in one place: ``RecordedBranchSettings.from_json`` takes the metadata's flat mapping (``ExperimentMeta.recorded``:
its fields and the method's record beside them) and fills every key an older experiment did not write with the value
that experiment ran with; ``to_json`` writes the keys back. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from cbs_ray.records.columns import Column

__all__ = ["RecordedBranchSettings", "ScheduleDecided"]

REQUIRED = ("trunk_batch", "window_samples", "budget_samples", "branch_batches", "tolerance", "checkpoints")
"""What every branch experiment recorded: without them there is no CBS(t) to read."""


@dataclass(frozen=True)
class ScheduleDecided:
    """The schedule run's decision, recorded in the first experiment's metadata before its runs start
    (``methods.branch.search.schedule_launch``): a key it did not record is None."""

    batch_size_schedule: Optional[list[list[int]]] = None
    alpha: Optional[float] = None
    margin: Optional[float] = None
    """The validation's ε, pre-registered: the report reads it, not a later ``--tolerance``."""
    criterion: Optional[str] = None
    controls_from: Optional[str] = None
    control_configurations: Optional[list[dict[str, Any]]] = None
    """Per control batch: ``batch_size``, ``alpha``, ``warmup_fraction``, ``source`` (control_configurations.py)."""
    start_batch: Optional[int] = None
    """``seesaw_start: tuned``: the best tuned fixed batch the schedule started from, decided before its runs."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ScheduleDecided:
        g = d.get
        configs, schedule, start = g("control_configurations"), g("batch_size_schedule"), g("start_batch")
        return cls(batch_size_schedule=[[int(s), int(b)] for s, b in schedule] if schedule is not None else None,
                   alpha=g("alpha"), margin=g("margin"),
                   criterion=g("criterion"), controls_from=g("controls_from"),
                   control_configurations=[dict(c) for c in configs] if configs is not None else None,
                   start_batch=int(start) if start is not None else None)

    def to_json(self) -> dict[str, Any]:
        """The keys it was read from (those recorded)."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class RecordedBranchSettings:
    """Branch mode's recorded settings (``branch:`` resolved against the budget, in samples)."""

    trunk_batch: int
    window_samples: int
    budget_samples: int
    branch_batches: tuple[int, ...]
    tolerance: float
    """ε (``branch.tolerance``; the report's ``--tolerance`` where it reads at another)."""
    checkpoints: tuple[int, ...]
    tolerance_relative: bool = True
    """ε relative to the reference loss; an experiment written before the paper's rule (no key) read it so."""
    loss: str = "eval"
    """``branch.loss``: ``eval`` or ``train_ema``."""
    schedule_rule: str = "while_safe"
    """``branch.schedule_rule``; an experiment that did not record it doubled while each doubling was safe."""
    metric: str = Column.eval_loss
    tokens_per_sample: Optional[int] = None
    """Tokens a sample with a packed token budget; None without."""
    alphas: tuple[float, ...] = ()
    """``branch.alphas``; empty where not recorded (the summary reads them off the branches)."""
    deviations: tuple[str, ...] = ()
    """Where the search departs from the paper's method, one sentence each."""
    trunk_peak_lr: Optional[float] = None
    """None where not recorded: the summary reads the trunk's last report."""
    trunk_alpha: float = 0.5
    warmup_fraction: Optional[float] = None
    """The trunk's LR warmup, a fraction of its steps; None where not recorded (no warmup)."""
    lr_decay: str = "linear"
    """``lr_decay``; linear in an experiment that did not record it, the spec's default."""
    repeats: int = 1
    seesaw_start: str = "trunk"
    """``branch.seesaw_start``; the trunk's batch in an experiment that did not record it."""
    seesaw_first_doubling: float = 0.0
    schedule: Optional[ScheduleDecided] = None
    """The schedule run's decision, where one was recorded."""
    name: Optional[str] = None
    """The experiment's name and where it is: not settings, carried into the summary."""
    experiment_path: Optional[str] = None

    @classmethod
    def from_json(cls, meta: Mapping[str, Any]) -> RecordedBranchSettings:
        """From the metadata's mapping; a ``ValueError`` (one line, as the report command prints it) where a key
        every branch search records is missing."""
        missing = [k for k in REQUIRED if k not in meta]
        if missing:
            raise ValueError(f"{', '.join(missing)} missing from the branch experiment's metadata")
        g = meta.get
        tokens, peak, warmup = g("tokens_per_sample"), g("trunk_peak_lr"), g(Column.warmup_fraction)
        decided: Optional[Mapping[str, Any]] = g("schedule")
        return cls(
            trunk_batch=int(meta["trunk_batch"]), window_samples=int(meta["window_samples"]),
            budget_samples=int(meta["budget_samples"]), branch_batches=tuple(int(b) for b in meta["branch_batches"]),
            tolerance=float(meta["tolerance"]), checkpoints=tuple(int(c) for c in meta["checkpoints"]),
            tolerance_relative=bool(g("tolerance_relative", True)), loss=str(g("loss", "eval")),
            schedule_rule=str(g("schedule_rule", "while_safe")), metric=g("metric", Column.eval_loss),
            tokens_per_sample=int(tokens) if tokens is not None else None,
            alphas=tuple(float(a) for a in g("alphas") or ()), deviations=tuple(g("deviations") or ()),
            trunk_peak_lr=float(peak) if peak is not None else None, trunk_alpha=float(g("trunk_alpha", 0.5)),
            warmup_fraction=float(warmup) if warmup is not None else None, lr_decay=str(g("lr_decay", "linear")),
            repeats=int(g("repeats", 1)), seesaw_start=str(g("seesaw_start", "trunk")),
            seesaw_first_doubling=float(g("seesaw_first_doubling", 0.0)),
            schedule=ScheduleDecided.from_json(decided) if decided else None,
            name=g("name"), experiment_path=g("experiment_path"))

    def to_json(self) -> dict[str, Any]:
        """The metadata's keys for these settings (``ResolvedBranchSettings.to_meta``'s that the reading reads, and
        those set of the rest)."""
        return {"trunk_batch": self.trunk_batch, "checkpoints": list(self.checkpoints),
                "window_samples": self.window_samples, "branch_batches": list(self.branch_batches),
                "alphas": list(self.alphas), "tolerance": self.tolerance, "trunk_alpha": self.trunk_alpha,
                Column.warmup_fraction: self.warmup_fraction, "trunk_peak_lr": self.trunk_peak_lr,
                "budget_samples": self.budget_samples, "tokens_per_sample": self.tokens_per_sample,
                "tolerance_relative": self.tolerance_relative, "repeats": self.repeats, "loss": self.loss,
                "schedule_rule": self.schedule_rule, "lr_decay": self.lr_decay, "deviations": list(self.deviations),
                "seesaw_start": self.seesaw_start, "seesaw_first_doubling": self.seesaw_first_doubling,
                "metric": self.metric,
                **{k: v for k, v in (("schedule", self.schedule.to_json() if self.schedule else None),
                                     ("name", self.name), ("experiment_path", self.experiment_path))
                   if v is not None}}

    @property
    def margin(self) -> float:
        """The validation's margin: the ε recorded when its runs started (pre-registered), else ε."""
        recorded = self.schedule.margin if self.schedule else None
        return float(recorded) if recorded is not None else self.tolerance

    @property
    def total_steps(self) -> int:
        """The trunk's optimizer steps over the budget."""
        return self.budget_samples // self.trunk_batch
