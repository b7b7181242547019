"""The verdicts on a batch-size schedule against fixed batches, as pre-registered paired tests.

Every run of the validation (the schedule and each fixed-batch control) trains the same samples on the same
validation seeds; seed s of every run shares its initial weights and data order, so runs are compared **paired
by seed**: the noise common to a seed (its initialisation, its data order) cancels in the difference. The inputs
are final losses by seed (``{seed: loss}``); the tests are fixed here, before any run, and ``criterion_text``
says them in words (printed before the validation runs, stored in ``summary.json``):

- **Non-inferiority** (``non_inferiority``): d_s = L_schedule,s − L_small,s over the seeds both finished; the
  schedule is non-inferior to the small batch when the one-sided 95 % upper confidence bound of the mean,
  d̄ + t(0.95, n − 1)·sd(d)/√n, is below the margin ε (``branch.tolerance``: the paper's 0.01 nats). A
  detectably worse schedule can be non-inferior (d̄ > 0 beyond its noise, yet bounded below ε); a better one
  whose noise is large is not. More seeds tighten the bound, never the other way round.
- **The frontier** (``interpolate_frontier``): the fixed batches' final losses against their optimizer steps,
  linear in log(steps) between the two fixed batches bracketing the point; its uncertainty per point is the
  interpolation of the two batches' standard errors, (1 − w)²·se₁² + w²·se₂², its band ±t(0.975, n − 1) of it.
- **Below the frontier** (``below_frontier``): per seed, the schedule's loss minus the frontier interpolated
  at the schedule's steps from that seed's fixed-batch losses (the same weights for every seed); below when the
  one-sided 95 % upper bound of the mean difference is below 0, that is the schedule's loss at its steps is
  under the frontier's beyond the noise of both.
- **Steps saved** (``steps_saved``): against the fixed batch with the fewest steps that is non-inferior to the
  small batch by the same test (the small batch is non-inferior to itself): 1 − steps_schedule / steps_fixed.
  Its interval is the grid's: the largest non-inferior fixed batch lies between that batch and the next larger
  one measured (found not non-inferior), so the fixed steps that reach non-inferiority lie between the two
  batches' steps, [1 − steps_schedule / steps_next, fraction]; the lower end is None where no larger fixed batch
  was measured. The point sits at the interval's upper end, as CBS(t) = k*·B does in [k*·B, next·B].

Student's t quantiles come from ``scipy.stats.t``. Merrill et al. (2025, arXiv 2505.23971, §4) report their
batch-size warmup reaching the small batch's loss with 43 % fewer optimizer steps on OLMo 1B (one seed each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from cbs_ray.methods.branch.reading_points import as_dict

__all__ = ["CONFIDENCE", "BelowFrontier", "FixedRun", "FrontierPoint", "NonInferiority", "PairedDifference",
           "StepsSaved", "below_frontier", "criterion_text", "frontier_band", "interpolate_frontier",
           "non_inferiority", "paired_difference", "steps_saved", "t_quantile"]

CONFIDENCE = 0.95
"""One-sided confidence of the upper bounds; the frontier's band is the two-sided interval at this level."""


