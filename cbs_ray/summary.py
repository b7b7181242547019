"""From reported milestones to the answer: per-trial and per-batch tables, the critical batch by the
turning-point rule, and the Pareto front of training time vs quality. Pure pandas, no Ray: the input is
the history of reports (one row per milestone per trial) however it was obtained.

The answer is a typed ``Summary`` (one dataclass per section, as Optuna's ``FrozenTrial`` and Ray's
``Result``): code reads its attributes, and ``summary.json`` is its serialisation (``Summary.to_json``),
each attribute named as its key there. The tables (per batch, per trial, Pareto fronts) stay lists of
records, one dict per row, whose keys are the columns (they depend on the metric's name).

``Summary.answer`` is the one critical batch the report stands behind (``answer``): the turning point (on
the monotone fit by default), how sure the noise lets it be (the verdict), whether it is a bound at the edge
of the grid and where to search next, and whether the tradeoff and the 20 % rule agree with it within one
grid step. The recommendation is capped at it (``recommend``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from .critical_batch import (LOWER, UPPER, agree_within, bound_interval, edge_bound, monotone_fit, next_batch_range,
                             turning_point, within_tolerance)
from .importance import EVALUATOR, ImportanceReading, param_importance
from .noise_scale import b_simple
from .pareto import pareto_front
from .lr_schedule import warmup_steps
from .tradeoff import TradeoffFit, fit_tradeoff, overhead_rule, samples_to_target
from .uncertainty import accuracy_standard_error, mean_and_standard_error, turning_point_range, verdict

__all__ = ["Summary", "Answer", "CriticalBatch", "TurningPoint", "Uncertainty", "Verdict", "Tradeoff", "OverheadRule",
           "NoiseScale", "Importance", "ImportanceReading", "Recommendation", "trial_table", "per_batch_table",
           "noise_scale_table", "summarize", "write_summary", "default_target", "recommend", "unequal_effort",
           "bound_text", "restarts"]

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
    """Whether the noise lets the tolerance be resolved (``uncertainty.verdict``)."""

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
    tolerance: float  # relative
    reason: Optional[str]
    uncertainty: Optional[Uncertainty]  # None when no batch size completed
    bound: Optional[str] = None  # "lower": ≥ batch_size (no drop seen above it), "upper": ≤ (drop right after
    # the smallest batch measured), None: a value (``critical_batch.edge_bound``)
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
    # "upper": the smallest did, right after it (``critical_batch.edge_bound``)


@dataclass(frozen=True)
class CriticalBatch:
    """The three readings of the critical batch; ``batch_size`` is the headline answer (the turning point)."""

    batch_size: Optional[int]
    turning_point: TurningPoint
    tradeoff: Tradeoff
    overhead_20pct: OverheadRule
    tolerance: float
    reason: Optional[str]  # the turning point's


@dataclass(frozen=True)
class NoiseScale:
    """B_simple over every trial (McCandlish et al. 2018), or ``note`` saying why it was not measured."""

    early: Optional[float]  # each trial's first finite report
    mean: Optional[float]  # over training: ratio of the mean |G|² and the mean tr Σ
    note: Optional[str]
    reports: Optional[int] = field(default=None, metadata=OMIT_IF_NONE)  # reports that carried both estimates
    reports_left_out: Optional[int] = field(default=None, metadata=OMIT_IF_NONE)  # of them, not positive


@dataclass(frozen=True)
class Importance:
    """What mattered (``importance.param_importance``): each parameter's share of the importance, by
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
    """The fastest configuration on the projected-time Pareto front within tolerance of the best."""

    batch_size: int
    alpha: float
    peak_lr: float
    warmup_fraction: float
    warmup_steps: int
    budget_samples: int
    optimizer_steps: int
    metric: str  # the metric's name: summary.json has its value under this key
    metric_value: float
    projected_time_s: float
    trial_id: str
    note: Optional[str] = None  # why it is not the fastest within tolerance: that one is past the critical batch

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            if f.name != "metric":
                out[self.metric if f.name == "metric_value" else f.name] = getattr(self, f.name)
        return out


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
    ``report.analyze``, None for a summary of a bare history."""

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

    def to_dict(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def to_json(self) -> str:
        """summary.json's text: strict JSON (an infinity or NaN raises)."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"


TRIAL_COLUMNS = ["trial_id", "batch_size", "alpha", "warmup_fraction", "peak_lr"]


