"""The critical batch by the equal-sample turning point.

Train every candidate batch size on the same number of samples and read the validation metric against
batch size: up to the critical batch, larger batches reach the same quality in fewer steps; beyond it,
quality at the fixed sample budget drops (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training"; Shallue et al. 2019, "Measuring the Effects of Data Parallelism on Neural Network Training").
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["turning_point", "within_tolerance"]


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


def turning_point(batch_sizes: Sequence[int], metrics: Sequence[float], *, mode: str = "max",
                  tolerance: float = 0.01, relative: bool = True) -> int:
    """Largest batch B at or above the best batch such that every batch from the best up to B stays
    within ``tolerance`` of the best metric.

    Batches are sorted first; NaN metrics (diverged or unfinished) count as "not within tolerance", so a
    NaN above the best batch ends the walk. Ties for best pick the smallest such batch (the walk upward
    then passes the tied larger ones). Raises ValueError with no finite metric at all.
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    if len(batch_sizes) != len(metrics):
        raise ValueError("batch_sizes and metrics must have the same length")
    pairs = sorted(zip(batch_sizes, metrics))
    finite = [(b, m) for b, m in pairs if not math.isnan(m)]
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
