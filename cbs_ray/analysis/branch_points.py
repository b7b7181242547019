"""The critical batch over the course of training, read off branches (``search.method: branch``).

Pure pandas: the input is the history of a branch search (one row per report of every run: the trunk, the
branches, the schedule's validation run; ``train.run_plan`` says what each trains), the output a typed
``BranchSummary`` whose ``to_json`` is ``summary.json``.

**The definition** (Merrill et al. 2025, "Critical Batch Size Revisited: A Simple Empirical Approach to
Large-Batch Language Model Training", arXiv 2505.23971): take a checkpoint of one run (the
*trunk*, trained at a small batch) after t samples; from it, train *branches* at larger batches B, each with
its LR set for B, for a window of Δ samples; the critical batch at t is the largest B whose branch recovers
the trunk's loss after the window, t + Δ, within a tolerance ε; the best LR per batch counts, since a branch
that misses only because its LR was off says nothing about the batch. We read the paper as: ε on the loss,
the branch's loss compared with the trunk's at the same number of samples (tokens), a batch above the
critical one failing to recover (the copy of the paper reachable when this was written held its abstract, not
its method section: check ε's units and the smoothing against the paper). Here:

    CBS(t) = max { B in branch batches : for every branch batch B' ≤ B,
                   min over alphas of L_branch(B', alpha; t + Δ) ≤ L_trunk(t + Δ) · (1 + ε) }

with L the **evaluation loss** (the search's ``eval_loss``) and ε **relative** (``branch.tolerance``, the
search's ``search.tolerance`` by default). Where this deviates from the paper, and why:

- the eval loss at the window's end, not a smoothed training loss: our eval set is fixed and evaluated at
  exactly t + Δ by trunk and branches alike, so no smoothing window has to be chosen (and nothing here is
  smoothed at all: a noisy point shows as one);
- ε relative, as the rest of cbs-ray's tolerances (the turning point's 1 %), so one value fits a loss of 7 at
  initialisation and of 2 at the end;
- "every smaller branch batch also recovers": a batch that recovers above one that does not is read as
  noise, not as a second plateau (the same walk the equal-sample turning point makes, ``critical_batch``);
- the best LR per batch is the best over the ``branch.alphas`` tried (the LR follows the alpha rule from the
  trunk's LR, ``train.run_plan``), a small grid rather than the paper's sweep; a diverged branch (non-finite or
  exploding loss) fails.

At the edges CBS(t) is a **bound**: when even the smallest branch batch fails it is ``≤`` the trunk's batch
(``bound = "upper"``, ``batch_size`` = the trunk's), when the largest recovers it is ``≥`` that batch
(``bound = "lower"``). A batch whose branches have not reported at the window's end (unfinished, not
diverged) stops the walk with a lower bound too: CBS(t) is at least the last batch that recovered.

**Noise.** One branch per batch and alpha gives no repeat to measure its run-to-run noise, so a comparison is
called *close* when the branch's loss lies within half the tolerance of the line (|excess − ε| < ε/2, the
excess being L_branch / L_trunk − 1): half the tolerance is how far the eval-loss noise may move it before a
pass would turn into a fail (the turning point's verdict uses the same half, ``maths.uncertainty.verdict``). A
decrease of CBS(t) from B1 at t1 to B2 < B1 at t2 is *within the noise* when every batch in (B2, B1] was close
at t1 (where it recovered) or at t2 (where it did not); otherwise the report says it decreases. ``trend``
never smooths a decrease away.

**The schedule** (the paper's batch-size warmup): start at the trunk's batch; from each checkpoint on, the
batch doubles as long as CBS(t) reaches the doubled batch, never beyond the largest branch batch and never
down (``recommend_schedule``). ``validate_schedule`` compares its run with the trunk (the fixed small batch:
same seed, same data order, same samples): optimizer steps saved, final eval loss difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Optional

import numpy as np
import pandas as pd

from cbs_ray.maths.critical_batch import LOWER, UPPER
from cbs_ray.records.columns import Column, require_columns

__all__ = ["BranchOutcome", "CbsPoint", "critical_batch_over_training", "LOSS_TARGET", "STEPS_TARGET", "NOISE_FRACTION"]

LOSS_TARGET = 0.01
"""The issue's schedule target: the schedule's final eval loss at most 1 % above the fixed small batch's..."""
STEPS_TARGET = 0.25
"""...in at least 25 % fewer optimizer steps."""
NOISE_FRACTION = 0.5
"""A comparison within this fraction of the tolerance from the line is close: noise could flip it."""


def _finite(value) -> bool:
    return value is not None and isinstance(value, (int, float, np.number)) and math.isfinite(float(value))


