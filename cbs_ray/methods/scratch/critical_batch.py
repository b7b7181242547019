"""The three from-scratch readings of the critical batch from the per-batch table: the turning point with its
noise, and at a target the steps/samples tradeoff and the 20 % rule; the noise scale joined to the tables.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

from cbs_ray.analysis.tables import ratio_of_means
from cbs_ray.maths.critical_batch import LOWER, edge_bound, monotone_fit, turning_point
from cbs_ray.maths.tradeoff import TradeoffFit, fit_tradeoff, overhead_rule
from cbs_ray.maths.uncertainty import turning_point_range, verdict
from cbs_ray.methods.scratch.batch_table import per_batch_table, steps_to_target_table, unequal_effort
from cbs_ray.methods.scratch.summary import OverheadRule, Tradeoff, TurningPoint, Uncertainty, Verdict
from cbs_ray.records.columns import Column

__all__ = ["turning_point_reading", "default_target", "target_rules", "tradeoff_reading", "with_noise_scale"]


def _uncertainty(per_batch: pd.DataFrame, *, metric: str, mode: str, tolerance: float,
                 monotone: bool, relative: bool = True) -> Uncertainty:
    """Range of the turning point under the per-batch standard errors, and the verdict. Batch sizes with no
    completed run stay in the redraws as gaps (NaN), where the walk stops as it does for the headline."""
    rows = per_batch.dropna(subset=[f"mean_{metric}"])
    se = rows[f"se_{metric}"].astype(float)
    if se.isna().any():
        return Uncertainty(range=None, verdict=None, reason=f"no noise estimate for {metric} from one run per "
                           "batch size: set search.repeats >= 2")
    repeats = int(rows[Column.runs].max())
    run_sd = float((se * np.sqrt(rows[Column.runs])).max())
    spread = turning_point_range(per_batch[Column.batch_size].tolist(),
                                 per_batch[f"mean_{metric}"].astype(float).tolist(),
                                 per_batch[f"se_{metric}"].astype(float).tolist(), mode=mode, tolerance=tolerance,
                                 relative=relative, monotone=monotone)
    return Uncertainty(range=[spread["low"], spread["high"]], level=spread["level"], share=spread["share"],
                       verdict=Verdict(**verdict(rows[f"mean_{metric}"].tolist(), se.tolist(), mode=mode,
                                                 tolerance=tolerance, relative=relative, run_sd=run_sd,
                                                 repeats=repeats)),
                       noise_se_max=float(se.max()), reason=None)


def default_target(per_batch: pd.DataFrame, *, metric: str, mode: str) -> float:
    """A level every batch size with a completed trial reaches: the worst of the per-batch bests."""
    values = per_batch[f"best_{metric}"].dropna()
    return float(values.min() if mode == "max" else values.max())


def turning_point_reading(per_batch: pd.DataFrame, measured: pd.DataFrame, *, metric: str, mode: str, tolerance: float,
                   turning_fit: str, relative: bool = True) -> tuple[TurningPoint, dict]:
    """The turning point read both ways (the spec's ``turning_fit`` is the answer), and the monotone fit
    per batch size ({} when no batch size completed). ``relative``: ``tolerance`` a fraction of the best, else
    in the metric's units (nats for a loss; ``spec.tolerance``)."""
    if len(measured) == 0:
        return TurningPoint(None, turning_fit, None, None, tolerance, reason="no batch size has a trial that "
                            "reached the full budget", uncertainty=None), {}
    # A batch size with no completed trial (diverged, stopped, still running) counts as NaN: the walk
    # up from the best batch stops there rather than jumping over a batch nobody measured.
    # On the mean over repeats (the best run itself when repeats = 1).
    batches, means = per_batch[Column.batch_size].tolist(), per_batch[f"mean_{metric}"].astype(float).tolist()
    fitted = dict(zip(batches, monotone_fit(batches, means, mode=mode)))
    raw = turning_point(batches, means, mode=mode, tolerance=tolerance, relative=relative)
    monotone = turning_point(batches, list(fitted.values()), mode=mode, tolerance=tolerance, relative=relative)
    answer = monotone if turning_fit == "monotone" else raw
    reason = None
    # Name a batch size with no completed trial only where it ended the walk: right above the answer. The
    # walk stopped there, not at a drop, so the answer is a lower bound; else a bound only at the grid's edge.
    above = [b for b in sorted(per_batch[Column.batch_size]) if b > answer]
    bound = edge_bound(answer, measured[Column.batch_size].tolist())
    if len(measured) == 1:
        reason = "only one batch size completed: nothing to compare it with"
    elif above and above[0] not in set(measured[Column.batch_size]):
        reason, bound = f"batch size {int(above[0])} has no completed trial and ends the walk", LOWER
    uncertainty = _uncertainty(per_batch, metric=metric, mode=mode, tolerance=tolerance,
                               monotone=turning_fit == "monotone", relative=relative)
    best = int(measured.loc[measured[f"best_{metric}"].astype(float).idxmax() if mode == "max"
                            else measured[f"best_{metric}"].astype(float).idxmin(), Column.batch_size])
    effort = unequal_effort(per_batch[Column.batch_size].tolist(), per_batch[Column.trials].tolist(),
                            check=[best, answer])
    return TurningPoint(answer, turning_fit, raw, monotone, tolerance, reason, uncertainty, bound=bound,
                        unequal_effort=effort), fitted


def tradeoff_reading(fit: TradeoffFit, *, left_out: Optional[str], reason: Optional[str]) -> Tradeoff:
    # An unbounded end (B_crit = ∞ in enough resamples) is None: JSON has no infinity.
    return Tradeoff(b_crit=fit.b_crit, left_out=left_out,
                    ci95=[v if math.isfinite(v) else None for v in fit.ci] if fit.ci else None,
                    s_min=fit.s_min, e_min=fit.e_min, points=fit.points, reason=reason, bound=fit.bound,
                    b_crit_bound=fit.bound_at)


def target_rules(history: pd.DataFrame, trials: pd.DataFrame, *, metric: str, mode: str,
                  target: float) -> tuple[pd.DataFrame, pd.DataFrame, Tradeoff, OverheadRule]:
    """Steps to ``target`` per trial and per batch size (the tables gain those columns), and the two rules
    that read them: the steps/samples tradeoff and the 20 % rule."""
    trials = trials.merge(steps_to_target_table(history, metric=metric, mode=mode, target=target),
                          left_on=Column.trial_id, right_index=True, how="left")
    per_batch = per_batch_table(trials, metric=metric, mode=mode)
    reached = per_batch.dropna(subset=[Column.steps_to_target])
    # A batch that reached the target by its first report has only an upper bound on its steps: fitting
    # it as exact reads a steps ∝ 1/B line (perfect scaling) into what may be reporting too rarely.
    early = reached[Column.target_at_first_report].astype(bool)
    left_out = [int(b) for b in reached.loc[early, Column.batch_size]]
    reached = reached[~early]
    batches, steps = reached[Column.batch_size].tolist(), reached[Column.steps_to_target].tolist()
    fit = fit_tradeoff(batches, steps)
    b20 = overhead_rule(batches, steps)
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
    return (trials, per_batch, tradeoff_reading(fit, left_out=note, reason=fit_reason),
            OverheadRule(b20, b20_reason, left_out=note, bound=edge_bound(b20, batches)))


def with_noise_scale(history: pd.DataFrame, per_batch: pd.DataFrame, trials: pd.DataFrame,
                      noise_rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tables with B_simple early and over training, per batch size and per trial."""
    per_batch = per_batch.merge(noise_rows, on=Column.batch_size, how="left")
    measured = history.dropna(subset=[Column.b_simple]).sort_values(Column.samples_seen)
    per_trial = pd.DataFrame(
        [{Column.trial_id: t, Column.b_simple_early: ratio_of_means(g.head(1)),
          Column.b_simple_mean: ratio_of_means(g)} for t, g in measured.groupby(Column.trial_id)])
    return per_batch, trials.merge(per_trial, on=Column.trial_id, how="left")
