"""The critical batch over the course of training, read off branches (``search.method: branch``).

Pure pandas: the input is the history of a branch search (one row per report of every run: the trunk, the
branches, the schedule's validation runs; ``methods.branch.runs`` says what each trains), the output a typed
``BranchSummary`` whose ``to_json`` is ``summary.json``.

**The paper's rule** (Merrill et al. 2025, "Critical Batch Size Revisited: A Simple Empirical Approach to
Large-Batch Language Model Training", arXiv 2505.23971, §3.1 and App. A): from a checkpoint of a run at batch
B after t samples, branches train at k·B with LR √k·η, keeping the run's state, for a window Δ small against the
budget; with L the training loss smoothed by an EMA (α = 0.5), k* is the largest k such that, for every k < k*,
L_k* ≤ L_k + ε, with ε = 0.01 absolute. Here, by default::

    CBS(t) = k*·B,  k* = max { k : L_k ≤ min_{j < k} L_j + ε },  the trunk (k = 1) among the j

over the branch batches, reported as the interval [k*·B, next·B] (the next branch batch above k*·B; none above
the largest). What is measured, and where it departs from the paper (each an option,
``methods.branch.settings.BranchSettings``):

- L is the **eval loss** at exactly t + Δ on the fixed eval set (``branch.loss: eval``): one instrument for
  trunk and branches alike, with no smoothing to choose. ``branch.loss: train_ema`` compares the paper's
  EMA-smoothed training loss (each run's ``train_loss_ema`` at t + Δ) instead.
- ε absolute, 0.01 nats, the paper's (``branch.tolerance``); ``branch.tolerance_relative`` reads it as a fraction
  of the reference loss (the rule before the paper's was read: 2.5× looser at a loss of 2.6, 7× at 7).
- k is a power of two (2, 4, 8, …): the search's batches are; the interval says how coarse that is.
- one LR per batch, √k·η (alpha 0.5); ``branch.alphas`` with more than one alpha takes the best mean per batch,
  a deviation the report names (a min over noisy runs and an LR search the trunk never gets both push CBS up).
- a batch whose runs all diverged fails; one not measured (yet) above k* makes CBS(t) a lower bound.

At the edges CBS(t) is a **bound**: when no branch batch passes, CBS(t) ≤ the smallest branch batch
(``bound = "upper"``, ``batch_size`` = the trunk's, interval [B, smallest branch]); when the largest passes,
CBS(t) ≥ it (``bound = "lower"``, interval [largest, None]).

**Power.** When the trunk's own improvement over the window, L_trunk(t) − L_trunk(t + Δ), is below 2ε, no
comparison at ε can tell a batch that keeps up from one that stalls: every branch would pass. The point is then
*not resolvable* (``resolvable = False``): it says so, and neither the trend nor the schedule reads it.

**Noise.** With ``branch.repeats: r`` each (checkpoint, batch) runs r times with other seeds' data order from
the checkpoint, the trunk's continuation at its own batch included, so every loss is a mean with a standard
error and a comparison is *close* when |excess − ε| < 2·√(se² + se_ref²) (two standard errors of the
difference). With one run each there is no repeat to measure the noise with, and a comparison is close when it
lies within half of ε from the line (the turning point's verdict uses the same half). A decrease of CBS(t) from
B1 at t1 to B2 < B1 at t2 is *within the noise* when every batch in (B2, B1] was close at t1 or t2
(``branch_trend``).

The schedule built from these points and its validation are ``branch_schedule``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Optional

import numpy as np
import pandas as pd

from cbs_ray.analysis.json_values import json_clean
from cbs_ray.maths.critical_batch import LOWER, UPPER
from cbs_ray.records.columns import Column, require_columns

__all__ = ["NOISE_FRACTION", "NOISE_Z", "POWER_FACTOR", "BranchOutcome", "CbsPoint", "critical_batch_over_training",
           "loss_column"]

NOISE_FRACTION = 0.5
"""Without repeats: a comparison within this fraction of the tolerance from the line is close."""
NOISE_Z = 2.0
"""With repeats: a comparison within this many standard errors of the difference from the line is close."""
POWER_FACTOR = 2.0
"""A point is resolvable when the trunk improves by at least this many ε over the window."""


def is_finite_number(value) -> bool:
    return value is not None and isinstance(value, (int, float, np.number)) and math.isfinite(float(value))


def as_dict(obj) -> dict:
    return {f.name: json_clean(getattr(obj, f.name)) for f in fields(obj)
            if not (f.metadata.get("omit_if_none") and getattr(obj, f.name) is None)}


def rows_of_role(history: pd.DataFrame, role: str) -> pd.DataFrame:
    if history.empty or Column.role not in history:
        return history.iloc[0:0]
    return history[history[Column.role] == role]


def diverged_runs(row) -> bool:
    """A report that diverged (its ``diverged`` flag) or has no finite eval loss: it fails."""
    flag = row.get(Column.diverged, False)
    flagged = isinstance(flag, (bool, np.bool_, int, np.integer)) and bool(flag)
    return flagged or not is_finite_number(row.get(Column.eval_loss))


# ---- CBS(t) ------------------------------------------------------------------------------------------

def loss_column(loss: str) -> str:
    """The history's column ``branch.loss`` compares: ``eval`` the eval loss, ``train_ema`` the EMA-smoothed
    training loss."""
    return Column.train_loss_ema if loss == "train_ema" else Column.eval_loss


@dataclass(frozen=True)
class BranchOutcome:
    """One branch batch at one checkpoint (or the trunk's own, ``batch_size`` = the trunk's): its runs' mean
    loss at the window's end against the best of the smaller batches."""

    batch_size: int
    loss: Optional[float]
    """The mean loss over its seeds at the window's end (the best alpha's, where several were tried); None:
    every run diverged or none reported."""
    alpha: Optional[float]
    """The alpha of that mean."""
    standard_error: Optional[float]
    """Of ``loss``, over the seeds (None with one)."""
    seeds: int
    """Runs that reported at the window's end for that alpha (its seeds)."""
    reference_batch: Optional[int]
    """The smaller batch (the trunk's included) with the lowest loss: the one this batch must stay within ε of."""
    reference_loss: Optional[float]
    excess: Optional[float]
    """loss − reference loss (relative tolerance: loss / reference − 1)."""
    recovers: bool
    """excess ≤ tolerance: this batch passes the paper's test against every smaller batch."""
    close: bool
    """Noise could flip the comparison (module docstring)."""
    runs: int
    """Runs (alphas × seeds) that reported at the window's end."""
    diverged: int
    """Of those, runs that diverged (they fail)."""
    status: str
    """``recovers``, ``fails``, ``diverged`` (every run), ``missing`` (none reported) or ``trunk``."""

    def to_dict(self) -> dict:
        return as_dict(self)


