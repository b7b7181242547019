"""The critical batch over the course of training, read off branches (``search.method: branch``).

Pure pandas: the input is the history of a branch search (one row per report of every run: the trunk, the
branches, the schedule's validation run; ``branch_plan`` says what each trains), the output a typed
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
  trunk's LR, ``branch_plan``), a small grid rather than the paper's sweep; a diverged branch (non-finite or
  exploding loss) fails.

At the edges CBS(t) is a **bound**: when even the smallest branch batch fails it is ``≤`` the trunk's batch
(``bound = "upper"``, ``batch_size`` = the trunk's), when the largest recovers it is ``≥`` that batch
(``bound = "lower"``). A batch whose branches have not reported at the window's end (unfinished, not
diverged) stops the walk with a lower bound too: CBS(t) is at least the last batch that recovered.

**Noise.** One branch per batch and alpha gives no repeat to measure its run-to-run noise, so a comparison is
called *close* when the branch's loss lies within half the tolerance of the line (|excess − ε| < ε/2, the
excess being L_branch / L_trunk − 1): half the tolerance is how far the eval-loss noise may move it before a
pass would turn into a fail (the turning point's verdict uses the same half, ``uncertainty.verdict``). A
decrease of CBS(t) from B1 at t1 to B2 < B1 at t2 is *within the noise* when every batch in (B2, B1] was close
at t1 (where it recovered) or at t2 (where it did not); otherwise the report says it decreases. ``trend``
never smooths a decrease away.

**The schedule** (the paper's batch-size warmup): start at the trunk's batch; from each checkpoint on, the
batch doubles as long as CBS(t) reaches the doubled batch, never beyond the largest branch batch and never
down (``recommend_schedule``). ``validate_schedule`` compares its run with the trunk (the fixed small batch:
same seed, same data order, same samples): optimizer steps saved, final eval loss difference.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from .branch_plan import scratch_grid_samples
from .critical_batch import LOWER, UPPER

__all__ = ["BranchOutcome", "CbsPoint", "Decrease", "Trend", "ScheduleValidation", "BranchSummary",
           "critical_batch_over_training", "recommend_schedule", "schedule_in_tokens", "schedule_steps",
           "schedule_total_steps", "trend",
           "b_simple_over_training", "validate_schedule", "samples_trained", "summarize_branches",
           "LOSS_TARGET", "STEPS_TARGET", "NOISE_FRACTION"]

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
    if history.empty or "role" not in history:
        return history.iloc[0:0]
    return history[history["role"] == role]


def _diverged(row) -> bool:
    """A report that diverged (its ``diverged`` flag) or has no finite eval loss: it fails."""
    flag = row.get("diverged", False)
    return (isinstance(flag, (bool, np.bool_, int, np.integer)) and bool(flag)) or not _finite(row.get("eval_loss"))


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


def _last_by_samples(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per samples_seen (a resumed run may report a milestone twice: the later report counts)."""
    return frame.drop_duplicates(subset=["samples_seen"], keep="last") if not frame.empty else frame


def _trunk_loss_at(trunk: pd.DataFrame, samples: int) -> Optional[float]:
    rows = trunk[trunk["samples_seen"] == samples]
    if rows.empty:
        return None
    row = rows.iloc[-1]
    return None if _diverged(row) else float(row["eval_loss"])


def _run_key(frame: pd.DataFrame) -> list[str]:
    return ["trial_id"] if "trial_id" in frame else ["batch_size", "alpha"]