def t_quantile(probability: float, df: int) -> float:
    """Student's t quantile at ``probability`` with ``df`` ≥ 1 degrees of freedom (``scipy.stats.t.ppf``)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    from scipy import stats  # a second to import: only where a verdict is read

    return float(stats.t.ppf(probability, df))


# ---- paired differences -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class PairedDifference:
    """The mean of a − b over the seeds both have, with its one-sided upper bound."""

    differences: dict
    """``{seed: a_s − b_s}``."""
    difference_mean: Optional[float]
    standard_error: Optional[float]
    """sd(d) / √n (None with fewer than two pairs)."""
    upper_95: Optional[float]
    """d̄ + t(0.95, n − 1) · standard error (None with fewer than two pairs: no noise to bound with)."""
    seeds: int

    def to_dict(self) -> dict:
        return as_dict(self)


def paired_difference(a: Mapping[int, float], b: Mapping[int, float]) -> PairedDifference:
    """a − b paired by seed (the keys both have and whose values are finite)."""
    seeds = sorted(s for s in a if s in b and _finite(a[s]) and _finite(b[s]))
    differences = {int(s): float(a[s]) - float(b[s]) for s in seeds}
    values = np.array(list(differences.values()), dtype=float)
    if len(values) == 0:
        return PairedDifference({}, None, None, None, 0)
    mean = float(values.mean())
    if len(values) < 2:
        return PairedDifference(differences, mean, None, None, 1)
    se = float(values.std(ddof=1) / math.sqrt(len(values)))
    return PairedDifference(differences, mean, se, mean + t_quantile(CONFIDENCE, len(values) - 1) * se, len(values))


def _finite(value) -> bool:
    return value is not None and math.isfinite(float(value))


# ---- non-inferiority --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NonInferiority:
    """``summary.json`` → ``schedule_validation.non_inferiority``: the schedule against the small batch."""

    difference_mean: Optional[float]
    """Mean over seeds of schedule − small batch final loss (positive: the schedule is worse)."""
    upper_95: Optional[float]
    """Its one-sided 95 % upper confidence bound."""
    margin: float
    """ε, in loss units: the largest loss the schedule may give up."""
    holds: Optional[bool]
    """``upper_95 < margin``; None with fewer than two paired seeds."""
    standard_error: Optional[float]
    seeds: int
    differences: dict
    """``{seed: difference}``."""

    def to_dict(self) -> dict:
        return as_dict(self)


def non_inferiority(candidate: Mapping[int, float], reference: Mapping[int, float], *,
                    margin: float) -> NonInferiority:
    """Whether ``candidate`` (final losses by seed) is non-inferior to ``reference`` at ``margin`` (module
    docstring)."""
    d = paired_difference(candidate, reference)
    holds = None if d.upper_95 is None else bool(d.upper_95 < margin)
    return NonInferiority(d.difference_mean, d.upper_95, float(margin), holds, d.standard_error, d.seeds,
                          d.differences)


# ---- the frontier -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FixedRun:
    """One fixed-batch control: its batch, its optimizer steps over the budget, its final losses by seed."""

    batch_size: int
    steps: int
    losses: Mapping[int, float]

    def mean_se(self) -> tuple[Optional[float], Optional[float], int]:
        values = [float(v) for v in self.losses.values() if _finite(v)]
        if not values:
            return None, None, 0
        se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else None
        return float(np.mean(values)), se, len(values)


@dataclass(frozen=True)
class FrontierPoint:
    """The frontier at ``steps``: its loss, standard error and two-sided 95 % band (None without noise)."""

    steps: float
    loss: float
    standard_error: Optional[float]
    low: Optional[float]
    high: Optional[float]

    def to_dict(self) -> dict:
        return as_dict(self)


def _measured(fixed: Sequence[FixedRun]) -> list[FixedRun]:
    """The fixed runs with a finite mean, fewest steps first (one per step count: the lower mean)."""
    runs = sorted((r for r in fixed if r.mean_se()[0] is not None), key=lambda r: (r.steps, r.mean_se()[0]))
    out: list[FixedRun] = []
    for r in runs:
        if not out or out[-1].steps != r.steps:
            out.append(r)
    return out


def _bracket(runs: list[FixedRun], steps: float) -> Optional[tuple[FixedRun, FixedRun, float]]:
    """The two runs whose steps bracket ``steps`` and the weight w of the second, linear in log(steps); None
    outside their range (the frontier is not extrapolated)."""
    if not runs or steps < runs[0].steps or steps > runs[-1].steps:
        return None
    if len(runs) == 1:
        return runs[0], runs[0], 0.0
    for lo, hi in zip(runs, runs[1:]):
        if lo.steps <= steps <= hi.steps:
            return lo, hi, math.log(steps / lo.steps) / math.log(hi.steps / lo.steps)
    return None


def interpolate_frontier(fixed: Sequence[FixedRun], steps: float) -> Optional[FrontierPoint]:
    """The fixed-batch frontier at ``steps`` (module docstring); None outside the fixed runs' steps."""
    found = _bracket(_measured(fixed), float(steps))
    if found is None:
        return None
    lo, hi, w = found
    (m1, se1, n1), (m2, se2, n2) = lo.mean_se(), hi.mean_se()
    assert m1 is not None and m2 is not None  # _measured keeps the runs with a finite mean
    loss = (1 - w) * m1 + w * m2
    if se1 is None or se2 is None:
        return FrontierPoint(float(steps), loss, None, None, None)
    se = math.sqrt((1 - w) ** 2 * se1 ** 2 + w ** 2 * se2 ** 2)
    half = t_quantile(1 - (1 - CONFIDENCE) / 2, min(n1, n2) - 1) * se
    return FrontierPoint(float(steps), loss, se, loss - half, loss + half)


def frontier_band(fixed: Sequence[FixedRun], *, points_between: int = 8,
                  extra_steps: Sequence[float] = ()) -> list[FrontierPoint]:
    """The frontier over the fixed runs' steps: at each run, ``points_between`` points between neighbours
    (evenly in log-steps) and at ``extra_steps`` within the range, fewest steps first (the plot's band)."""
    runs = _measured(fixed)
    if not runs:
        return []
    grid = {float(r.steps) for r in runs} | {float(s) for s in extra_steps if runs[0].steps <= s <= runs[-1].steps}
    for lo, hi in zip(runs, runs[1:]):
        grid |= {float(x) for x in np.geomspace(lo.steps, hi.steps, points_between + 2)[1:-1]}
    return [p for p in (interpolate_frontier(runs, s) for s in sorted(grid)) if p is not None]


