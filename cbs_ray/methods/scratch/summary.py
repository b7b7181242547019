"""A from-scratch search's answer as a typed ``Summary`` (one dataclass per section, as Optuna's ``FrozenTrial``
and Ray's ``Result``): code reads its attributes, and ``summary.json`` is its serialisation (``Summary.to_json``),
each attribute named as its key there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Optional

from cbs_ray.analysis.decision import Decision
from cbs_ray.maths.importance import ImportanceReading
from cbs_ray.spec.tolerance import within_text

__all__ = ["Summary", "Answer", "CriticalBatch", "TurningPoint", "Uncertainty", "Verdict", "Tradeoff", "OverheadRule",
           "NoiseScale", "Importance", "Recommendation"]

# A field with this metadata is left out of summary.json while it is None: such keys were only ever
# written when they had a value, and summary.json keeps its schema.
OMIT_IF_NONE = {"omit_if_none": True}


def _plain(value):
    """JSON-ready: a dataclass becomes a dict in field order (its own ``to_dict`` where it has one)."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)
                if not (f.metadata.get("omit_if_none") and getattr(value, f.name) is None)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Verdict:
    """Whether the noise lets the tolerance be resolved (``maths.uncertainty.verdict``)."""

    resolved: bool
    noise: float  # the largest per-batch standard error, metric units
    tolerance_abs: float  # the tolerance in metric units
    repeats: int  # runs per batch size so far
    repeats_needed: Optional[int]  # runs per batch size that would resolve it; None: no count to give
    text: str  # the verdict in one sentence, as the headline prints it


@dataclass(frozen=True)
class Uncertainty:
    """The turning point under the per-batch standard errors. Without a noise estimate (one run per
    batch size, no known evaluation error) only ``reason`` is set."""

    range: Optional[list[int]]  # [low, high] batch sizes, the central ``level`` share of the redraws
    level: Optional[float] = field(default=None, metadata=OMIT_IF_NONE)
    share: Optional[dict[int, float]] = field(default=None, metadata=OMIT_IF_NONE)  # batch -> share of redraws
    verdict: Optional[Verdict] = None
    noise_se_max: Optional[float] = field(default=None, metadata=OMIT_IF_NONE)
    reason: Optional[str] = None  # why there is no range


@dataclass(frozen=True)
class TurningPoint:
    """The largest batch size whose metric at equal samples is within ``tolerance`` of the best."""

    batch_size: Optional[int]  # read off the spec's ``fit``; None with a ``reason``
    fit: str  # search.turning_point: "monotone" or "raw"
    raw_batch_size: Optional[int]  # read off the per-batch means
    monotone_batch_size: Optional[int]  # read off their monotone fit
    tolerance: float  # in the critical batch's tolerance_unit (relative where none was recorded)
    reason: Optional[str]
    uncertainty: Optional[Uncertainty]  # None when no batch size completed
    bound: Optional[str] = None  # "lower": ≥ batch_size (no drop seen above it), "upper": ≤ (drop right after
    # the smallest batch measured), None: a value (``maths.critical_batch.edge_bound``)
    unequal_effort: Optional[str] = None  # the best or the answer rests on more trials than a neighbour's


@dataclass(frozen=True)
class Tradeoff:
    """McCandlish et al. 2018's steps/samples tradeoff, S = S_min + E_min / B, B_crit = E_min / S_min."""

    b_crit: Optional[float]
    left_out: Optional[str]  # batch sizes that reached the target by their first report, and why left out
    ci95: Optional[list[Optional[float]]]  # bootstrap interval; an unbounded end is None (JSON has no ∞)
    s_min: Optional[float]  # steps
    e_min: Optional[float]  # samples
    points: int  # batch sizes fitted
    reason: Optional[str]  # why there is no B_crit
    bound: Optional[str] = None  # where B_crit lies past the measured range: "lower" (≥ b_crit_bound) or "upper"
    b_crit_bound: Optional[float] = None  # 4× the largest batch measured, or ¼ of the smallest


@dataclass(frozen=True)
class OverheadRule:
    """The 20 % rule (Zhang et al. 2025): the largest batch needing at most 20 % more samples to the target
    than the smallest."""

    batch_size: Optional[int]
    reason: Optional[str]
    left_out: Optional[str] = field(default=None, metadata=OMIT_IF_NONE)  # as ``Tradeoff.left_out``
    bound: Optional[str] = None  # "lower": the largest batch that reached the target never crossed 1.2×;
    # "upper": the smallest did, right after it (``maths.critical_batch.edge_bound``)


@dataclass(frozen=True)
class CriticalBatch:
    """The three readings of the critical batch; ``batch_size`` is the headline answer (the turning point)."""

    batch_size: Optional[int]
    turning_point: TurningPoint
    tradeoff: Tradeoff
    overhead_20pct: OverheadRule
    tolerance: float
    reason: Optional[str]  # the turning point's
    tolerance_unit: str = "relative"  # "nats" (absolute) or "relative" (a fraction of the best): spec.tolerance
    tolerance_in_metric_units: Optional[float] = None  # the margin at the best per-batch mean (None: none measured)

    @property
    def within(self) -> str:
        """The tolerance in the metric's units: "within 0.01 nats of the best", "within 1 % of the best"."""
        return within_text(self.tolerance, self.tolerance_unit)