def trial_table(history: pd.DataFrame, *, metric: str, budget_samples: int) -> pd.DataFrame:
    """One row per trial: its configuration, how far it got, its last metric, its time at the end.

    ``status``: ``completed`` (reached the budget), ``diverged`` (non-finite loss or gradient), ``failed``
    (its workers died more often than ``max_failures``), or ``stopped`` (ended before the budget: stopped
    early by ASHA, or still running)."""
    if history.empty:
        return pd.DataFrame(columns=TRIAL_COLUMNS + ["samples_seen", metric, "wall_time_s", "samples_per_s", "repeat",
                                                     "restarts", "status"])
    history = history.sort_values(["trial_id", "samples_seen"])
    last = history.groupby("trial_id", sort=False).tail(1).set_index("trial_id")
    diverged = history.groupby("trial_id")["diverged"].any() if "diverged" in history else False
    rows = pd.DataFrame({
        "batch_size": last["batch_size"].astype(int),
        "alpha": last["alpha"], "warmup_fraction": last["warmup_fraction"], "peak_lr": last["peak_lr"],
        "samples_seen": last["samples_seen"].astype(int), metric: last[metric].astype(float),
        "wall_time_s": last.get("wall_time_s", np.nan),
        "samples_per_s": history.groupby("trial_id")["samples_per_s"].mean()
        if "samples_per_s" in history else np.nan,
    })
    rows["repeat"] = history.groupby("trial_id")["repeat"].any() if "repeat" in history else False
    rows["restarts"] = (history.groupby("trial_id")["resumed_from_samples"].agg(restarts).astype(int)
                        if "resumed_from_samples" in history else 0)
    if "eval_examples" in history:
        rows["eval_examples"] = last["eval_examples"]
    if "node_id" in history:  # where its last report came from (rank 0's Ray node); "" outside Ray
        rows["node_id"] = last["node_id"].fillna("").astype(str)
    for column in (c for c in last.columns if c.startswith("dev_")):  # data.holdout_examples: the dev set
        rows[column] = last[column]
    failed = history.groupby("trial_id")["failed"].any() if "failed" in history else False
    rows["status"] = np.where(diverged, "diverged",
                              np.where(rows["samples_seen"] >= budget_samples, "completed",
                                       np.where(failed, "failed", "stopped")))
    return rows.reset_index().sort_values(["batch_size", "trial_id"]).reset_index(drop=True)


def restarts(resumed_from_samples: Sequence) -> int:
    """How often a trial continued from a checkpoint (a dead worker or node, a resumed search), from its
    reports' ``resumed_from_samples`` in order: each change to a new positive value is one restart. A run
    that died again before its next checkpoint resumes from the same one and is not told apart."""
    count, previous = 0, 0.0
    for value in resumed_from_samples:
        value = 0.0 if value is None or value != value else float(value)  # NaN: a report from before the field
        count += value > 0 and value != previous
        previous = value
    return count


def _steps_to_target(history: pd.DataFrame, *, metric: str, mode: str, target: float) -> pd.DataFrame:
    """Per trial: optimizer steps to first reach ``target`` (interpolated), NaN if never, and
    ``target_at_first_report``: reached by the first report already, so the steps are only an upper bound
    (nothing says how much earlier)."""
    rows = {}
    for trial_id, h in history.groupby("trial_id"):
        samples = samples_to_target(h["samples_seen"].tolist(), h[metric].astype(float).tolist(), target, mode=mode)
        rows[trial_id] = {"steps_to_target": samples / float(h["batch_size"].iloc[0]),
                          "target_at_first_report": bool(samples == h["samples_seen"].min())}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["steps_to_target", "target_at_first_report"])


def _ratio_of_means(frame: pd.DataFrame) -> float:
    ok = frame[["grad_sq", "trace_sigma"]].dropna()
    return float(b_simple(ok["grad_sq"].mean(), ok["trace_sigma"].mean())) if len(ok) else math.nan