@dataclass(frozen=True)
class CbsPoint:
    """CBS(t) at one checkpoint t (``samples_seen``)."""

    samples_seen: int
    """The checkpoint t the branches started from, samples the trunk had seen."""
    batch_size: int
    """CBS(t) = k*·B; with ``bound`` a bound (the trunk's batch for "upper", the largest branch batch for
    "lower")."""
    bound: Optional[str]
    """None, ``"upper"`` (no branch batch passed) or ``"lower"`` (the largest passed, or one above k* has not
    reported)."""
    interval: Optional[list]
    """``[k*·B, next·B]``: CBS(t) lies in it (the next branch batch above k*; None above the largest)."""
    resolvable: bool
    """The trunk improved by at least 2ε over the window: the comparisons at ε can fail (module docstring)."""
    trunk_improvement: Optional[float]
    """L_trunk(t) − L_trunk(t + Δ) (relative tolerance: over L_trunk(t + Δ))."""
    window_samples: int
    trunk_loss: Optional[float]
    """The trunk's loss at t + window (the mean over its seeds with ``branch.repeats``)."""
    threshold: Optional[float]
    """The line the smallest branch batch must stay under: trunk_loss + ε (relative: × (1 + ε))."""
    trunk_loss_at_start: Optional[float]
    """The trunk's loss at t."""
    branches: tuple[BranchOutcome, ...]
    margin: Optional[float]
    """How far the deciding comparisons (k*'s own and the next batch's) lie from the line, in the tolerance's
    units: the smallest |excess − tolerance|."""
    close_call: bool
    """A deciding comparison is close: noise could move CBS(t)."""
    tokens_seen: Optional[int] = field(default=None, metadata={"omit_if_none": True})
    note: str = ""

    def outcome(self, batch: int) -> Optional[BranchOutcome]:
        return next((o for o in self.branches if o.batch_size == batch), None)

    def to_dict(self) -> dict:
        record = as_dict(self)
        # The per-batch readings once more as flat maps, for a table or a quick look in summary.json.
        record["loss_by_batch"] = {str(o.batch_size): json_clean(o.loss) for o in self.branches}
        record["alpha_by_batch"] = {str(o.batch_size): json_clean(o.alpha) for o in self.branches}
        return record


BRANCH_POINT_COLUMNS = [Column.start_samples, Column.samples_seen, Column.batch_size]
"""What CBS(t) cannot be read without, besides ``role`` (without it no run is a branch) and the loss compared."""


