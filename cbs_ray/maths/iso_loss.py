"""Iso-loss steps: the optimizer steps the fixed-batch frontier needs to reach a schedule's final loss, and the
fraction of them the schedule saves (the primary endpoint for a batch-size schedule).

**The frontier of one seed.** Each fixed batch b trained the same samples on the same seed and ended at
(steps_b, loss_b). A user with a budget of S optimizer steps can pick any fixed batch that needs at most S steps,
so the best loss reachable in S steps is the running minimum of loss over the batches with steps ≤ S. Its
**Pareto points** are the fixed batches whose loss is strictly below that of every batch with fewer steps
(``pareto_points``); steps are read on a log axis (Shallue et al. 2019, "Measuring the Effects of Data
Parallelism").

**The interpolation between Pareto points**. Loss is convex in log(steps) along such a frontier, so a
chord between two neighbours lies *above* the curve and reaches a loss later than the curve does: chords overstate
the steps the frontier needs, and so the saving. The default (``PCHIP``) reads the frontier through the monotone
piecewise-cubic Hermite interpolant of loss on log(steps) (Fritsch & Carlson 1980, "Monotone Piecewise Cubic
Interpolation", SIAM J. Numer. Anal. 17(2); ``scipy.interpolate.PchipInterpolator``): it passes through every
point, never leaves the range of its two neighbours (monotone data give a monotone curve, so the steps at a loss
are unique), and bends with the data instead of cutting across them. With two Pareto points it is the chord.
``CHORD`` (linear in log(steps), the rule before the monotone cubic) stays available for comparison.

**Iso-loss steps** (``iso_loss_steps``): the steps S* at which that frontier reaches the schedule's final loss L.
Inside the Pareto points' loss range S* solves the interpolant exactly. Outside it the frontier is
**not extrapolated**; S* is reported as a bound, and its direction is recorded (**censoring**,
``censoring_bound`` names it for a set of seeds):

- L below every fixed batch's loss (the schedule beats even the batch with the most Pareto steps): the frontier
  would need *more* than its last Pareto point's steps; S* = that point's steps, ``censored = "above"`` (the
  saved fraction computed from it is a lower bound: the truth is at least it);
- L at or above the loss of the Pareto point with the fewest steps (the schedule no better than the largest
  fixed batch): S* = that point's steps, ``censored = "below"`` (the saved fraction is an upper bound).

**Saved fraction** per seed: 1 − schedule_steps / S*; positive when the schedule reaches its loss in fewer steps
than the fixed batches need. **Paired over seeds** (``paired_saved_fraction``): the mean of the per-seed
fractions with a two-sided 95 % Student-t interval, mean ± t(0.975, n − 1)·sd/√n. **Pooled over settings**
(``pooled_saved_fraction``): the mean over every seed of every setting, with a cluster-robust (CR1) standard error
clustered by setting and t(0.975, G − 1) for G settings (Cameron & Miller 2015, "A Practitioner's Guide to
Cluster-Robust Inference", §II.C–D; with equal cluster sizes it is the t-interval of the setting means).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

__all__ = ["CHORD", "INTERPOLATIONS", "IsoLoss", "PCHIP", "SavedFraction", "censoring_bound", "iso_loss_steps",
           "paired_saved_fraction", "pareto_points", "pooled_saved_fraction", "saved_fraction", "student_t_975"]

PCHIP = "pchip"
"""The frontier read through the monotone cubic (PCHIP) in log(steps): the default (module docstring)."""
CHORD = "chord"
"""The frontier read through chords in log(steps) (the rule before the monotone cubic: it overstates a saving)."""
INTERPOLATIONS = (PCHIP, CHORD)


def student_t_975(df: int) -> float:
    """Student's t 97.5 % quantile at ``df`` ≥ 1 degrees of freedom (``scipy.stats.t.ppf``)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    from scipy import stats  # imported where an interval is read: a second to import

    return float(stats.t.ppf(0.975, df))


def pareto_points(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The ``(steps, loss)`` points that set a new lowest loss, walking from the fewest steps up (module
    docstring); non-finite losses are dropped. On a tie in steps the lower loss counts."""
    finite = sorted((float(s), float(v)) for s, v in points if s > 0 and v is not None and math.isfinite(v))
    out: list[tuple[float, float]] = []
    for steps, loss in finite:
        if out and steps == out[-1][0]:
            continue  # the same steps: the lower loss came first
        if not out or loss < out[-1][1]:
            out.append((steps, loss))
    return out


@dataclass(frozen=True)
class IsoLoss:
    """The frontier's steps to a loss, and whether it was read inside the frontier or bounded at an end."""

    steps: float
    censored: Optional[str]
    """None (interpolated), ``"above"`` (the truth is more steps) or ``"below"`` (fewer steps)."""


def iso_loss_steps(points: Sequence[tuple[float, float]], loss: float, *,
                   interpolation: str = PCHIP) -> Optional[IsoLoss]:
    """The steps at which the fixed-batch frontier of ``points`` (``(steps, loss)`` per fixed batch, one seed)
    reaches ``loss``, read through ``interpolation`` (``PCHIP`` or ``CHORD``; module docstring); None without a
    finite point or a finite ``loss``."""
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"unknown interpolation {interpolation!r} (known: {', '.join(INTERPOLATIONS)})")
    front = pareto_points(points)
    if not front or loss is None or not math.isfinite(loss):
        return None
    if loss >= front[0][1]:
        return IsoLoss(front[0][0], None if loss == front[0][1] else "below")
    if loss < front[-1][1]:
        return IsoLoss(front[-1][0], "above")
    for i, ((s1, l1), (s2, l2)) in enumerate(zip(front, front[1:])):
        if l2 <= loss < l1:
            if interpolation == CHORD or len(front) == 2:
                w = (l1 - loss) / (l1 - l2)
                return IsoLoss(math.exp(math.log(s1) + w * (math.log(s2) - math.log(s1))), None)
            return IsoLoss(math.exp(_pchip_root(front, i, loss)), None)
    raise AssertionError("unreachable: the loss lies within the Pareto points' range")