def noise_scale_table(history: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """B_simple per batch size early in training (each trial's first finite report, averaged) and over
    training (ratio of the mean |G|² and mean tr Σ over the reports, as McCandlish et al.'s Table 1),
    plus the same two figures over every trial. Only reports whose moving averages give a positive B_simple
    count: early reports whose tr Σ estimate is still negative are left out of both means."""
    if "b_simple" not in history or history["b_simple"].notna().sum() == 0:
        note = (history["noise_scale_note"].dropna().iloc[0] if "noise_scale_note" in history
                and history["noise_scale_note"].notna().any() else "not reported")
        return pd.DataFrame(), {"early": None, "mean": None, "note": note or "not measurable"}
    measured = history.dropna(subset=["b_simple"]).sort_values("samples_seen")
    first = measured.groupby("trial_id").head(1)
    rows = [{"batch_size": int(b), "b_simple_early": _ratio_of_means(first[first["batch_size"] == b]),
             "b_simple_mean": _ratio_of_means(group)} for b, group in measured.groupby("batch_size")]
    # How many reports carried both estimates, and how many of them the rule above left out: the reader's
    # measure of how settled the figure is.
    estimated = int(history[["grad_sq", "trace_sigma"]].apply(np.isfinite).all(axis=1).sum()) \
        if {"grad_sq", "trace_sigma"} <= set(history) else len(measured)
    return pd.DataFrame(rows), {"early": _ratio_of_means(first), "mean": _ratio_of_means(measured), "note": None,
                                "reports": estimated, "reports_left_out": estimated - len(measured)}


def per_batch_table(trials: pd.DataFrame, *, metric: str, mode: str) -> pd.DataFrame:
    """Per batch size: trials run / completed / stopped / diverged / failed, the peak LRs the diverged trials
    used (lowest first: the stability limit at that batch), the best completed trial's metric and
    configuration (NaN where no trial reached the budget), and — when ``trials`` has a
    ``steps_to_target`` column — the fewest steps and samples any trial of that batch needed to reach
    the target."""
    out = []
    for batch, group in trials.groupby("batch_size"):
        repeats = group[group["repeat"]] if "repeat" in group else group.iloc[:0]
        group = group[~group["repeat"]] if "repeat" in group else group
        done = group[(group["status"] == "completed") & group[metric].notna()]
        row = {"batch_size": int(batch), "trials": len(group), "completed": len(done),
               "stopped": int((group["status"] == "stopped").sum()),
               "diverged": int((group["status"] == "diverged").sum()),
               "failed": int((group["status"] == "failed").sum()),
               "diverged_peak_lrs": sorted(float(lr) for lr in group.loc[group["status"] == "diverged", "peak_lr"])}
        if len(done):
            best = done.loc[done[metric].idxmax() if mode == "max" else done[metric].idxmin()]
            row.update({f"best_{metric}": float(best[metric]), "alpha": float(best["alpha"]),
                        "warmup_fraction": float(best["warmup_fraction"]), "peak_lr": float(best["peak_lr"]),
                        "wall_time_s": float(best["wall_time_s"]), "samples_per_s": float(best["samples_per_s"]),
                        "trial_id": best["trial_id"]})
            if f"dev_{metric}" in best:  # the selected trial's figure on the dev set, not the dev set's best
                row[f"dev_{metric}"] = float(best[f"dev_{metric}"])
        else:
            row.update({f"best_{metric}": math.nan})
        if "steps_to_target" in group:
            steps = group["steps_to_target"].min()
            row.update({"steps_to_target": steps, "samples_to_target": steps * batch})
            if "target_at_first_report" in group:  # then the fewest steps are that trial's upper bound
                row["target_at_first_report"] = bool(group["target_at_first_report"].fillna(False).astype(bool).any())
        row.update(_repeated_mean(done, repeats, metric=metric, best=row.get(f"best_{metric}", math.nan)))
        out.append(row)
    return pd.DataFrame(out)


def _repeated_mean(done: pd.DataFrame, repeats: pd.DataFrame, *, metric: str, best: float) -> dict:
    """The best configuration's metric over its runs (the search's trial plus completed repeats): mean,
    standard error (from the runs' spread and, for accuracy, the evaluation set's size), run count."""
    runs = [best] + repeats.loc[repeats["status"] == "completed", metric].dropna().tolist()
    eval_se = 0.0
    # An accuracy's evaluation error is known from the evaluation set's size, where the reports carry it.
    eval_error_known = (metric == "accuracy" and "eval_examples" in done and done["eval_examples"].notna().any()
                        and not math.isnan(best))
    if eval_error_known:
        eval_se = accuracy_standard_error(min(max(best, 0.0), 1.0), int(done["eval_examples"].max()))
    mean, se = mean_and_standard_error(runs, eval_se=eval_se)
    if not eval_error_known and len([r for r in runs if not math.isnan(r)]) < 2:
        se = math.nan  # one run and no known evaluation error: no noise estimate (not a noise of 0)
    return {"runs": len([r for r in runs if not math.isnan(r)]), f"mean_{metric}": mean, f"se_{metric}": se}


def _uncertainty(per_batch: pd.DataFrame, *, metric: str, mode: str, tolerance: float,
                 monotone: bool) -> Uncertainty:
    """Range of the turning point under the per-batch standard errors, and the verdict. Batch sizes with no
    completed run stay in the redraws as gaps (NaN), where the walk stops as it does for the headline."""
    rows = per_batch.dropna(subset=[f"mean_{metric}"])
    se = rows[f"se_{metric}"].astype(float)
    if se.isna().any():
        return Uncertainty(range=None, verdict=None, reason=f"no noise estimate for {metric} from one run per "
                           "batch size: set search.repeats >= 2")
    repeats = int(rows["runs"].max())
    run_sd = float((se * np.sqrt(rows["runs"])).max())
    spread = turning_point_range(per_batch["batch_size"].tolist(), per_batch[f"mean_{metric}"].astype(float).tolist(),
                                 per_batch[f"se_{metric}"].astype(float).tolist(), mode=mode, tolerance=tolerance,
                                 monotone=monotone)
    return Uncertainty(range=[spread["low"], spread["high"]], level=spread["level"], share=spread["share"],
                       verdict=Verdict(**verdict(rows[f"mean_{metric}"].tolist(), se.tolist(), mode=mode,
                                                 tolerance=tolerance, run_sd=run_sd, repeats=repeats)),
                       noise_se_max=float(se.max()), reason=None)


def default_target(per_batch: pd.DataFrame, *, metric: str, mode: str) -> float:
    """A level every batch size with a completed trial reaches: the worst of the per-batch bests."""
    values = per_batch[f"best_{metric}"].dropna()
    return float(values.min() if mode == "max" else values.max())


def _recommendation(row, *, metric: str, budget_samples: int, note: Optional[str] = None) -> Recommendation:
    steps = budget_samples // int(row["batch_size"])
    return Recommendation(
        batch_size=int(row["batch_size"]), alpha=float(row["alpha"]), peak_lr=float(row["peak_lr"]),
        warmup_fraction=float(row["warmup_fraction"]), warmup_steps=warmup_steps(float(row["warmup_fraction"]), steps),
        budget_samples=budget_samples, optimizer_steps=steps, metric=metric, metric_value=float(row[metric]),
        projected_time_s=float(row["projected_time_s"]), trial_id=row["trial_id"], note=note)


def recommend(done: pd.DataFrame, front: list[int], *, metric: str, mode: str, tolerance: float,
              budget_samples: int, cap: Optional[int] = None, cap_text: Optional[str] = None,
              resolved: Optional[bool] = None) -> Optional[Recommendation]:
    """The fastest configuration on the (projected-time) Pareto front whose metric is within
    ``tolerance`` (relative) of the best completed trial.

    ``cap``: the critical batch the report stands behind (``Answer.batch_size``; ``cap_text`` as the
    headline writes it, e.g. "≥ 64"). The recommendation never goes past it silently: where the fastest
    within tolerance is a larger batch, it is past the drop or only within tolerance by noise, so the
    fastest trial within tolerance at or below the cap is recommended instead, with a ``note`` naming the
    faster one (and saying the turning point is not resolved, where ``resolved`` is False). Where no trial
    at or below the cap is within tolerance, the fastest stays, with a note saying so."""
    if not front:
        return None
    best = done[metric].max() if mode == "max" else done[metric].min()
    ok = [i for i in done.sort_values("projected_time_s", kind="stable").index
          if within_tolerance(float(done.loc[i, metric]), float(best), mode=mode, tolerance=tolerance)]
    # The front is ordered by time: its first point within tolerance is the fastest within tolerance.
    fastest = next((i for i in front if i in set(ok)), None)
    if fastest is None:
        return None
    row = done.loc[fastest]
    if cap is None or int(row["batch_size"]) <= cap:
        return _recommendation(row, metric=metric, budget_samples=budget_samples)
    past = (f"B={int(row['batch_size'])} (trial {row['trial_id']}) is the fastest within tolerance of the best, "
            f"but past the critical batch {cap_text or cap}"
            + (", which is not resolved" if resolved is False else ""))
    below = next((i for i in ok if int(done.loc[i, "batch_size"]) <= cap), None)
    if below is None:
        return _recommendation(row, metric=metric, budget_samples=budget_samples,
                               note=past + ": no trial at or below it is within tolerance, so it stays")
    return _recommendation(done.loc[below], metric=metric, budget_samples=budget_samples,
                           note=past + ": recommended instead the fastest at or below it")


def unequal_effort(batch_sizes: Sequence[int], trials: Sequence[int], *, check: Sequence[int],
                   factor: float = 2.0) -> Optional[str]:
    """A note where the per-batch best of a batch size in ``check`` (the best batch, the answer) is the best
    of at least ``factor``× the trials of a neighbour (the next batch size measured either side). TPE puts
    more trials where the metric looks best, and the best of more trials is biased upward, so that batch
    size can win the comparison the turning point rests on by effort, not quality. ``trials`` counts every
    configuration tried at that batch size, those ASHA stopped included: stopping is part of how the
    search picked the best, so a balanced search (3 trials each, one completed here, two there) is even
    effort. None when effort is even enough.

    >>> unequal_effort([8, 16, 32], [1, 4, 1], check=[16])[:52]
    "B=16's best is the best of 4 trials, its neighbours'"
    """
    counts = {int(b): int(c) for b, c in zip(batch_sizes, trials) if c and c > 0}
    order = sorted(counts)
    for b in (b for b in dict.fromkeys(int(x) for x in check) if b in counts):
        i = order.index(b)
        neighbours = [order[j] for j in (i - 1, i + 1) if 0 <= j < len(order)]
        if not any(counts[b] >= factor * counts[n] for n in neighbours):
            continue
        same = len({counts[n] for n in neighbours}) == 1
        theirs = f"{counts[neighbours[0]]}" if same else " and ".join(f"{counts[n]} (B={n})" for n in neighbours)
        whose = "its neighbours'" if len(neighbours) > 1 else "its neighbour's"
        return (f"B={b}'s best is the best of {counts[b]} trials, {whose} of {theirs}: the best of more "
                f"trials is biased upward; use search.balance_batches: true or the grid's reading")
    return None


def _turning_point(per_batch: pd.DataFrame, measured: pd.DataFrame, *, metric: str, mode: str, tolerance: float,
                   turning_fit: str) -> tuple[TurningPoint, dict]:
    """The turning point read both ways (the spec's ``turning_fit`` is the answer), and the monotone fit
    per batch size ({} when no batch size completed)."""
    if len(measured) == 0:
        return TurningPoint(None, turning_fit, None, None, tolerance, reason="no batch size has a trial that "
                            "reached the full budget", uncertainty=None), {}
    # A batch size with no completed trial (diverged, stopped, still running) counts as NaN: the walk
    # up from the best batch stops there rather than jumping over a batch nobody measured.
    # On the mean over repeats (the best run itself when repeats = 1).
    batches, means = per_batch["batch_size"].tolist(), per_batch[f"mean_{metric}"].astype(float).tolist()
    fitted = dict(zip(batches, monotone_fit(batches, means, mode=mode)))
    raw = turning_point(batches, means, mode=mode, tolerance=tolerance)
    monotone = turning_point(batches, list(fitted.values()), mode=mode, tolerance=tolerance)
    answer = monotone if turning_fit == "monotone" else raw
    reason = None
    # Name a batch size with no completed trial only where it ended the walk: right above the answer. The
    # walk stopped there, not at a drop, so the answer is a lower bound; else a bound only at the grid's edge.
    above = [b for b in sorted(per_batch["batch_size"]) if b > answer]
    bound = edge_bound(answer, measured["batch_size"].tolist())
    if len(measured) == 1:
        reason = "only one batch size completed: nothing to compare it with"
    elif above and above[0] not in set(measured["batch_size"]):
        reason, bound = f"batch size {int(above[0])} has no completed trial and ends the walk", LOWER
    uncertainty = _uncertainty(per_batch, metric=metric, mode=mode, tolerance=tolerance,
                               monotone=turning_fit == "monotone")
    best = int(measured.loc[measured[f"best_{metric}"].astype(float).idxmax() if mode == "max"
                            else measured[f"best_{metric}"].astype(float).idxmin(), "batch_size"])
    effort = unequal_effort(per_batch["batch_size"].tolist(), per_batch["trials"].tolist(), check=[best, answer])
    return TurningPoint(answer, turning_fit, raw, monotone, tolerance, reason, uncertainty, bound=bound,
                        unequal_effort=effort), fitted


def _tradeoff(fit: TradeoffFit, *, left_out: Optional[str], reason: Optional[str]) -> Tradeoff:
    # An unbounded end (B_crit = ∞ in enough resamples) is None: JSON has no infinity.
    return Tradeoff(b_crit=fit.b_crit, left_out=left_out,
                    ci95=[v if math.isfinite(v) else None for v in fit.ci] if fit.ci else None,
                    s_min=fit.s_min, e_min=fit.e_min, points=fit.points, reason=reason, bound=fit.bound,
                    b_crit_bound=fit.bound_at)


def _target_rules(history: pd.DataFrame, trials: pd.DataFrame, *, metric: str, mode: str,
                  target: float) -> tuple[pd.DataFrame, pd.DataFrame, Tradeoff, OverheadRule]:
    """Steps to ``target`` per trial and per batch size (the tables gain those columns), and the two rules
    that read them: the steps/samples tradeoff and the 20 % rule."""
    trials = trials.merge(_steps_to_target(history, metric=metric, mode=mode, target=target),
                          left_on="trial_id", right_index=True, how="left")
    per_batch = per_batch_table(trials, metric=metric, mode=mode)
    reached = per_batch.dropna(subset=["steps_to_target"])
    # A batch that reached the target by its first report has only an upper bound on its steps: fitting
    # it as exact reads a steps ∝ 1/B line (perfect scaling) into what may be reporting too rarely.
    early = reached["target_at_first_report"].astype(bool)
    left_out = [int(b) for b in reached.loc[early, "batch_size"]]
    reached = reached[~early]
    fit = fit_tradeoff(reached["batch_size"].tolist(), reached["steps_to_target"].tolist())
    b20 = overhead_rule(reached["batch_size"].tolist(), reached["steps_to_target"].tolist())
    fit_reason = fit.reason
    b20_reason = None if b20 is not None else f"no batch size reached the target {target:.4g}"
    if b20 is not None and len(reached) == 1:
        b20_reason = "only one batch size reached the target"
    if fit.b_crit is None and not len(reached):
        fit_reason = f"no batch size reached the target {target:.4g}"
    note = None  # batch sizes both rules left out, and why
    if left_out:
        note = (f"B={', '.join(map(str, left_out))} reached the target {target:.4g} by the first report, so "
                f"their steps to it are only upper bounds: left out (report more often, "
                f"training.eval_every_samples, or raise the target)")
        if not len(reached):
            fit_reason = b20_reason = note
            note = None
    return (trials, per_batch, _tradeoff(fit, left_out=note, reason=fit_reason),
            OverheadRule(b20, b20_reason, left_out=note, bound=edge_bound(b20, reached["batch_size"].tolist())))


def _with_noise_scale(history: pd.DataFrame, per_batch: pd.DataFrame, trials: pd.DataFrame,
                      noise_rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tables with B_simple early and over training, per batch size and per trial."""
    per_batch = per_batch.merge(noise_rows, on="batch_size", how="left")
    measured = history.dropna(subset=["b_simple"]).sort_values("samples_seen")
    per_trial = pd.DataFrame(
        [{"trial_id": t, "b_simple_early": _ratio_of_means(g.head(1)), "b_simple_mean": _ratio_of_means(g)}
         for t, g in measured.groupby("trial_id")])
    return per_batch, trials.merge(per_trial, on="trial_id", how="left")

# ---- the one answer ---------------------------------------------------------------------------------

READINGS = {"monotone": "monotone fit", "raw": "raw bests"}  # search.turning_point
NEXT_DOUBLINGS = 3  # a bound at the grid's edge: search this many doublings past it next
THIN_DATA = 4  # fewer batch sizes reaching the target after their first report: the rules rest on thin data
# The answer line's short forms of the cross-check line and the notes that follow it in the headline.
CROSS_CHECKS = {True: "cross-checks agree within one grid step", False: "a cross-check differs (below)",
                None: "no cross-check determined"}
EFFORT_MARK = "unequal search effort (below)"


def bound_text(value, bound: Optional[str], fmt: str = "{}") -> str:
    """A reading as the report writes it: "64", "≥ 128", "≤ 8", or "not determined"."""
    if value is None:
        return "not determined"
    return {LOWER: "≥ ", UPPER: "≤ "}.get(bound, "") + fmt.format(value)


def _sureness(turning: TurningPoint) -> tuple[Optional[bool], Optional[str]]:
    """The verdict in a few words: resolved, not resolved (and what would resolve it), or no estimate."""
    unc = turning.uncertainty
    if unc is None:
        return None, None
    if unc.verdict is None:
        return None, "no noise estimate (one run per batch size: set search.repeats >= 2)"
    v = unc.verdict
    if v.resolved:
        return True, "resolved"
    return False, ("not resolved: use " + (f"≥ {v.repeats_needed} repeats, " if v.repeats_needed else "")
                   + "a larger evaluation set or a smoother metric")


def _bound_phrase(turning: TurningPoint, next_range: Optional[list[int]], min_batch: int) -> Optional[str]:
    """Why the answer is a bound, and where to search next."""
    if turning.bound == LOWER:
        if turning.reason:  # the walk ended at a batch size with no completed trial
            return turning.reason
        return "the drop was not reached" + (f"; search {next_range[0]}…{next_range[1]} next" if next_range else "")
    if turning.bound == UPPER:
        phrase = "the drop comes right after the smallest batch measured"
        if next_range is None:
            return phrase + f"; no smaller batch to search ({min_batch} is the workers per trial)"
        floor = (f" (not below {min_batch}, the workers per trial)"
                 if next_range[0] == min_batch and turning.batch_size / 2 ** NEXT_DOUBLINGS < min_batch else "")
        return phrase + f"; search {next_range[0]}…{next_range[1]} next{floor}"
    return turning.reason


def _cross_checks(turning: TurningPoint, tradeoff: Tradeoff, overhead: OverheadRule) -> tuple[Optional[bool], str]:
    """The tradeoff and the 20 % rule against the turning point: within one grid step (a factor of 2,
    bounds as the ranges they allow: ``critical_batch.agree_within``), or why they differ."""
    anchor = bound_interval(turning.batch_size, turning.bound)
    plural = tradeoff.points != 1
    thin = (f" (thin data: {tradeoff.points} batch size{'s' if plural else ''} reached the target after "
            f"{'their' if plural else 'its'} first report)" if tradeoff.points < THIN_DATA else "")
    parts, agreed, reasons = [], [], []
    b_crit = tradeoff.b_crit if tradeoff.b_crit is not None else tradeoff.b_crit_bound
    for name, value, bound, reason, fmt in (("tradeoff B_crit", b_crit, tradeoff.bound, tradeoff.reason, "{:.3g}"),
                                            ("20% rule", overhead.batch_size, overhead.bound, overhead.reason, "{}")):
        text = f"{name} {bound_text(value, bound, fmt)}"
        if value is None:
            parts.append(f"{text} ({'the same reason' if reason in reasons else reason})")
            reasons.append(reason)
        elif anchor is not None:
            agreed.append(agree_within(anchor, bound_interval(value, bound)))
            parts.append(text + (" agrees within one grid step" if agreed[-1] else
                                 f" differs from {bound_text(turning.batch_size, turning.bound)} by more than one "
                                 f"grid step{thin}"))
        else:
            parts.append(text)
    return (all(agreed) if agreed else None), "Cross-checks: " + "; ".join(parts)


def _answer(turning: TurningPoint, tradeoff: Tradeoff, overhead: OverheadRule, grid: list[int], *,
            min_batch: int) -> Answer:
    """The headline's answer: the turning point, as the spec reads it (``search.turning_point``), is the
    critical batch; the verdict says how sure; the tradeoff and the 20 % rule are cross-checks."""
    reading = f"turning point, {READINGS[turning.fit]}"
    next_range = (next_batch_range(turning.batch_size, turning.bound, grid, min_batch=min_batch,
                                   doublings=NEXT_DOUBLINGS)
                  if turning.batch_size is not None and not (turning.bound == LOWER and turning.reason) else None)
    resolved, sure = _sureness(turning)
    agree, cross = _cross_checks(turning, tradeoff, overhead)
    notes = [n for n in (turning.unequal_effort,) if n]
    if turning.batch_size is None:
        text = f"Critical batch: not determined ({turning.reason})"
    else:
        phrase = _bound_phrase(turning, next_range, min_batch)
        bits = [reading + (f": {phrase}" if phrase else ""), sure, CROSS_CHECKS[agree], EFFORT_MARK if notes else None]
        text = (f"Critical batch: {bound_text(turning.batch_size, turning.bound)} ("
                + "; ".join(b for b in bits if b) + ")")
    return Answer(batch_size=turning.batch_size, bound=turning.bound, reading=reading, resolved=resolved,
                  cross_checks_agree=agree, cross_checks=cross, next_batch_range=next_range, notes=notes, text=text)


FRONT_COLUMNS = ["trial_id", "batch_size", "alpha", "warmup_fraction", "peak_lr", "wall_time_s",
                  "projected_time_s"]  # then the metric


def summarize(history: pd.DataFrame, *, metric: str, mode: str, budget_samples: int,
              tolerance: float = 0.01, target: Optional[float] = None, turning_fit: str = "monotone",
              min_batch_size: int = 1) -> Summary:
    """Everything ``summary.json`` holds, typed (NaN becomes None; ``Summary.to_json`` writes it). ``turning_fit``:
    ``monotone`` reads the turning point off the per-batch means' monotone fit, ``raw`` off the means
    (``search.turning_point``); the other reading is kept as ``raw_batch_size`` / ``monotone_batch_size``.
    ``min_batch_size``: the smallest batch a next search may propose (the workers per trial)."""
    if turning_fit not in ("monotone", "raw"):
        raise ValueError(f"turning_fit must be 'monotone' or 'raw', got {turning_fit!r}")
    trials = trial_table(history, metric=metric, budget_samples=budget_samples)
    per_batch = per_batch_table(trials, metric=metric, mode=mode) if len(trials) else pd.DataFrame()
    measured = per_batch.dropna(subset=[f"best_{metric}"]) if len(per_batch) else per_batch
    turning, fitted = _turning_point(per_batch, measured, metric=metric, mode=mode, tolerance=tolerance,
                                     turning_fit=turning_fit)

    target_source = "user" if target is not None else "default: worst per-batch best"
    if target is None and len(measured):
        target = default_target(measured, metric=metric, mode=mode)
    no_target = "no completed trial to take a target from"
    tradeoff = _tradeoff(TradeoffFit(None, None, None), left_out=None, reason=no_target)
    overhead = OverheadRule(None, no_target)
    if target is not None and len(trials):
        trials, per_batch, tradeoff, overhead = _target_rules(history, trials, metric=metric, mode=mode,
                                                              target=target)
    if fitted:
        per_batch[f"fit_{metric}"] = per_batch["batch_size"].map(fitted)
    noise_rows, noise = noise_scale_table(history)
    if len(noise_rows):
        per_batch, trials = _with_noise_scale(history, per_batch, trials, noise_rows)

    answer = _answer(turning, tradeoff, overhead, [int(b) for b in per_batch.get("batch_size", [])],
                     min_batch=min_batch_size)
    done = trials[trials["status"] == "completed"].reset_index(drop=True)
    done["projected_time_s"] = budget_samples / done["samples_per_s"]
    columns = FRONT_COLUMNS + [metric]
    front_wall = pareto_front(done["wall_time_s"].tolist(), done[metric].tolist(), mode=mode) if len(done) else []
    front_projected = (pareto_front(done["projected_time_s"].tolist(), done[metric].tolist(), mode=mode)
                       if len(done) else [])
    return Summary(
        answer=answer, metric=metric, mode=mode, budget_samples=budget_samples, target=target,
        target_source=target_source,
        critical_batch=CriticalBatch(batch_size=turning.batch_size, turning_point=turning, tradeoff=tradeoff,
                                     overhead_20pct=overhead, tolerance=tolerance, reason=turning.reason),
        noise_scale=NoiseScale(**{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                  for k, v in noise.items()}),
        recommendation=recommend(done, front_projected, metric=metric, mode=mode, tolerance=tolerance,
                                 budget_samples=budget_samples, cap=answer.batch_size, resolved=answer.resolved,
                                 cap_text=bound_text(answer.batch_size, answer.bound)),
        per_batch=_records(per_batch), pareto=_records(done.loc[front_wall, columns]),
        pareto_projected=_records(done.loc[front_projected, columns]), trials=_records(trials),
        importance=Importance(EVALUATOR, *param_importance(trials, metric=metric, mode=mode)))


def _records(frame: pd.DataFrame) -> list[dict]:
    def clean(v):
        if isinstance(v, (np.integer,)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            return None if not math.isfinite(v) else float(v)
        return v
    return [{k: clean(v) for k, v in row.items()} for row in frame.to_dict("records")]


def write_summary(summary: Summary, history: pd.DataFrame, directory: str | Path) -> Path:
    """Write ``summary.json`` (strict JSON) and ``trials.csv`` (one row per trial) to ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(summary.to_json())
    pd.DataFrame(summary.trials).to_csv(directory / "trials.csv", index=False)
    history.to_csv(directory / "history.csv", index=False)
    return directory