def last_by_samples(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per samples_seen (a resumed run may report a milestone twice: the later report counts)."""
    return frame.drop_duplicates(subset=[Column.samples_seen], keep="last") if not frame.empty else frame


def _value(row, column: str) -> Optional[float]:
    if diverged_runs(row) or not is_finite_number(row.get(column)):
        return None
    return float(row[column])


def _trunk_loss_at(trunk: pd.DataFrame, samples: int, column: str = Column.eval_loss) -> Optional[float]:
    rows = trunk[trunk[Column.samples_seen] == samples]
    return None if rows.empty else _value(rows.iloc[-1], column)


def run_key(frame: pd.DataFrame) -> list[str]:
    if Column.trial_id in frame:
        return [Column.trial_id]
    return [c for c in (Column.batch_size, Column.alpha, Column.seed_offset) if c in frame]


def _mean_se(values: list[float]) -> tuple[Optional[float], Optional[float]]:
    if not values:
        return None, None
    mean = float(np.mean(values))
    return mean, (float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else None)


def _excess(loss: float, reference: float, relative: bool) -> float:
    return loss / reference - 1.0 if relative else loss - reference


def _close(excess: float, tolerance: float, se: Optional[float], se_ref: Optional[float], reference: float,
           relative: bool) -> bool:
    if se is None and se_ref is None:
        return abs(excess - tolerance) < tolerance * NOISE_FRACTION
    spread = math.sqrt((se or 0.0) ** 2 + (se_ref or 0.0) ** 2) / (reference if relative else 1.0)
    return abs(excess - tolerance) < NOISE_Z * spread


def _batch_reading(runs: pd.DataFrame, column: str
                   ) -> tuple[Optional[float], Optional[float], Optional[float], int, int, int]:
    """``runs``: one row per run (alpha × seed) at the window's end. The best alpha's mean over its seeds:
    (mean, standard error, alpha, seeds, runs, diverged)."""
    values: dict = {}
    diverged = 0
    for _, r in runs.iterrows():
        v = _value(r, column)
        if v is None:
            diverged += 1
            continue
        alpha = float(r[Column.alpha]) if Column.alpha in r and is_finite_number(r[Column.alpha]) else None
        values.setdefault(alpha, []).append(v)
    if not values:
        return None, None, None, 0, len(runs), diverged
    alpha = min(values, key=lambda a: (float(np.mean(values[a])), a if a is not None else 0.0))
    mean, se = _mean_se(values[alpha])
    return mean, se, alpha, len(values[alpha]), len(runs), diverged


def _point(start: int, branches: pd.DataFrame, trunk: pd.DataFrame, *, trunk_batch: int, window_samples: int,
           tolerance: float, tokens_per_sample: Optional[int], relative: bool, column: str) -> CbsPoint:
    end = start + window_samples
    tokens = start * tokens_per_sample if tokens_per_sample else None
    # Each run's last report up to the window's end: at the end, or earlier where it diverged (a run stopped
    # early without diverging has not finished and is left out).
    upto = branches[branches[Column.samples_seen] <= end].sort_values(Column.samples_seen, kind="stable")
    last = upto.drop_duplicates(subset=run_key(branches), keep="last")
    at_end = (last[[r[Column.samples_seen] == end or diverged_runs(r) for _, r in last.iterrows()]] if not last.empty
              else last)
    trunk_end = _trunk_loss_at(trunk, end, column)
    # The trunk's continuations with other seeds (branch runs at its batch) join its own loss at t + Δ.
    continuations = at_end[at_end[Column.batch_size] == trunk_batch]
    trunk_values = [v for v in [trunk_end, *(_value(r, column) for _, r in continuations.iterrows())] if v is not None]
    trunk_loss, trunk_se = _mean_se(trunk_values) if trunk_end is not None else (None, None)
    at_start = _trunk_loss_at(trunk, start, column)
    if column == Column.train_loss_ema and at_start is None:
        at_start = _trunk_loss_at(trunk, start, Column.eval_loss)  # the power check needs a start; say which
    common: dict[str, Any] = dict(samples_seen=start, window_samples=window_samples, trunk_loss_at_start=at_start,
                                  tokens_seen=tokens)
    if trunk_loss is None:
        return CbsPoint(batch_size=trunk_batch, bound=None, interval=None, resolvable=False, trunk_improvement=None,
                        trunk_loss=None, threshold=None, branches=(), margin=None, close_call=False,
                        note=f"the trunk has no finite loss at {end} samples (checkpoint + window): "
                             "CBS(t) not determined", **common)
    improvement = None if at_start is None else _excess(at_start, trunk_loss, relative)
    resolvable = improvement is not None and improvement >= POWER_FACTOR * tolerance - 1e-12
    batches = sorted(int(b) for b in branches[Column.batch_size].unique() if int(b) != trunk_batch)
    # The walk up the batches: each compared with the best (lowest) loss of every smaller one, trunk included.
    seen = [(trunk_batch, trunk_loss, trunk_se)]
    outcomes = [BranchOutcome(trunk_batch, trunk_loss, None, trunk_se, len(trunk_values), None, None, None, True,
                              False, len(trunk_values), 0, "trunk")]
    for b in batches:
        loss, se, alpha, seeds, runs, diverged = _batch_reading(at_end[at_end[Column.batch_size] == b], column)
        ref_batch, ref_loss, ref_se = min(seen, key=lambda x: x[1])
        if loss is None:
            status = "missing" if runs == 0 else "diverged"
            outcomes.append(BranchOutcome(b, None, None, None, 0, ref_batch, ref_loss, None, False, False, runs,
                                          diverged, status))
            continue
        excess = _excess(loss, ref_loss, relative)
        recovers = excess <= tolerance + 1e-12
        outcomes.append(BranchOutcome(b, loss, alpha, se, seeds, ref_batch, ref_loss, excess, recovers,
                                      _close(excess, tolerance, se, ref_se, ref_loss, relative), runs, diverged,
                                      "recovers" if recovers else "fails"))
        seen.append((b, loss, se))
    branch_outcomes = outcomes[1:]
    passing = [o for o in branch_outcomes if o.recovers]
    k_star = passing[-1].batch_size if passing else trunk_batch
    above = [o for o in branch_outcomes if o.batch_size > k_star]
    missing_above = [o for o in above if o.status == "missing"]
    if missing_above:
        bound = LOWER
    elif not passing:
        bound = UPPER
    elif not above:
        bound = LOWER
    else:
        bound = None
    nxt = above[0].batch_size if above else None
    deciding = [o for o in (passing[-1] if passing else None, above[0] if above else None) if o is not None]
    distances = [abs(o.excess - tolerance) for o in deciding if o.excess is not None]
    margin = min(distances) if distances else None
    notes = [f"B={o.batch_size}: {o.status}" for o in branch_outcomes if o.status in ("missing", "diverged")]
    failed_below = [o.batch_size for o in branch_outcomes if o.batch_size < k_star and not o.recovers]
    if failed_below:
        notes.append(f"B={', '.join(map(str, failed_below))} failed below k*·B={k_star} (the paper's rule takes the "
                     f"largest batch that passes; noise, or a second plateau)")
    if not resolvable:
        notes.append("not resolvable: the trunk improved by " + (f"{improvement:.3g}" if improvement is not None
                     else "an unknown amount") + f" over the window, under 2ε = {POWER_FACTOR * tolerance:.3g}, so "
                     "every branch could pass; a longer window or a later checkpoint would tell")
    threshold = trunk_loss * (1 + tolerance) if relative else trunk_loss + tolerance
    return CbsPoint(batch_size=k_star, bound=bound, interval=[k_star, nxt], resolvable=resolvable,
                    trunk_improvement=improvement, trunk_loss=trunk_loss, threshold=threshold,
                    branches=tuple(outcomes), margin=margin, close_call=any(o.close for o in deciding),
                    note="; ".join(notes), **common)


def critical_batch_over_training(history: pd.DataFrame, *, trunk_batch: int, window_samples: int, tolerance: float,
                                 tokens_per_sample: Optional[int] = None, relative: bool = False,
                                 loss: str = "eval") -> list[CbsPoint]:
    """CBS(t) at every checkpoint t some branch started from (``start_samples`` of the ``role == "branch"``
    rows), earliest first (module docstring). ``history`` needs ``role``, ``start_samples``, ``samples_seen``,
    ``batch_size`` and the loss compared (``loss_column(loss)``); ``alpha``, ``seed_offset``, ``diverged`` and
    ``trial_id`` where present. ``relative``: ε a fraction of the reference loss."""
    branches = rows_of_role(history, "branch")
    if branches.empty:
        return []
    column = loss_column(loss)
    require_columns(history, [*BRANCH_POINT_COLUMNS, column], where="critical_batch_over_training")
    trunk = last_by_samples(rows_of_role(history, "trunk").sort_values(Column.samples_seen, kind="stable"))
    return [_point(int(start), group, trunk, trunk_batch=trunk_batch, window_samples=window_samples,
                   tolerance=tolerance, tokens_per_sample=tokens_per_sample, relative=relative, column=column)
            for start, group in branches.groupby(Column.start_samples, sort=True)]