def _outcome(batch: int, runs: pd.DataFrame, trunk_loss: float, tolerance: float) -> BranchOutcome:
    """``runs``: the reports of this batch's branches at the window's end, one per run (alpha)."""
    if runs.empty:
        return BranchOutcome(batch, None, None, None, False, False, 0, 0, "missing")
    ok = runs[[not _diverged(r) for _, r in runs.iterrows()]]
    diverged = len(runs) - len(ok)
    if ok.empty:
        return BranchOutcome(batch, None, None, None, False, False, len(runs), diverged, "diverged")
    best = ok.loc[ok["eval_loss"].astype(float).idxmin()]
    loss = float(best["eval_loss"])
    excess = loss / trunk_loss - 1.0
    recovers = excess <= tolerance + 1e-12
    close = abs(excess - tolerance) < tolerance * NOISE_FRACTION
    alpha = float(best["alpha"]) if "alpha" in best and _finite(best["alpha"]) else None
    return BranchOutcome(batch, loss, alpha, excess, recovers, close, len(runs), diverged,
                         "recovers" if recovers else "fails")


def _point(start: int, branches: pd.DataFrame, trunk: pd.DataFrame, *, trunk_batch: int, window_samples: int,
           tolerance: float, tokens_per_sample: Optional[int]) -> CbsPoint:
    end = start + window_samples
    trunk_loss = _trunk_loss_at(trunk, end)
    batches = sorted(int(b) for b in branches["batch_size"].unique())
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
    upto = branches[branches["samples_seen"] <= end].sort_values("samples_seen", kind="stable")
    last = upto.drop_duplicates(subset=_run_key(branches), keep="last")
    at_end = last[[r["samples_seen"] == end or _diverged(r) for _, r in last.iterrows()]] if not last.empty else last
    outcomes = tuple(_outcome(b, at_end[at_end["batch_size"] == b], trunk_loss, tolerance) for b in batches)
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
    ``batch_size``, ``alpha`` and ``eval_loss`` (``diverged`` and ``trial_id`` where present)."""
    trunk = _last_by_samples(_role(history, "trunk").sort_values("samples_seen", kind="stable"))
    branches = _role(history, "branch")
    if branches.empty:
        return []
    return [_point(int(start), group, trunk, trunk_batch=trunk_batch, window_samples=window_samples,
                   tolerance=tolerance, tokens_per_sample=tokens_per_sample)
            for start, group in branches.groupby("start_samples", sort=True)]


# ---- the schedule ------------------------------------------------------------------------------------

def recommend_schedule(points: Sequence[CbsPoint], *, trunk_batch: int, largest_batch: int) -> list[list[int]]:
    """The batch-size warmup as ``[start_samples, batch_size]`` pairs: the trunk's batch from 0; at each
    checkpoint the batch doubles while CBS(t) reaches the doubled batch (several doublings at once where
    CBS(t) jumps), never beyond ``largest_batch``, never down (a later, lower CBS(t) keeps the batch: ``trend``
    reports the decrease). A point whose trunk loss is missing changes nothing."""
    schedule, batch = [[0, int(trunk_batch)]], int(trunk_batch)
    for p in sorted(points, key=lambda p: p.samples_seen):
        if p.trunk_loss is None:
            continue
        grown = batch
        while grown * 2 <= min(p.batch_size, largest_batch):
            grown *= 2
        if grown != batch:
            batch = grown
            if schedule[-1][0] == p.samples_seen:
                schedule[-1][1] = batch
            else:
                schedule.append([int(p.samples_seen), batch])
    return schedule


def schedule_in_tokens(schedule: Sequence[Sequence[int]], tokens_per_sample: int) -> list[list[int]]:
    """The schedule in tokens: ``[start_tokens, batch_size_tokens]`` pairs (packed sequences of
    ``tokens_per_sample`` tokens each: every sample is a full sequence)."""
    return [[int(s) * tokens_per_sample, int(b) * tokens_per_sample] for s, b in schedule]


def schedule_steps(schedule: Sequence[Sequence[int]]) -> list[list[int]]:
    """``[start_step, batch_size]`` pairs: the optimizer step at which each batch starts (what Levanter's
    ``train_batch_size`` schedule takes). A switch point that is not a whole number of the previous batch
    starts at the step after (a partial batch counts as a step)."""
    steps, step = [], 0
    for i, (start, batch) in enumerate(schedule):
        if i:
            prev_start, prev_batch = schedule[i - 1]
            step += -(-(int(start) - int(prev_start)) // int(prev_batch))
        steps.append([step, int(batch)])
    return steps


def schedule_total_steps(schedule: Sequence[Sequence[int]], budget_samples: int) -> int:
    """Optimizer steps the schedule takes over ``budget_samples`` (a partial last batch counts as a step)."""
    (last_start, last_batch), start_step = schedule[-1], schedule_steps(schedule)[-1][0]
    return start_step + -(-(int(budget_samples) - int(last_start)) // int(last_batch))


# ---- the shape ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decrease:
    """CBS(t) lower at a later checkpoint than at an earlier one."""

    from_samples: int
    from_batch: int
    to_samples: int
    to_batch: int
    within_noise: bool
    """Every batch in (to_batch, from_batch] was a close comparison at one of the two checkpoints."""

    def to_dict(self) -> dict:
        return _as_dict(self)


@dataclass(frozen=True)
class Trend:
    """The shape of CBS(t) (issue target: it does not decrease within its noise)."""

    verdict: str
    """``increasing``, ``flat``, ``decreases_within_noise``, ``decreasing`` or ``undetermined``."""
    text: str
    holds: Optional[bool]
    """Whether CBS(t) does not decrease beyond its noise (None: fewer than two determined points)."""
    decreases: tuple[Decrease, ...] = ()

    def to_dict(self) -> dict:
        return _as_dict(self)


def _bound_text(batch: int, bound: Optional[str]) -> str:
    return {LOWER: "≥ ", UPPER: "≤ "}.get(bound, "") + str(batch)


def _unit(samples: int, tokens_per_sample: Optional[int]) -> str:
    return f"{samples * tokens_per_sample} tokens" if tokens_per_sample else f"{samples} samples"


def _decrease_within_noise(earlier: CbsPoint, later: CbsPoint) -> bool:
    between = sorted({o.batch_size for o in (*earlier.branches, *later.branches)
                      if later.batch_size < o.batch_size <= earlier.batch_size})
    if not between:
        return False

    def close(point: CbsPoint, batch: int) -> bool:
        o = point.outcome(batch)
        return bool(o and o.close)

    return all(close(earlier, b) or close(later, b) for b in between)


def trend(points: Sequence[CbsPoint], *, tokens_per_sample: Optional[int] = None) -> Trend:
    """Whether CBS(t) grows, stays flat or decreases over the checkpoints, in one sentence. Each point is
    compared with the highest earlier one; a lower later point is a decrease, reported with its batches and
    checkpoints and whether it lies within the noise (module docstring). Nothing is smoothed."""
    pts = sorted((p for p in points if p.trunk_loss is not None and p.branches), key=lambda p: p.samples_seen)
    if len(pts) < 2:
        return Trend("undetermined", f"CBS(t) measured at {len(pts)} checkpoint(s): no trend to read", None)
    decreases, peak = [], pts[0]
    for p in pts[1:]:
        if p.batch_size < peak.batch_size:
            decreases.append(Decrease(peak.samples_seen, peak.batch_size, p.samples_seen, p.batch_size,
                                      _decrease_within_noise(peak, p)))
        if p.batch_size > peak.batch_size:
            peak = p
    u = lambda s: _unit(s, tokens_per_sample)  # noqa: E731
    path = " → ".join(_bound_text(p.batch_size, p.bound) for p in pts)
    beyond = [d for d in decreases if not d.within_noise]
    if beyond:
        text = "; ".join(f"CBS(t) decreases from {d.from_batch} at {u(d.from_samples)} to {d.to_batch} at "
                         f"{u(d.to_samples)}, beyond its noise" for d in beyond)
        return Trend("decreasing", f"{text} ({path})", False, tuple(decreases))
    if decreases:
        text = "; ".join(f"CBS(t) dips from {d.from_batch} at {u(d.from_samples)} to {d.to_batch} at "
                         f"{u(d.to_samples)}, within its noise (every batch in between was within half the "
                         f"tolerance of the line)" for d in decreases)
        return Trend("decreases_within_noise", f"{text} ({path})", True, tuple(decreases))
    if pts[-1].batch_size > pts[0].batch_size:
        first, last = pts[0], pts[-1]
        return Trend("increasing", f"CBS(t) does not decrease: it grows from "
                     f"{_bound_text(first.batch_size, first.bound)} at {u(first.samples_seen)} to "
                     f"{_bound_text(last.batch_size, last.bound)} at {u(last.samples_seen)} ({path})", True)
    edge = {LOWER: ": the largest branch batch recovers at every checkpoint, branch at larger batches to see "
                   "where it stops", UPPER: ": even the smallest branch batch fails at every checkpoint"}
    return Trend("flat", f"CBS(t) is flat at {path.split(' → ')[0]} over the checkpoints"
                 + (edge.get(pts[0].bound, "") if all(p.bound == pts[0].bound for p in pts) else "") + f" ({path})",
                 True)


# ---- the trunk's noise scale ---------------------------------------------------------------------------

def b_simple_over_training(history: pd.DataFrame) -> list[list[float]]:
    """The trunk's B_simple (McCandlish et al. 2018) per report: ``[samples_seen, b_simple]`` pairs, NaN
    (not measurable yet) left out."""
    trunk = _role(history, "trunk")
    if trunk.empty or "b_simple" not in trunk:
        return []
    trunk = _last_by_samples(trunk.sort_values("samples_seen", kind="stable"))
    return [[int(r["samples_seen"]), float(r["b_simple"])] for _, r in trunk.iterrows() if _finite(r["b_simple"])
            and float(r["b_simple"]) > 0]


# ---- the schedule's validation ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ScheduleValidation:
    """The recommended schedule's run against the trunk (the fixed small batch) over the same samples."""

    schedule_steps: int
    trunk_steps: int
    steps_saved: float
    """1 − schedule steps / trunk steps (0.43: 43 % fewer optimizer steps)."""
    schedule_loss: Optional[float]
    trunk_loss: Optional[float]
    loss_difference: Optional[float]
    """schedule loss / trunk loss − 1 (positive: the schedule ends worse)."""
    schedule_samples: int
    trunk_samples: int
    target_met: bool
    """loss_difference ≤ LOSS_TARGET and steps_saved ≥ STEPS_TARGET (the issue's target)."""
    text: str

    def to_dict(self) -> dict:
        return _as_dict(self)


