"""The critical batch by the equal-sample turning point.

Train every candidate batch size on the same number of samples and read the validation metric against
batch size: up to the critical batch, larger batches reach the same quality in fewer steps; beyond it,
quality at the fixed sample budget drops (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training"; Shallue et al. 2019, "Measuring the Effects of Data Parallelism on Neural Network Training").

The same empirical model says the samples needed to reach a given quality grow with the batch size, so at
an equal-sample budget the quality reachable does not improve with batch size. Each batch size's measured
best is that quality plus noise (evaluation set, seed, how well its LR was tuned); ``monotone_fit`` is the
least-squares fit that respects that shape (isotonic regression by pool-adjacent-violators), and reading
the turning point off it lets one lucky or unlucky batch size no longer decide the answer alone.

A reading at the edge of the grid is a bound, not a value (``edge_bound``): at the largest batch measured
the drop was not reached (the critical batch is that or larger); at the smallest, with the drop right after
it, the plateau may lie below the grid (that or smaller). ``next_batch_range`` proposes where to search
next, and ``agree_within`` compares two readings, bounds included, within one grid step.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

__all__ = ["monotone_fit", "turning_point", "within_tolerance", "edge_bound", "next_batch_range",
           "bound_interval", "agree_within", "LOWER", "UPPER"]


def within_tolerance(value: float, best: float, *, mode: str = "max", tolerance: float = 0.01,
                     relative: bool = True) -> bool:
    """Whether ``value`` is no worse than ``best`` by more than ``tolerance``.

    Relative tolerance is measured against |best| (1 % of 0.80 accuracy is 0.008); absolute tolerance is
    in the metric's own units. A NaN value is never within tolerance.
    """
    if math.isnan(value):
        return False
    allowed = tolerance * abs(best) if relative else tolerance
    shortfall = best - value if mode == "max" else value - best
    return shortfall <= allowed + 1e-12


def _check(batch_sizes: Sequence[int], metrics: Sequence[float], mode: str) -> None:
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    if len(batch_sizes) != len(metrics):
        raise ValueError("batch_sizes and metrics must have the same length")


def turning_point(batch_sizes: Sequence[int], metrics: Sequence[float], *, mode: str = "max",
                  tolerance: float = 0.01, relative: bool = True, monotone: bool = False) -> int:
    """Largest batch B at or above the best batch such that every batch from the best up to B stays
    within ``tolerance`` of the best metric.

    Batches are sorted first; NaN metrics (diverged or unfinished) count as "not within tolerance", so a
    NaN above the best batch ends the walk. Ties for best pick the smallest such batch (the walk upward
    then passes the tied larger ones). ``monotone``: walk ``monotone_fit(metrics)`` instead of the metrics.
    Raises ValueError with no finite metric at all.
    """
    _check(batch_sizes, metrics, mode)
    if monotone:
        metrics = monotone_fit(batch_sizes, metrics, mode=mode)
    pairs = sorted(zip(batch_sizes, metrics))
    finite = [(b, m) for b, m in pairs if math.isfinite(m)]
    if not finite:
        raise ValueError("no finite metric to take a turning point from")
    pick = max if mode == "max" else min
    best = pick(m for _, m in finite)
    start = next(i for i, (_, m) in enumerate(pairs) if m == best)
    critical = pairs[start][0]
    for batch, metric in pairs[start + 1:]:
        if not within_tolerance(metric, best, mode=mode, tolerance=tolerance, relative=relative):
            break
        critical = batch
    return critical


def monotone_fit(batch_sizes: Sequence[int], metrics: Sequence[float], *, mode: str = "max") -> list[float]:
    """The least-squares fit of ``train.gauges`` that never gets better as the batch grows (non-increasing for
    ``mode="max"``, non-decreasing for ``"min"``), in the order of ``batch_sizes``: neighbours that violate
    the order are pooled into their mean (pool-adjacent-violators, each batch size weighted equally).
    NaN metrics stay NaN and take no part in the fit."""
    _check(batch_sizes, metrics, mode)
    sign = 1.0 if mode == "max" else -1.0
    order = [i for i in sorted(range(len(metrics)), key=lambda i: batch_sizes[i]) if not math.isnan(metrics[i])]
    blocks: list[list[Any]] = []  # [sum of sign·metric, count, indices], their means non-increasing
    for i in order:
        blocks.append([sign * metrics[i], 1, [i]])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
            total, count, members = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
            blocks[-1][2] += members
    fitted = [math.nan] * len(metrics)
    for total, count, members in blocks:
        for i in members:
            fitted[i] = sign * total / count
    return fitted


LOWER, UPPER = "lower", "upper"  # a reading's ``bound``: the critical batch is at least / at most the reading


def edge_bound(reading: Optional[int], batch_sizes: Sequence[int]) -> Optional[str]:
    """Whether a reading walked up over ``batch_sizes`` (those it could compare: measured, below any gap
    that ended the walk) is a bound. At the largest, ``"lower"``: the walk never met a drop, so the critical
    batch is that or larger. At the smallest, with a batch measured above it, ``"upper"``: the drop comes
    right after it, and a smaller batch might be better still, moving the best and the turning point down.
    None otherwise, and when fewer than two batch sizes were compared (nothing to compare with).

    >>> edge_bound(128, [8, 16, 32, 64, 128]), edge_bound(8, [8, 16, 32]), edge_bound(16, [8, 16, 32])
    ('lower', 'upper', None)
    """
    sizes = sorted(set(batch_sizes))
    if reading is None or len(sizes) < 2 or reading not in sizes:
        return None
    return LOWER if reading == sizes[-1] else UPPER if reading == sizes[0] else None


def next_batch_range(reading: int, bound: Optional[str], grid: Sequence[int], *, min_batch: int = 1,
                     doublings: int = 3) -> Optional[list[int]]:
    """The batch range to search next around a bound at the edge of ``grid`` (the batch sizes searched):
    keep two known points (the bound and its neighbour in the grid) and extend ``doublings`` doublings
    past the edge. A lower bound at 128 on 8…128 gives [64, 1024]; an upper bound at 8 gives [1, 16].
    Downward it stops at ``min_batch`` (the workers per trial: each needs an example), rounded up to a
    multiple of it; None for no bound, or an upper bound already at ``min_batch``.

    >>> next_batch_range(128, "lower", [8, 16, 32, 64, 128]), next_batch_range(8, "upper", [8, 16, 32])
    ([64, 1024], [1, 16])
    """
    sizes = sorted(set(int(b) for b in grid) | {int(reading)})
    if bound == LOWER:
        below = [b for b in sizes if b < reading]
        return [below[-1] if below else reading, reading * 2 ** doublings]
    if bound == UPPER and reading > min_batch:
        above = [b for b in sizes if b > reading]
        low = max(min_batch, math.ceil(reading / 2 ** doublings / min_batch) * min_batch)
        return [low, above[0] if above else reading]
    return None


def bound_interval(value: Optional[float], bound: Optional[str]) -> Optional[tuple[float, float]]:
    """The batch sizes a reading allows: [v, v], [v, ∞) for a lower bound, (0, v] for an upper one."""
    if value is None:
        return None
    return (value, math.inf) if bound == LOWER else (0.0, value) if bound == UPPER else (value, value)


def agree_within(a: tuple[float, float], b: tuple[float, float], *, factor: float = 2.0) -> bool:
    """Whether two readings (``bound_interval``s) agree within ``factor`` (one grid step of a doubling
    grid): some batch in one is within ``factor`` of some batch in the other. 64 and 128 agree, 32 and
    128 do not; "≥ 128" agrees with 64 and with 1000, "≤ 8" with 16 but not with 32.

    >>> agree_within((64, 64), (128, 128)), agree_within((32, 32), (128, 128)), agree_within((128, math.inf), (64, 64))
    (True, False, True)
    """
    return max(a[0], b[0]) <= factor * min(a[1], b[1]) * (1 + 1e-9)
