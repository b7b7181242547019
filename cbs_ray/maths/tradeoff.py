"""Steps/samples tradeoff (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", §2.2
and Appendix D) and the 20 % overhead rule (Zhang et al. 2025, "How Does Critical Batch Size Scale in
Pre-training?").

To reach a fixed target, a batch of B needs S(B) optimizer steps and E(B) = B·S(B) samples. McCandlish
et al. find (S/S_min − 1)(E/E_min − 1) = 1, i.e. S(B) = S_min + E_min / B: small batches are
sample-efficient (E → E_min), large batches step-efficient (S → S_min), and the critical batch
B_crit = E_min / S_min is where both cost twice their minimum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
from numpy.typing import ArrayLike

from cbs_ray.maths.critical_batch import LOWER, UPPER

__all__ = ["samples_to_target", "TradeoffFit", "bootstrap_b_crit_intervals", "fit_tradeoff", "fit_tradeoffs",
           "overhead_rule"]


def samples_to_target(samples: Sequence[float], metrics: Sequence[float], target: float, *,
                      mode: str = "max", censor_first: bool = False) -> float:
    """Samples at which a trial first reaches ``target``, interpolated linearly between the two reported
    milestones that bracket the crossing. NaN if never reached; the first milestone itself if it is
    already reached there (nothing was reported before it: an upper bound), or, with ``censor_first``, NaN: a
    run already past the target at its first report is left-censored (a bound, never a crossing)."""
    sign = 1.0 if mode == "max" else -1.0
    previous = None
    for s, m in sorted(zip(samples, metrics)):
        if math.isnan(m):
            previous = None
            continue
        if sign * m >= sign * target:
            if previous is None:
                return math.nan if censor_first else float(s)
            s0, m0 = previous
            return float(s0 + (s - s0) * (sign * (target - m0)) / (sign * (m - m0)))
        previous = (s, m)
    return math.nan


@dataclass
class TradeoffFit:
    """Fit of S(B) = s_min + e_min / B. ``b_crit`` = e_min / s_min; None with a ``reason`` when the data
    cannot support it. ``ci`` is the bootstrap 95 % interval of b_crit (None when not computable).
    ``bound``: where b_crit is None because it lies past the measured range, ``"lower"`` (B_crit ≥
    ``bound_at`` = 4× the largest batch measured) or ``"upper"`` (B_crit ≤ ``bound_at`` = ¼ of the smallest)."""

    s_min: Optional[float]
    e_min: Optional[float]
    b_crit: Optional[float]
    ci: Optional[tuple[float, float]] = None
    points: int = 0
    reason: Optional[str] = None
    batch_sizes: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    bound: Optional[str] = None
    bound_at: Optional[float] = None


EXTRAPOLATION_LIMIT = 4  # a B_crit further than this beyond the largest measured batch is not reported


def _weighted_fit(b: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    # Least squares on relative errors: steps span orders of magnitude across batch sizes.
    design = np.stack([np.ones_like(b), 1.0 / b], axis=1) / s[:, None]
    (s_min, e_min), *_ = np.linalg.lstsq(design, np.ones_like(s), rcond=None)
    return float(s_min), float(e_min)


def fit_tradeoff(batch_sizes: ArrayLike, steps_to_target: ArrayLike, *, bootstrap: int = 1000,
                 seed: int = 0) -> TradeoffFit:
    """Fit S(B) = S_min + E_min / B to steps-to-target per batch size (NaN entries are dropped).

    Needs at least three batch sizes that reached the target. The 95 % interval resamples the
    (B, S) pairs with replacement (resamples with fewer than three distinct batch sizes are skipped). A
    resample whose S_min is not positive scales perfectly, B_crit = ∞, and one whose E_min is not positive
    has no tradeoff, B_crit = 0: both count, so the upper end is ∞ (unbounded) when more than 2.5 % of the
    resamples scale perfectly. The bounds are the order statistics at or beyond each percentile."""
    b = np.asarray(batch_sizes, dtype=float)
    s = np.asarray(steps_to_target, dtype=float)
    keep = ~np.isnan(s) & ~np.isnan(b) & (s > 0) & (b > 0)
    b, s = b[keep], s[keep]
    base = dict(batch_sizes=b.tolist(), steps=s.tolist(), points=int(len(b)))
    if len(np.unique(b)) < 3:
        return TradeoffFit(None, None, None, reason=f"needs steps-to-target for at least 3 batch sizes, "
                                                     f"got {len(np.unique(b))}", **base)
    s_min, e_min = _weighted_fit(b, s)
    judged = _judged(b, s, s_min, e_min)
    if judged.b_crit is None:
        return judged
    rng = np.random.default_rng(seed)
    estimates = []
    for _ in range(bootstrap):
        pick = rng.integers(0, len(b), len(b))
        if len(np.unique(b[pick])) < 3:
            continue
        bs_s, bs_e = _weighted_fit(b[pick], s[pick])
        estimates.append(0.0 if bs_e <= 0 else math.inf if bs_s <= 0 else bs_e / bs_s)
    ci = ((float(np.percentile(estimates, 2.5, method="lower")), float(np.percentile(estimates, 97.5, method="higher")))
          if estimates and len(estimates) >= bootstrap // 2 else None)
    return TradeoffFit(s_min, e_min, e_min / s_min, ci=ci, **base)


def _judged(b: np.ndarray, s: np.ndarray, s_min: float, e_min: float) -> TradeoffFit:
    """``fit_tradeoff``'s verdict on a point fit (S_min, E_min) of at least 3 batch sizes: B_crit without an interval,
    or None with the reason (and the bound) where the steps do not support one."""
    base = dict(batch_sizes=b.tolist(), steps=s.tolist(), points=int(len(b)))
    # Equal steps fit E_min = 0 up to rounding, whose sign depends on the BLAS (2e-13 on one machine, -3e-13
    # on another): below this it is zero, read as "barely falls" (an upper bound), not as "does not fall".
    rounding = 1e-9 * abs(s_min) * float(b.max())
    if e_min <= 0 and not (s_min > 0 and abs(e_min) <= rounding):
        return TradeoffFit(s_min, e_min, None, reason="steps do not fall with batch size: no tradeoff to fit",
                           **base)
    if s_min > 0 and e_min / s_min < b.min() / EXTRAPOLATION_LIMIT:  # e.g. equal steps, E_min ≈ 0 in floats
        return TradeoffFit(s_min, e_min, None, reason=f"steps barely fall with batch size: B_crit lies below "
                           f"1/{EXTRAPOLATION_LIMIT} of the smallest batch measured ({int(b.min())}); measure "
                           f"smaller batches", bound=UPPER, bound_at=float(b.min()) / EXTRAPOLATION_LIMIT, **base)
    if s_min <= 0 or e_min / s_min > EXTRAPOLATION_LIMIT * b.max():
        return TradeoffFit(s_min, e_min, None, reason=f"steps fall almost in proportion to batch size over the "
                           f"whole range (near-perfect scaling): B_crit lies beyond {EXTRAPOLATION_LIMIT}× the "
                           f"largest batch measured ({int(b.max())}); measure larger batches", bound=LOWER,
                           bound_at=float(b.max()) * EXTRAPOLATION_LIMIT, **base)
    return TradeoffFit(s_min, e_min, e_min / s_min, **base)


def _normal_sums(b: np.ndarray, s: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, ...]:
    """``_weighted_fit``'s normal equations for many tradeoffs (rows of ``b``, ``s``) under many resamples (rows of
    ``counts``: how often each point is picked): (a11, a12, a22, r1, r2), each tradeoffs × resamples."""
    x1, x2 = 1.0 / s, 1.0 / (b * s)  # the rows of _weighted_fit's design, whose target is 1
    return (x1 * x1) @ counts.T, (x1 * x2) @ counts.T, (x2 * x2) @ counts.T, x1 @ counts.T, x2 @ counts.T


def fit_tradeoffs(fits: Sequence[tuple[Sequence[float], Sequence[float]]], *, bootstrap: int = 1000, seed: int = 0
                  ) -> list[TradeoffFit]:
    """``fit_tradeoff`` for many tradeoffs at once, in time linear in their number: ``fits`` is a list of (batch
    sizes, steps to target), each with distinct batch sizes and positive, finite entries. The point fits solve the
    same weighted least squares (by its normal equations, all tradeoffs of one size in one product; equal to
    ``fit_tradeoff``'s to rounding), judged as it judges them; the intervals are ``bootstrap_b_crit_intervals``'."""
    out: list[TradeoffFit] = []
    for b_list, s_list in fits:
        distinct = len(set(b_list))
        if distinct < 3:
            out.append(TradeoffFit(None, None, None, reason=f"needs steps-to-target for at least 3 batch sizes, "
                                                            f"got {distinct}", batch_sizes=[float(v) for v in b_list],
                                   steps=[float(v) for v in s_list], points=len(b_list)))
        else:
            out.append(TradeoffFit(None, None, None))  # filled below
    by_size: dict[int, list[int]] = {}
    for i, (b_list, _) in enumerate(fits):
        if out[i].reason is None:
            by_size.setdefault(len(b_list), []).append(i)
    for n, members in by_size.items():
        b = np.array([fits[i][0] for i in members], dtype=float)
        s = np.array([fits[i][1] for i in members], dtype=float)
        a11, a12, a22, r1, r2 = (v[:, 0] for v in _normal_sums(b, s, np.ones((1, n))))
        det = a11 * a22 - a12 * a12
        s_min, e_min = (a22 * r1 - a12 * r2) / det, (a11 * r2 - a12 * r1) / det
        for row, i in enumerate(members):
            out[i] = _judged(b[row], s[row], float(s_min[row]), float(e_min[row]))
    fitted = [i for i, f in enumerate(out) if f.b_crit is not None]
    intervals = bootstrap_b_crit_intervals([fits[i] for i in fitted], bootstrap=bootstrap, seed=seed)
    for i, ci in zip(fitted, intervals):
        out[i].ci = ci
    return out


def overhead_rule(batch_sizes: Sequence[int], steps_to_target: Sequence[float], *, overhead: float = 0.2
                  ) -> Optional[int]:
    """Largest B whose steps-to-target are within (1 + overhead) × perfect linear scaling from the
    smallest batch that reached the target: S(B) ≤ 1.2 · S(B_0) · B_0 / B, i.e. at most 20 % more
    samples than B_0 needed. Walking up from B_0, the first batch over the line ends the walk (as for the
    turning point): a larger batch back under it is noise, not a reason to skip the one that failed.
    None if no batch reached the target."""
    pairs = sorted((b, st) for b, st in zip(batch_sizes, steps_to_target) if not math.isnan(st))
    if not pairs:
        return None
    b0, s0 = pairs[0]
    largest = b0
    for b, st in pairs[1:]:
        if st > (1 + overhead) * s0 * b0 / b + 1e-9:
            break
        largest = b
    return largest


def bootstrap_b_crit_intervals(fits: Sequence[tuple[Sequence[float], Sequence[float]]], *, bootstrap: int = 1000,
                               seed: int = 0, chunk: int = 2000) -> list[Optional[tuple[float, float]]]:
    """``fit_tradeoff``'s bootstrap 95 % interval of B_crit for many tradeoffs at once, in time linear in their number:
    ``fits`` is a list of (batch sizes, steps to target), each with distinct batch sizes and positive, finite entries.
    Every tradeoff with n points is resampled with the same ``bootstrap`` draws of n indices (one stream per n, from
    ``seed``): a resample enters only through how often it picks each point, so the weighted least squares of every
    tradeoff of that size is one matrix product. As ``fit_tradeoff``: resamples with fewer than 3 distinct batch sizes
    are skipped, E_min ≤ 0 counts as 0 and S_min ≤ 0 as ∞, the ends are the order statistics at or beyond 2.5 % and
    97.5 %, and None where fewer than half the resamples count. The draws differ from ``fit_tradeoff``'s own, so an
    interval agrees with it as two bootstraps do, not digit for digit."""
    out: list[Optional[tuple[float, float]]] = [None] * len(fits)
    by_size: dict[int, list[int]] = {}
    for i, (sizes, _) in enumerate(fits):
        by_size.setdefault(len(sizes), []).append(i)
    for n, members in by_size.items():
        rng = np.random.default_rng([seed, n])
        picks = rng.integers(0, n, (bootstrap, n))
        counts = np.zeros((bootstrap, n))
        np.add.at(counts, (np.repeat(np.arange(bootstrap), n), picks.ravel()), 1.0)
        counts = counts[(counts > 0).sum(axis=1) >= 3]  # at least 3 distinct batch sizes (they are distinct)
        m = len(counts)
        if m == 0 or m < bootstrap // 2:
            continue
        lo, hi = int(math.floor(0.025 * (m - 1))), int(math.ceil(0.975 * (m - 1)))
        for start in range(0, len(members), chunk):
            idx = members[start:start + chunk]
            b = np.array([fits[i][0] for i in idx], dtype=float)
            s = np.array([fits[i][1] for i in idx], dtype=float)
            a11, a12, a22, r1, r2 = _normal_sums(b, s, counts)
            # B_crit = E_min / S_min: the determinant (> 0 for ≥ 2 distinct batch sizes, Cauchy–Schwarz) cancels, and
            # E_min, S_min carry the signs of these numerators
            e_num, s_num = a11 * r2 - a12 * r1, a22 * r1 - a12 * r2
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                est = e_num / s_num
            est[s_num <= 0] = np.inf
            est[e_num <= 0] = 0.0
            good = ~np.isnan(est).any(axis=1)
            part = np.partition(est, [lo, hi], axis=1)
            for row, i in enumerate(idx):
                if good[row]:
                    out[i] = (float(part[row, lo]), float(part[row, hi]))
    return out