def _pchip_root(front: list[tuple[float, float]], segment: int, loss: float) -> float:
    """log(steps) where the PCHIP of loss on log(steps) through ``front`` equals ``loss`` inside ``segment``
    (the interpolant is monotone there, so the root is unique: Brent's method on the segment's ends)."""
    from scipy.interpolate import PchipInterpolator  # imported where a frontier is read, as student_t_975's
    from scipy.optimize import brentq

    xs = [math.log(s) for s, _ in front]
    curve = PchipInterpolator(xs, [v for _, v in front])
    lo, hi = xs[segment], xs[segment + 1]
    if float(curve(lo)) <= loss:  # at a point (the spline's value there may differ from it in the last bit)
        return lo
    if float(curve(hi)) >= loss:
        return hi
    return float(brentq(lambda x: float(curve(x)) - loss, lo, hi, xtol=1e-12))


def censoring_bound(censored: Mapping[Any, str]) -> Optional[str]:
    """What a mean of per-seed saved fractions is, given the seeds read as bounds (``{seed: "above" | "below"}``):
    ``"lower bound"`` where every censored seed's schedule beat every fixed batch (each such fraction is at least
    its value, the others estimates: so is the mean), ``"upper bound"`` where every one lost to the largest,
    ``"mixed bounds"`` with both (the mean bounds nothing), None where no seed was censored (an estimate)."""
    kinds = set(censored.values())
    if not kinds:
        return None
    if kinds == {"above"}:
        return "lower bound"
    if kinds == {"below"}:
        return "upper bound"
    return "mixed bounds"


def saved_fraction(schedule_steps: float, iso: IsoLoss) -> float:
    """1 − schedule_steps / iso-loss steps."""
    return 1.0 - float(schedule_steps) / iso.steps


@dataclass(frozen=True)
class SavedFraction:
    """A saved fraction over seeds: its mean, its two-sided 95 % interval, the per-seed values."""

    saved_fraction: Optional[float]
    interval_95: Optional[list[float]]
    """``[low, high]``; None with fewer than two seeds (fewer than two settings when pooled)."""
    seeds: int
    per_seed: dict[Any, Any]
    """``{seed: fraction}`` (pooled: ``{setting: {seed: fraction}}``)."""
    censored: dict[Any, str]
    """``{seed: "above" | "below"}`` for the seeds read as a bound (module docstring)."""
    settings: int = 1


def paired_saved_fraction(schedule_steps: float, schedule_losses: Mapping[int, float],
                          fixed: Sequence[tuple[float, Mapping[int, float]]], *,
                          interpolation: str = PCHIP) -> SavedFraction:
    """Per seed, the saved fraction of a schedule of ``schedule_steps`` whose final loss on seed s is
    ``schedule_losses[s]``, against the frontier of the fixed batches ``(steps, {seed: loss})`` on the same seed;
    their mean with a t-interval. A fixed batch without a finite loss on a seed (it diverged there) is not on that
    seed's frontier: it reached no loss; a seed no fixed batch finished is left out."""
    seeds = sorted(s for s, v in schedule_losses.items() if v is not None and math.isfinite(v))
    per_seed, censored = {}, {}
    for s in seeds:
        iso = iso_loss_steps([(steps, losses[s]) for steps, losses in fixed if losses.get(s) is not None],
                             schedule_losses[s], interpolation=interpolation)
        if iso is None:
            continue
        per_seed[int(s)] = saved_fraction(schedule_steps, iso)
        if iso.censored:
            censored[int(s)] = iso.censored
    mean, interval = _t_interval(list(per_seed.values()))
    return SavedFraction(mean, interval, len(per_seed), per_seed, censored)


def _t_interval(values: list[float]) -> tuple[Optional[float], Optional[list[float]]]:
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = student_t_975(len(values) - 1) * sd / math.sqrt(len(values))
    return mean, [mean - half, mean + half]


def pooled_saved_fraction(by_setting: Mapping[str, Mapping[int, float]]) -> SavedFraction:
    """Per-seed saved fractions of several settings, ``{setting: {seed: fraction}}``, pooled (module
    docstring): the mean over all seeds, with a CR1 cluster-robust standard error clustered by setting,
    √(G/(G − 1) · Σ_g (Σ_i∈g (x_i − x̄))²) / N, and t(0.975, G − 1)."""
    clusters = {g: [float(v) for v in seeds.values()] for g, seeds in by_setting.items() if seeds}
    values = [v for vs in clusters.values() for v in vs]
    if not values:
        return SavedFraction(None, None, 0, {}, {}, 0)
    n, g = len(values), len(clusters)
    mean = sum(values) / n
    interval = None
    if g >= 2:
        scores = sum(sum(v - mean for v in vs) ** 2 for vs in clusters.values())
        se = math.sqrt(g / (g - 1) * scores) / n
        half = student_t_975(g - 1) * se
        interval = [mean - half, mean + half]
    return SavedFraction(mean, interval, n, {g_: dict(s) for g_, s in by_setting.items()}, {}, g)