def _final(frame: pd.DataFrame):
    return frame.sort_values("samples_seen", kind="stable").iloc[-1] if not frame.empty else None


def validate_schedule(history: pd.DataFrame) -> Optional[ScheduleValidation]:
    """The ``role == "schedule"`` run's last report against the trunk's: optimizer steps, final eval loss;
    None when no schedule run reported."""
    run, trunk = _final(_role(history, "schedule")), _final(_role(history, "trunk"))
    if run is None or trunk is None:
        return None
    steps, trunk_steps = int(run["steps"]), int(trunk["steps"])
    saved = 1.0 - steps / trunk_steps if trunk_steps else 0.0
    loss = None if _diverged(run) else float(run["eval_loss"])
    trunk_loss = None if _diverged(trunk) else float(trunk["eval_loss"])
    diff = loss / trunk_loss - 1.0 if loss is not None and trunk_loss is not None else None
    met = diff is not None and diff <= LOSS_TARGET + 1e-12 and saved >= STEPS_TARGET - 1e-12
    samples, trunk_samples = int(run["samples_seen"]), int(trunk["samples_seen"])
    if diff is None:
        text = ("the schedule's run diverged" if loss is None else "the trunk diverged") + \
            f" ({steps} vs {trunk_steps} optimizer steps)"
    else:
        text = (f"{steps} optimizer steps vs the fixed small batch's {trunk_steps} ({saved:.0%} fewer), final eval "
                f"loss {loss:.4g} vs {trunk_loss:.4g} ({diff:+.2%}): target (≤ {LOSS_TARGET:.0%} worse, ≥ "
                f"{STEPS_TARGET:.0%} fewer steps) {'met' if met else 'not met'}")
    if samples != trunk_samples:
        text += f"; unequal samples: {samples} vs {trunk_samples} (a run did not finish)"
    return ScheduleValidation(steps, trunk_steps, saved, loss, trunk_loss, diff, samples, trunk_samples, met, text)


