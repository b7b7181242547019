"""The gradient noise scale B_simple = tr(Σ) / |G|² (McCandlish et al. 2018, "An Empirical Model of
Large-Batch Training", §2.2 and Appendix A.1), measured almost for free during data-parallel training.

A gradient averaged over B samples has E|G_B|² = |G|² + tr(Σ)/B. Two batch sizes give two equations:
each worker's local gradient (B_small samples) and the all-reduced one (B_big samples) are both at hand
in every step, so

    |G|²   ≈ (B_big·|G_big|² − B_small·|G_small|²) / (B_big − B_small)
    tr(Σ)  ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)

are unbiased. Each is noisy, and the ratio of two noisy estimates is biased, so the estimates are
averaged separately over many steps and only the averages are divided.
"""

from __future__ import annotations

import math
from typing import Sequence, Union

import numpy as np

__all__ = ["noise_scale", "b_simple", "NoiseScaleMeter", "NOT_MEASURABLE", "proposed_grid"]

NOT_MEASURABLE = "not measurable: one worker and no gradient accumulation give only one batch size"

Number = Union[float, Sequence[float]]


def noise_scale(sqnorm_small: Number, sqnorm_big: Number, b_small: float, b_big: float
                ) -> tuple[float, float, float]:
    """(grad_sq, trace_sigma, b_simple) from squared gradient norms at two batch sizes.

    Scalars, or equal-length sequences of per-step values (then each estimate is averaged before the
    ratio is taken). Non-finite entries are skipped. b_simple as ``b_simple()``: NaN when the averaged |G|²
    or tr Σ is not positive."""
    if not b_big > b_small > 0:
        raise ValueError(f"need b_big > b_small > 0, got {b_small}, {b_big}")
    small = np.atleast_1d(np.asarray(sqnorm_small, dtype=float))
    big = np.atleast_1d(np.asarray(sqnorm_big, dtype=float))
    if small.shape != big.shape:
        raise ValueError("sqnorm_small and sqnorm_big must have the same length")
    keep = np.isfinite(small) & np.isfinite(big)
    if not keep.any():
        return math.nan, math.nan, math.nan
    grad_sq = float(np.mean((b_big * big[keep] - b_small * small[keep]) / (b_big - b_small)))
    trace = float(np.mean((small[keep] - big[keep]) / (1.0 / b_small - 1.0 / b_big)))
    return grad_sq, trace, b_simple(grad_sq, trace)


def b_simple(grad_sq: float, trace_sigma: float) -> float:
    """tr Σ / |G|², or NaN unless both estimates are positive: both quantities are non-negative, and a
    non-positive estimate means too few steps for the noise to average out, not a negative noise scale."""
    return trace_sigma / grad_sq if grad_sq > 0 and trace_sigma > 0 else math.nan


class NoiseScaleMeter:
    """Exponential moving averages of the two per-step estimates (the training loop feeds one pair per
    step), kept separately as McCandlish et al. do, with Adam-style bias correction. ``decay`` 0.98 is a
    window of about 50 steps: long enough to average the noise out, short enough to follow training."""

    def __init__(self, b_small: int, b_big: int, decay: float = 0.98):
        self.b_small, self.b_big, self.decay = b_small, b_big, decay
        self.grad_sq, self.trace, self.weight, self.count = 0.0, 0.0, 0.0, 0

    def add(self, sqnorm_small: float, sqnorm_big: float) -> None:
        if not (math.isfinite(sqnorm_small) and math.isfinite(sqnorm_big)):
            return  # a skipped (overflowed or diverged) step says nothing about the noise
        grad_sq, trace, _ = noise_scale(sqnorm_small, sqnorm_big, self.b_small, self.b_big)
        d = self.decay
        self.grad_sq = d * self.grad_sq + (1 - d) * grad_sq
        self.trace = d * self.trace + (1 - d) * trace
        self.weight = d * self.weight + (1 - d)
        self.count += 1

    def averages(self) -> tuple[float, float]:
        """Bias-corrected (|G|², tr Σ); NaN before the first step."""
        if not self.weight:
            return math.nan, math.nan
        return self.grad_sq / self.weight, self.trace / self.weight

    def saved(self, averages: tuple[float, float] | None = None) -> list[float]:
        """What a checkpoint keeps: ``[|G|², tr Σ, weight, count]``, the averages bias-corrected (``averages``:
        those averaged over the workers, as the report has them). The moving averages are linear in their
        inputs, so every worker resumed from the workers' mean continues to the mean an uninterrupted run
        reaches: a resumed trial's noise scale is the one it would have had (a meter restarted from
        zero read 23 where the uninterrupted run read 829)."""
        grad_sq, trace = averages if averages is not None else self.averages()
        return [float(grad_sq), float(trace), float(self.weight), float(self.count)]

    def resume(self, saved: list[float]) -> None:
        """Continue from ``saved`` (``saved()``); nothing when it holds no finite averages."""
        grad_sq, trace, weight, count = saved
        if weight and math.isfinite(grad_sq) and math.isfinite(trace):
            self.grad_sq, self.trace, self.weight, self.count = grad_sq * weight, trace * weight, weight, int(count)


def proposed_grid(b_simple: float, *, smallest: int = 2, largest: int | None = None, span: int = 8) -> list[int]:
    """Powers of two centred on ``b_simple``: from B/span to B·span around the nearest power of two,
    clipped to [smallest, largest]. The critical batch sits near B_simple (McCandlish et al. 2018), and
    Merrill et al. 2025 find it can lie well above, hence a wide, symmetric span."""
    if not (b_simple > 0 and math.isfinite(b_simple)):
        raise ValueError(f"B_simple must be a positive number, got {b_simple}")
    centre = round(math.log2(b_simple))
    reach = round(math.log2(span))
    low = max(centre - reach, math.ceil(math.log2(smallest)))
    high = centre + reach
    if largest is not None:
        high = min(high, math.floor(math.log2(largest)))
    if high < low:
        raise ValueError(f"no power of two between {smallest} and {largest} near B_simple={b_simple:.3g}")
    return [2 ** k for k in range(low, high + 1)]