@dataclass(frozen=True)
class BelowFrontier:
    """``summary.json`` → ``schedule_validation.below_frontier``: the schedule against the frontier at its steps."""

    steps: int
    """The schedule's optimizer steps."""
    frontier_loss: Optional[float]
    """The frontier's mean loss at those steps."""
    between: Optional[list]
    """The fixed batches it is interpolated between (``[smaller, larger]``, fewer steps last)."""
    difference_mean: Optional[float]
    """Mean over seeds of schedule − frontier (negative: below)."""
    upper_95: Optional[float]
    holds: Optional[bool]
    """``upper_95 < 0``; None where the frontier does not reach the schedule's steps or fewer than two seeds pair."""
    seeds: int
    differences: dict

    def to_dict(self) -> dict:
        return as_dict(self)


def below_frontier(schedule_losses: Mapping[int, float], schedule_steps: int,
                   fixed: Sequence[FixedRun]) -> BelowFrontier:
    """Whether the schedule's loss at its steps is below the fixed-batch frontier beyond the noise (module
    docstring): per seed, the frontier from that seed's losses at the two bracketing fixed batches."""
    runs = _measured(fixed)
    found = _bracket(runs, float(schedule_steps))
    point = interpolate_frontier(runs, schedule_steps)
    if found is None or point is None:
        return BelowFrontier(int(schedule_steps), None, None, None, None, None, 0, {})
    lo, hi, w = found
    per_seed = {s: (1 - w) * float(lo.losses[s]) + w * float(hi.losses[s]) for s in lo.losses
                if s in hi.losses and _finite(lo.losses[s]) and _finite(hi.losses[s])}
    d = paired_difference(schedule_losses, per_seed)
    holds = None if d.upper_95 is None else bool(d.upper_95 < 0.0)
    return BelowFrontier(int(schedule_steps), point.loss, [lo.batch_size, hi.batch_size], d.difference_mean,
                         d.upper_95, holds, d.seeds, d.differences)


# ---- steps saved ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StepsSaved:
    """``summary.json`` → ``schedule_validation.steps_saved``."""

    fraction: Optional[float]
    """1 − schedule steps / ``against_batch``'s steps."""
    interval: Optional[list]
    """``[low, fraction]``: low against the next larger fixed batch measured (None: none was)."""
    against_batch: Optional[int]
    """The fixed batch with the fewest steps that is non-inferior to the small batch."""
    against_steps: Optional[int]
    non_inferior_batches: list
    """Every fixed batch non-inferior to the small batch (the small batch included)."""

    def to_dict(self) -> dict:
        return as_dict(self)


def steps_saved(schedule_steps: int, fixed: Sequence[FixedRun], *, small_batch: int, margin: float) -> StepsSaved:
    """Steps saved against the best fixed batch non-inferior to the small batch (module docstring)."""
    small = next((r for r in fixed if r.batch_size == small_batch), None)
    if small is None or not schedule_steps:
        return StepsSaved(None, None, None, None, [])
    ok = [r for r in fixed if r.batch_size == small_batch
          or non_inferiority(r.losses, small.losses, margin=margin).holds]
    best = min(ok, key=lambda r: r.steps)
    fraction = 1.0 - schedule_steps / best.steps
    larger = sorted((r for r in fixed if r.batch_size > best.batch_size and r.mean_se()[0] is not None),
                    key=lambda r: r.batch_size)
    low = 1.0 - schedule_steps / larger[0].steps if larger else None
    return StepsSaved(fraction, [low, fraction], best.batch_size, best.steps, sorted(r.batch_size for r in ok))


# ---- the criterion in words -------------------------------------------------------------------------------

def criterion_text(margin: float, *, relative: bool = False) -> str:
    """The validation's tests in one paragraph (printed before the runs, stored in ``summary.json``)."""
    eps = f"ε = {margin:g} of the small batch's mean loss" if relative else f"ε = {margin:g} nats"
    return ("paired by validation seed (held out from the trunk's); non-inferior: the one-sided 95 % upper bound "
            f"of the mean final eval loss difference, schedule − small batch, is below {eps}; below the frontier: "
            "the fixed batches' final losses interpolated linearly in log(optimizer steps) at the schedule's steps, "
            "per seed, and the one-sided 95 % upper bound of the mean difference, schedule − frontier, is below 0; "
            "steps saved: 1 − the schedule's steps / the steps of the fixed batch with the fewest steps that is "
            "non-inferior to the small batch by the same test, in the interval up to the next larger fixed batch")