# ---- cost ----------------------------------------------------------------------------------------------

def samples_trained(history: pd.DataFrame) -> dict[str, int]:
    """Samples each role trained, from the history: per run, its last ``samples_seen`` minus its
    ``start_samples`` (a branch from 2048 that reports at 3072 trained 1024), summed per role."""
    if history.empty:
        return {}
    if "trial_id" in history:
        runs = history["trial_id"].astype(str)
    else:  # one trunk and one schedule run; a branch is its checkpoint, batch and alpha
        runs = history.apply(lambda r: (r.get("role"),) + ((r.get("start_samples"), r.get("batch_size"), r.get("alpha"))
                                                           if r.get("role") == "branch" else ()), axis=1).astype(str)
    out: dict[str, int] = {}
    for _, run in history.groupby(runs, sort=False):
        last = run.sort_values("samples_seen", kind="stable").iloc[-1]
        start = int(last["start_samples"]) if "start_samples" in last and _finite(last["start_samples"]) else 0
        role = str(last.get("role", "trunk"))
        out[role] = out.get(role, 0) + int(last["samples_seen"]) - start
    return out


# ---- the summary ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BranchSummary:
    """Branch mode's answer; ``summary.json`` is its ``to_json``, each attribute named as its key there."""

    critical_batch_over_training: tuple[CbsPoint, ...]
    batch_size_schedule: list
    """``[start_samples, batch_size]`` pairs (``recommend_schedule``)."""
    trend: Trend
    b_simple_over_training: list
    """The trunk's ``[samples_seen, b_simple]`` pairs."""
    schedule_validation: Optional[ScheduleValidation]
    trunk: dict
    """``batch_size``, ``peak_lr``, ``final_eval_loss``, ``samples_seen``, ``steps``."""
    branches: list
    """One record per branch run: ``start_samples``, ``batch_size``, ``alpha``, ``peak_lr``, ``eval_loss`` at
    the window's end (None if it never got there), ``diverged``, ``samples_seen``, ``steps``."""
    budget_samples: int
    window_samples: int
    checkpoints: list
    branch_batches: list
    tolerance: float
    total_samples: int
    """Samples trained by the whole branch search: trunk, branches and the validation run."""
    samples_by_role: dict
    scratch_samples: Optional[int]
    """What a from-scratch search over the same batches and alphas trains: one full-budget run per (batch,
    alpha) for the branch batches, plus one at the trunk's batch (the budget × (batches × alphas + 1))."""
    cost_ratio: Optional[float]
    """(trunk + branches) samples / ``scratch_samples`` (the issue's cost target: ≤ 0.5; the validation run is
    not part of finding CBS(t) and is left out of the ratio, counted in ``total_samples``)."""
    metric: str = "eval_loss"
    method: str = "branch"
    tokens_per_sample: Optional[int] = field(default=None, metadata={"omit_if_none": True})
    budget_tokens: Optional[int] = field(default=None, metadata={"omit_if_none": True})
    batch_size_schedule_tokens: Optional[list] = field(default=None, metadata={"omit_if_none": True})
    """``[start_tokens, batch_size_tokens]`` pairs, with packed token budgets only."""
    name: Optional[str] = field(default=None, metadata={"omit_if_none": True})
    experiment_path: Optional[str] = field(default=None, metadata={"omit_if_none": True})

    def to_dict(self) -> dict:
        record = _as_dict(self)
        # method first: the key a reader checks to tell a branch summary from a from-scratch one
        return {"method": record.pop("method"), **record}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)