def _clean(value):
    """JSON-ready: numpy scalars as Python ones, NaN/inf as None, dataclasses through their ``to_dict``."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def _as_dict(obj) -> dict:
    return {f.name: _clean(getattr(obj, f.name)) for f in fields(obj)
            if not (f.metadata.get("omit_if_none") and getattr(obj, f.name) is None)}


def _role(history: pd.DataFrame, role: str) -> pd.DataFrame:
    if history.empty or Column.role not in history:
        return history.iloc[0:0]
    return history[history[Column.role] == role]


def _diverged(row) -> bool:
    """A report that diverged (its ``diverged`` flag) or has no finite eval loss: it fails."""
    flag = row.get(Column.diverged, False)
    flagged = isinstance(flag, (bool, np.bool_, int, np.integer)) and bool(flag)
    return flagged or not _finite(row.get(Column.eval_loss))


# ---- CBS(t) ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BranchOutcome:
    """One branch batch at one checkpoint: its best run over the alphas tried, against the trunk's loss."""

    batch_size: int
    loss: Optional[float]
    """The best eval loss at the window's end over the alphas (None: every run diverged or none reported)."""
    alpha: Optional[float]
    """The alpha of that best run."""
    excess: Optional[float]
    """loss / trunk loss − 1 (0.004: 0.4 % above the trunk)."""
    recovers: bool
    """excess ≤ tolerance."""
    close: bool
    """|excess − tolerance| < tolerance · NOISE_FRACTION: noise could flip this comparison."""
    runs: int
    """Runs (alphas) that reported at the window's end."""
    diverged: int
    """Of those, runs that diverged (they fail)."""
    status: str
    """``recovers``, ``fails``, ``diverged`` (every run) or ``missing`` (no run reported at the window's end)."""

    def to_dict(self) -> dict:
        return _as_dict(self)


@dataclass(frozen=True)
class CbsPoint:
    """CBS(t) at one checkpoint t (``samples_seen``)."""

    samples_seen: int
    """The checkpoint t the branches started from, samples the trunk had seen."""
    batch_size: int
    """CBS(t); with ``bound`` a bound (the trunk's batch for "upper", the largest branch batch for "lower")."""
    bound: Optional[str]
    """None, ``"upper"`` (CBS(t) ≤ batch_size: even the smallest branch batch failed) or ``"lower"``
    (CBS(t) ≥ batch_size: the largest recovered, or the next batch has not reported)."""
    window_samples: int
    trunk_loss: Optional[float]
    """The trunk's eval loss at t + window, the loss a branch must recover."""
    threshold: Optional[float]
    """trunk_loss · (1 + tolerance)."""
    trunk_loss_at_start: Optional[float]
    """The trunk's eval loss at t (for context: how far the window moved it)."""
    branches: tuple[BranchOutcome, ...]
    margin: Optional[float]
    """How far the deciding comparisons lie from the line, as a fraction of the trunk's loss: the smallest
    |excess − tolerance| of the last batch that recovered and the first that did not."""
    close_call: bool
    """``margin`` < tolerance · NOISE_FRACTION: noise in one deciding comparison could move CBS(t)."""
    tokens_seen: Optional[int] = field(default=None, metadata={"omit_if_none": True})
    note: str = ""

    def outcome(self, batch: int) -> Optional[BranchOutcome]:
        return next((o for o in self.branches if o.batch_size == batch), None)

    def to_dict(self) -> dict:
        record = _as_dict(self)
        # The per-batch readings once more as flat maps, for a table or a quick look in summary.json.
        record["loss_by_batch"] = {str(o.batch_size): _clean(o.loss) for o in self.branches}
        record["alpha_by_batch"] = {str(o.batch_size): _clean(o.alpha) for o in self.branches}
        return record


BRANCH_POINT_COLUMNS = [Column.start_samples, Column.samples_seen, Column.batch_size, Column.eval_loss]
"""What CBS(t) cannot be read without, besides ``role`` (without it no run is a branch)."""