@dataclass(frozen=True)
class NoiseScale:
    """B_simple over every trial (McCandlish et al. 2018), or ``note`` saying why it was not measured."""

    early: Optional[float]  # each trial's first finite report
    mean: Optional[float]  # over training: ratio of the mean |G|² and the mean tr Σ
    note: Optional[str]
    reports: Optional[int] = field(default=None, metadata=OMIT_IF_NONE)  # reports that carried both estimates
    reports_not_positive: Optional[int] = field(default=None, metadata=OMIT_IF_NONE)  # of them, with a B_simple
    # of their own that was not positive (still in the average: leaving them out would bias it)


@dataclass(frozen=True)
class Importance:
    """What mattered (``maths.importance.param_importance``): each parameter's share of the importance, by
    ``evaluator`` (Optuna's), over all completed trials and per batch size, or a note ("too few trials")."""

    evaluator: str  # Optuna's evaluator class, e.g. "PedAnovaImportanceEvaluator"
    overall: ImportanceReading  # batch_size, alpha, warmup_fraction over every completed trial
    per_batch_size: list[ImportanceReading]  # alpha, warmup_fraction within each batch size, in order

    def to_dict(self) -> dict:
        def reading(r: ImportanceReading) -> dict:
            head = {} if r.batch_size is None else {"batch_size": r.batch_size}
            return head | {"trials": r.trials, "params": r.params, "note": r.note}
        return {"evaluator": self.evaluator, "overall": reading(self.overall),
                "per_batch_size": [reading(r) for r in self.per_batch_size]}


@dataclass(frozen=True)
class Recommendation:
    """The fastest configuration on the projected-time Pareto front within tolerance of the best. Where its
    configuration was repeated (``search.repeats``), ``metric_mean`` and ``metric_se`` are over its runs: the
    figure the answer rests on, which the headline quotes (``metric_value`` is the one trial's, maybe the
    luckiest run)."""

    batch_size: int
    alpha: float
    peak_lr: float
    warmup_fraction: float
    warmup_steps: int
    warmup_samples: int  # warmup_steps × batch_size: the warmup in samples (integrations lay the LR out in them)
    budget_samples: int
    optimizer_steps: int
    metric: str  # the metric's name: summary.json has its value under this key
    metric_value: float  # this trial's
    projected_time_s: float
    trial_id: str
    note: Optional[str] = None  # why it is not the fastest within tolerance: that one is past the critical batch
    runs: int = 1  # completed runs of this configuration at its batch size: its trial and the repeats'
    metric_mean: Optional[float] = field(default=None, metadata=OMIT_IF_NONE)  # over the runs (mean_<metric>)
    metric_se: Optional[float] = field(default=None, metadata=OMIT_IF_NONE)  # its standard error (se_<metric>)
    unsearched: Optional[str] = field(default=None, metadata=OMIT_IF_NONE)  # alpha and warmup are the batch
    # size's seeded configuration, not chosen by the search: why, and what would search them

    def to_dict(self) -> dict:
        """summary.json's keys: the metric's values under its own name (``accuracy``, ``mean_accuracy``,
        ``se_accuracy``); an optional field only where it is set."""
        names = {"metric_value": self.metric, "metric_mean": f"mean_{self.metric}", "metric_se": f"se_{self.metric}"}
        return {names.get(f.name, f.name): getattr(self, f.name) for f in fields(self)
                if f.name != "metric" and not (f.metadata.get("omit_if_none") and getattr(self, f.name) is None)}


@dataclass(frozen=True)
class Answer:
    """The one critical batch the report stands behind: the turning point (``reading``), as a value or a
    bound, how sure the noise lets it be, and the other readings as cross-checks."""

    batch_size: Optional[int]  # the turning point; None with the reason in ``text``
    bound: Optional[str]  # "lower" (≥), "upper" (≤) or None, as ``TurningPoint.bound``
    reading: str  # which reading it is, e.g. "turning point, monotone fit"
    resolved: Optional[bool]  # the verdict; None without a noise estimate
    cross_checks_agree: Optional[bool]  # tradeoff and 20 % rule within one grid step; None: neither determined
    cross_checks: str  # the line saying so, or why they differ
    next_batch_range: Optional[list[int]]  # [low, high] to search next where the answer is a bound at the edge
    notes: list[str]  # what else weakens it (unequal search effort)
    text: str  # the headline's first line


@dataclass(frozen=True)
class Summary:
    """Everything the report says about one experiment; ``to_json`` is summary.json. The tables are
    records (one dict per row; NaN is None). ``experiment_path``, ``name`` and ``spec`` are set by
    ``methods.scratch.report.analyze``, None for a summary of a bare history."""

    answer: Answer
    metric: str
    mode: str
    budget_samples: int
    target: Optional[float]  # the level the tradeoff and the 20 % rule measure steps to
    target_source: str
    critical_batch: CriticalBatch
    noise_scale: NoiseScale
    recommendation: Optional[Recommendation]
    per_batch: list[dict]
    pareto: list[dict]  # (measured wall time, metric)
    pareto_projected: list[dict]  # (projected time = budget / samples per second, metric)
    trials: list[dict]
    importance: Importance  # how much batch size, alpha and warmup mattered
    experiment_path: Optional[str] = None
    name: Optional[str] = None
    spec: Optional[dict] = None
    decision: Optional[Decision] = None
    """What to train the run at, and why (``analysis.decision``); summary.json's first key."""

    def to_dict(self) -> dict:
        record = {f.name: _plain(getattr(self, f.name)) for f in fields(self)}
        return {"decision": record.pop("decision"), **record}

    def to_json(self) -> str:
        """summary.json's text: strict JSON (an infinity or NaN raises)."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"
