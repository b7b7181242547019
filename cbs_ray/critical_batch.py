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
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["monotone_fit", "turning_point", "within_tolerance"]


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
    """The least-squares fit of ``metrics`` that never gets better as the batch grows (non-increasing for
    ``mode="max"``, non-decreasing for ``"min"``), in the order of ``batch_sizes``: neighbours that violate
    the order are pooled into their mean (pool-adjacent-violators, each batch size weighted equally).
    NaN metrics stay NaN and take no part in the fit."""
    _check(batch_sizes, metrics, mode)
    sign = 1.0 if mode == "max" else -1.0
    order = [i for i in sorted(range(len(metrics)), key=lambda i: batch_sizes[i]) if not math.isnan(metrics[i])]
    blocks: list[list] = []  # [sum of sign·metric, count, indices], their means non-increasing
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