def _last_by_samples(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per samples_seen (a resumed run may report a milestone twice: the later report counts)."""
    return frame.drop_duplicates(subset=[Column.samples_seen], keep="last") if not frame.empty else frame


def _trunk_loss_at(trunk: pd.DataFrame, samples: int) -> Optional[float]:
    rows = trunk[trunk[Column.samples_seen] == samples]
    if rows.empty:
        return None
    row = rows.iloc[-1]
    return None if _diverged(row) else float(row[Column.eval_loss])


def _run_key(frame: pd.DataFrame) -> list[str]:
    return [Column.trial_id] if Column.trial_id in frame else [Column.batch_size, Column.alpha]


def _outcome(batch: int, runs: pd.DataFrame, trunk_loss: float, tolerance: float) -> BranchOutcome:
    """``runs``: the reports of this batch's branches at the window's end, one per run (alpha)."""
    if runs.empty:
        return BranchOutcome(batch, None, None, None, False, False, 0, 0, "missing")
    ok = runs[[not _diverged(r) for _, r in runs.iterrows()]]
    diverged = len(runs) - len(ok)
    if ok.empty:
        return BranchOutcome(batch, None, None, None, False, False, len(runs), diverged, "diverged")
    best = ok.loc[ok[Column.eval_loss].astype(float).idxmin()]
    loss = float(best[Column.eval_loss])
    excess = loss / trunk_loss - 1.0
    recovers = excess <= tolerance + 1e-12
    close = abs(excess - tolerance) < tolerance * NOISE_FRACTION
    alpha = float(best[Column.alpha]) if Column.alpha in best and _finite(best[Column.alpha]) else None
    return BranchOutcome(batch, loss, alpha, excess, recovers, close, len(runs), diverged,
                         "recovers" if recovers else "fails")


def _point(start: int, branches: pd.DataFrame, trunk: pd.DataFrame, *, trunk_batch: int, window_samples: int,
           tolerance: float, tokens_per_sample: Optional[int]) -> CbsPoint:
    end = start + window_samples
    trunk_loss = _trunk_loss_at(trunk, end)
    batches = sorted(int(b) for b in branches[Column.batch_size].unique())
    tokens = start * tokens_per_sample if tokens_per_sample else None
    common = dict(samples_seen=start, window_samples=window_samples, trunk_loss_at_start=_trunk_loss_at(trunk, start),
                  tokens_seen=tokens)
    if trunk_loss is None:
        return CbsPoint(batch_size=trunk_batch, bound=None, trunk_loss=None, threshold=None, branches=(),
                        margin=None, close_call=False,
                        note=f"the trunk has no finite eval loss at {end} samples (checkpoint + window): "
                             "CBS(t) not determined", **common)
    # Each run's last report up to the window's end: at the end, or earlier where it diverged (a run stopped
    # early without diverging has not finished and is left out).
    upto = branches[branches[Column.samples_seen] <= end].sort_values(Column.samples_seen, kind="stable")
    last = upto.drop_duplicates(subset=_run_key(branches), keep="last")
    at_end = (last[[r[Column.samples_seen] == end or _diverged(r) for _, r in last.iterrows()]] if not last.empty
              else last)
    outcomes = tuple(_outcome(b, at_end[at_end[Column.batch_size] == b], trunk_loss, tolerance) for b in batches)
    passed = 0
    for o in outcomes:
        if not o.recovers:
            break
        passed += 1
    deciding = [outcomes[i] for i in (passed - 1, passed) if 0 <= i < len(outcomes)]
    distances = [abs(o.excess - tolerance) for o in deciding if o.excess is not None]
    margin = min(distances) if distances else None
    if passed < len(outcomes) and outcomes[passed].status == "missing":
        # The walk stops at a batch not measured (yet): CBS(t) is at least where it got to.
        batch, bound = outcomes[passed - 1].batch_size if passed else trunk_batch, LOWER
    elif passed == 0:
        batch, bound = trunk_batch, UPPER
    elif passed == len(outcomes):
        batch, bound = outcomes[-1].batch_size, LOWER
    else:
        batch, bound = outcomes[passed - 1].batch_size, None
    notes = [f"B={o.batch_size}: {o.status}" for o in outcomes[passed:] if o.status in ("missing", "diverged")]
    recovered_above = [o.batch_size for o in outcomes[passed + 1:] if o.recovers]
    if recovered_above:
        notes.append(f"B={', '.join(map(str, recovered_above))} recovered above a batch that did not (read as noise)")
    return CbsPoint(batch_size=batch, bound=bound, trunk_loss=trunk_loss, threshold=trunk_loss * (1 + tolerance),
                    branches=outcomes, margin=margin,
                    close_call=margin is not None and margin < tolerance * NOISE_FRACTION,
                    note="; ".join(notes), **common)


def critical_batch_over_training(history: pd.DataFrame, *, trunk_batch: int, window_samples: int, tolerance: float,
                                 tokens_per_sample: Optional[int] = None) -> list[CbsPoint]:
    """CBS(t) at every checkpoint t some branch started from (``start_samples`` of the ``role == "branch"``
    rows), earliest first (module docstring). ``history`` needs ``role``, ``start_samples``, ``samples_seen``,
    ``batch_size`` and ``eval_loss`` (``alpha``, ``diverged`` and ``trial_id`` where present)."""
    branches = _role(history, "branch")
    if branches.empty:
        return []
    require_columns(history, BRANCH_POINT_COLUMNS, where="critical_batch_over_training")
    trunk = _last_by_samples(_role(history, "trunk").sort_values(Column.samples_seen, kind="stable"))
    return [_point(int(start), group, trunk, trunk_batch=trunk_batch, window_samples=window_samples,
                   tolerance=tolerance, tokens_per_sample=tokens_per_sample)
            for start, group in branches.groupby(Column.start_samples, sort=True)]