def _branch_records(history: pd.DataFrame, window_samples: int) -> list[dict]:
    branches = _role(history, "branch")
    if branches.empty:
        return []
    rows = []
    for _, run in branches.groupby(_run_key(branches), sort=False):
        run = run.sort_values("samples_seen", kind="stable")
        last, start = run.iloc[-1], int(run.iloc[-1]["start_samples"])
        at_end = run[run["samples_seen"] == start + window_samples]
        end_row = at_end.iloc[-1] if not at_end.empty else None
        rows.append({"start_samples": start, "batch_size": int(last["batch_size"]),
                     "alpha": _clean(last.get("alpha")), "peak_lr": _clean(last.get("peak_lr")),
                     "eval_loss": None if end_row is None or _diverged(end_row) else float(end_row["eval_loss"]),
                     "diverged": bool(_diverged(last)), "samples_seen": int(last["samples_seen"]),
                     "steps": _clean(last.get("steps")),
                     **({"trial_id": str(last["trial_id"])} if "trial_id" in last else {})})
    return sorted(rows, key=lambda r: (r["start_samples"], r["batch_size"], r["alpha"] or 0.0))


def summarize_branches(history: pd.DataFrame, meta: dict) -> BranchSummary:
    """Everything branch mode reports, from the history and ``meta`` (the resolved values:
    ``trunk_batch``, ``window_samples``, ``checkpoints``, ``branch_batches``, ``tolerance``, ``budget_samples``,
    ``tokens_per_sample`` (None without packing), ``metric``; ``alphas``, ``trunk_peak_lr``, ``name``,
    ``experiment_path`` where known: ``Branching.to_meta`` writes them)."""
    metric = meta.get("metric", "eval_loss")
    if metric != "eval_loss":
        raise ValueError(f"branch mode reads eval_loss (the loss a branch must recover), not {metric!r}")
    trunk_batch, window = int(meta["trunk_batch"]), int(meta["window_samples"])
    tokens, budget = meta.get("tokens_per_sample"), int(meta["budget_samples"])
    batches = [int(b) for b in meta["branch_batches"]]
    tolerance = float(meta["tolerance"])
    points = critical_batch_over_training(history, trunk_batch=trunk_batch, window_samples=window, tolerance=tolerance,
                                          tokens_per_sample=tokens)
    schedule = recommend_schedule(points, trunk_batch=trunk_batch, largest_batch=max(batches))
    final = _final(_role(history, "trunk"))
    trunk = {"batch_size": trunk_batch,
             "peak_lr": _clean(meta.get("trunk_peak_lr", final.get("peak_lr") if final is not None else None)),
             "final_eval_loss": None if final is None or _diverged(final) else float(final["eval_loss"]),
             "samples_seen": None if final is None else int(final["samples_seen"]),
             "steps": None if final is None else _clean(final.get("steps"))}
    by_role = samples_trained(history)
    alphas = meta.get("alphas") or sorted(_role(history, "branch")["alpha"].dropna().unique().tolist()
                                          if "alpha" in history else [])
    scratch = scratch_grid_samples(budget, batches, alphas) if alphas else None
    searched = by_role.get("trunk", 0) + by_role.get("branch", 0)
    return BranchSummary(
        critical_batch_over_training=tuple(points), batch_size_schedule=schedule,
        trend=trend(points, tokens_per_sample=tokens), b_simple_over_training=b_simple_over_training(history),
        schedule_validation=validate_schedule(history), trunk=trunk,
        branches=_branch_records(history, window), budget_samples=budget, window_samples=window,
        checkpoints=[int(c) for c in meta["checkpoints"]], branch_batches=batches, tolerance=tolerance,
        total_samples=sum(by_role.values()), samples_by_role=by_role, scratch_samples=scratch,
        cost_ratio=searched / scratch if scratch else None, metric=metric, tokens_per_sample=tokens,
        budget_tokens=budget * tokens if tokens else None,
        batch_size_schedule_tokens=schedule_in_tokens(schedule, tokens) if tokens else None,
        name=meta.get("name"), experiment_path=meta.get("experiment_path"))
