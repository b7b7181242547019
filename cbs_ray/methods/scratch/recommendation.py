"""The from-scratch recommendation: the fastest configuration on the projected-time Pareto front within tolerance
of the best, never past the critical batch silently, with its mean over repeats and a word where its alpha and warmup
are a seed's rather than the search's choice.
"""

from __future__ import annotations

import math
from typing import Optional

import pandas as pd

from cbs_ray.maths.critical_batch import within_tolerance
from cbs_ray.maths.lr_schedule import warmup_steps
from cbs_ray.methods.scratch.summary import Recommendation
from cbs_ray.records.columns import Column

__all__ = ["recommend", "unsearched"]


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
    """Why the recommendation is a smaller batch than the critical batch (without it, "Critical batch: 128" above
    "Recommendation: batch 64" said nothing): it was measured faster here, at a quality within tolerance."""
    batch, time_s = int(row[Column.batch_size]), float(row[Column.projected_time_s])
    at_cap = [i for i in ok if int(done.loc[i, Column.batch_size]) == cap]
    said = (f"B={batch} is below the critical batch {cap_text} (the largest batch that costs no quality): it was the "
            f"fastest within tolerance on this machine ({time_s:.3g} s projected")
    if at_cap:
        said += f" vs {float(done.loc[at_cap[0], Column.projected_time_s]):.3g} s for B={cap})"
    else:
        said += f"; no trial at B={cap} reached the full budget within tolerance)"
    return said + f"; B={cap} takes fewer optimizer steps, and is the one to use where a larger batch runs faster"
