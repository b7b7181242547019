"""The readings of the critical batch from the per-batch table: the turning point with its noise, the
steps/samples tradeoff and the 20 % rule at a target, and the recommendation capped at the answer.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

from cbs_ray.analysis.summary_record import OverheadRule, Recommendation, Tradeoff, TurningPoint, Uncertainty, Verdict
from cbs_ray.analysis.tables import per_batch_table, ratio_of_means, steps_to_target_table, unequal_effort
from cbs_ray.maths.critical_batch import LOWER, edge_bound, monotone_fit, turning_point, within_tolerance
from cbs_ray.maths.lr_schedule import warmup_steps
from cbs_ray.maths.tradeoff import TradeoffFit, fit_tradeoff, overhead_rule
from cbs_ray.maths.uncertainty import turning_point_range, verdict
from cbs_ray.records.columns import Column

__all__ = ["default_target", "recommend", "unsearched"]


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


def _recommendation(row, *, metric: str, budget_samples: int, note: Optional[str] = None,
                    runs: tuple = (1, None, None), unsearched: Optional[str] = None) -> Recommendation:
    steps = budget_samples // int(row[Column.batch_size])
    warmup = float(row[Column.warmup_fraction])
    return Recommendation(
        batch_size=int(row[Column.batch_size]), alpha=float(row[Column.alpha]), peak_lr=float(row[Column.peak_lr]),
        warmup_fraction=warmup, warmup_steps=warmup_steps(warmup, steps),
        warmup_samples=warmup_steps(warmup, steps) * int(row[Column.batch_size]),
        budget_samples=budget_samples, optimizer_steps=steps, metric=metric, metric_value=float(row[metric]),
        projected_time_s=float(row[Column.projected_time_s]), trial_id=row[Column.trial_id], note=note,
        runs=runs[0], metric_mean=runs[1], metric_se=runs[2], unsearched=unsearched)


def _runs_of(row, per_batch: Optional[pd.DataFrame], *, metric: str) -> tuple:
    """(runs, mean, standard error) of the recommended configuration where it was repeated: its batch size's
    per-batch figures, when it is that batch size's best configuration (the one ``search.repeats`` re-trains)
    or one of those repeats. (1, None, None) for one run, or for another configuration of the batch size."""
    one = (1, None, None)
    if per_batch is None or not len(per_batch) or f"mean_{metric}" not in per_batch:
        return one
    same = per_batch[per_batch[Column.batch_size] == int(row[Column.batch_size])]
    if not len(same):
        return one
    batch = same.iloc[0]
    flag = row.get(Column.repeat, False)
    is_repeat = bool(flag) if pd.notna(flag) else False
    runs = int(batch[Column.runs]) if pd.notna(batch.get(Column.runs)) else 1
    if runs < 2 or not (is_repeat or row[Column.trial_id] == batch.get(Column.trial_id)):
        return one
    se = batch.get(f"se_{metric}")
    return runs, float(batch[f"mean_{metric}"]), float(se) if se is not None and pd.notna(se) else None


def _is_seed(row, seed: tuple[float, float]) -> bool:
    return (math.isclose(float(row[Column.alpha]), seed[0], rel_tol=1e-9, abs_tol=1e-12)
            and math.isclose(float(row[Column.warmup_fraction]), seed[1], rel_tol=1e-9, abs_tol=1e-12))


def unsearched(row, trials: Optional[pd.DataFrame], seeds: Optional[dict]) -> Optional[str]:
    """Why the recommended alpha and warmup were not the search's choice, or None: the trial is its batch
    size's seeded configuration (``seeds``: batch size → (alpha, warmup fraction) each batch size was seeded
    with; None where nothing was seeded, a grid), and then whether any proposed configuration of that batch
    size reached the full budget to be compared with it: with few trials per batch size ASHA may stop every
    proposal at its first report, and the seed then wins unopposed."""
    batch = int(row[Column.batch_size])
    seed = (seeds or {}).get(batch)
    if seed is None or not _is_seed(row, seed):
        return None
    what = (f"B={batch}'s seeded configuration (alpha {seed[0]:.3g}, warmup {seed[1]:.3g}), the search's starting "
            f"point, not chosen by it")
    at_batch = trials[trials[Column.batch_size] == batch] if trials is not None else pd.DataFrame()
    if Column.repeat in at_batch:
        at_batch = at_batch[~at_batch[Column.repeat].astype(bool)]
    proposed = at_batch[[not _is_seed(r, seed) for _, r in at_batch.iterrows()]] if len(at_batch) else at_batch
    completed = int((proposed[Column.status] == "completed").sum()) if len(proposed) else 0
    if completed:
        return (f"alpha and warmup are {what}; it beat the {completed} proposed configuration"
                f"{'s' if completed > 1 else ''} that reached the full budget at B={batch}")
    if not len(proposed):
        why = f"no other configuration was tried at B={batch}"
    else:
        stopped = int((proposed[Column.status] == "stopped").sum())
        why = (f"none of the {len(proposed)} proposed configuration{'s' if len(proposed) > 1 else ''} at B={batch} "
               f"reached the full budget" + (f" ({stopped} stopped early)" if stopped else ""))
    return (f"alpha and warmup were not searched: the recommendation is {what}, and {why}; give each batch size "
            f"more trials (search.num_trials) or a longer asha.grace_period_samples")


def recommend(done: pd.DataFrame, front: list[int], *, metric: str, mode: str, tolerance: float,
              budget_samples: int, cap: Optional[int] = None, cap_text: Optional[str] = None,
              resolved: Optional[bool] = None, per_batch: Optional[pd.DataFrame] = None,
              trials: Optional[pd.DataFrame] = None, seeds: Optional[dict] = None,
              relative: bool = True) -> Optional[Recommendation]:
    """The fastest configuration on the (projected-time) Pareto front whose metric is within
    ``tolerance`` (``relative``: a fraction; else in the metric's units) of the best completed trial.

    ``cap``: the critical batch the report stands behind (``Answer.batch_size``; ``cap_text`` as the
    headline writes it, e.g. "≥ 64"). The recommendation never goes past it silently: where the fastest
    within tolerance is a larger batch, it is past the drop or only within tolerance by noise, so the
    fastest trial within tolerance at or below the cap is recommended instead, with a ``note`` naming the
    faster one (and saying the turning point is not resolved, where ``resolved`` is False). Where no trial
    at or below the cap is within tolerance, the fastest stays, with a note saying so.

    ``per_batch`` (the per-batch table) gives the recommended configuration's mean over its repeats
    (``_runs_of``); ``trials`` and ``seeds`` say when its alpha and warmup are a seeded point (``unsearched``)."""
    if not front:
        return None
    best = done[metric].max() if mode == "max" else done[metric].min()
    ok = [i for i in done.sort_values(Column.projected_time_s, kind="stable").index
          if within_tolerance(float(done.loc[i, metric]), float(best), mode=mode, tolerance=tolerance,
                              relative=relative)]
    # The front is ordered by time: its first point within tolerance is the fastest within tolerance.
    fastest = next((i for i in front if i in set(ok)), None)
    if fastest is None:
        return None
    row, note = done.loc[fastest], None
    if cap is not None and int(row[Column.batch_size]) > cap:
        past = (f"B={int(row[Column.batch_size])} (trial {row[Column.trial_id]}) is the fastest within tolerance of "
                f"the best, but past the critical batch {cap_text or cap}"
                + (", which is not resolved" if resolved is False else ""))
        below = next((i for i in ok if int(done.loc[i, Column.batch_size]) <= cap), None)
        if below is None:
            note = past + ": no trial at or below it is within tolerance, so it stays"
        else:
            row, note = done.loc[below], past + ": recommended instead the fastest at or below it"
    elif cap is not None and int(row[Column.batch_size]) < cap:
        note = _below_the_cap(done, row, ok, cap=cap, cap_text=cap_text or str(cap))
    return _recommendation(row, metric=metric, budget_samples=budget_samples, note=note,
                           runs=_runs_of(row, per_batch, metric=metric), unsearched=unsearched(row, trials, seeds))


def _below_the_cap(done: pd.DataFrame, row, ok: list, *, cap: int, cap_text: str) -> str:
    """Why the recommendation is a smaller batch than the critical batch (issue 40 row 8: "Critical batch: 128"
    above "Recommendation: batch 64" said nothing): it was measured faster here, at a quality within tolerance."""
    batch, time_s = int(row[Column.batch_size]), float(row[Column.projected_time_s])
    at_cap = [i for i in ok if int(done.loc[i, Column.batch_size]) == cap]
    said = (f"B={batch} is below the critical batch {cap_text} (the largest batch that costs no quality): it was the "
            f"fastest within tolerance on this machine ({time_s:.3g} s projected")
    if at_cap:
        said += f" vs {float(done.loc[at_cap[0], Column.projected_time_s]):.3g} s for B={cap})"
    else:
        said += f"; no trial at B={cap} reached the full budget within tolerance)"
    return said + f"; B={cap} takes fewer optimizer steps, and is the one to use where a larger batch runs faster"


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
