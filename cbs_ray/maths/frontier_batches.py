"""The dense frontier's fixed batches: batches √2 apart around B* (the best tuned fixed batch), each rounded to a
batch that every run of the validation can train (``dense_batches``).

A fixed-batch control trains the whole budget and reports at every ``training.eval_every_samples`` milestone, so
its batch must divide that cadence (a step may not straddle a report; ``train.run_plan.RunPlan.steps``) and split
over the trial's workers (``maths.budget.plan_batch``). Between two powers of two, √2·2^k is never a whole number:
it is rounded, in log B, to the nearest batch that does (a tie: the smaller). With a cadence that is a power of two
only powers of two divide it, and the ladder collapses to batches 2× apart; a cadence of 3·2^k or 5·2^k admits the
batches 3·2^(k−1) (1.5× and 1.33× from their neighbours) or 5·2^(k−2) (1.25×, 1.6×).
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

__all__ = ["landing_batches", "nearest_batch", "sqrt2_ladder", "dense_batches"]


def landing_batches(every: int, workers: int = 1) -> list[int]:
    """Every batch a fixed-batch control can train under a report cadence of ``every`` samples on ``workers``
    workers: the divisors of ``every`` that are multiples of ``workers``, ascending."""
    if every <= 0 or workers <= 0:
        raise ValueError("every and workers must be positive")
    small = [d for d in range(1, math.isqrt(every) + 1) if every % d == 0]
    return sorted(b for b in {*small, *(every // d for d in small)} if b % workers == 0)


def nearest_batch(target: float, allowed: Sequence[int]) -> int:
    """The batch of ``allowed`` nearest ``target`` in log B (a tie, to 1e-12: the smaller)."""
    if not allowed or target <= 0:
        raise ValueError("nearest_batch needs a positive target and at least one allowed batch")
    return min(allowed, key=lambda b: (round(abs(math.log(b / target)), 12), b))


def sqrt2_ladder(center: float, low: float, high: float) -> list[float]:
    """``center``·√2^k for every whole k with ``low`` ≤ the batch ≤ ``high`` (to a relative 1e-9), ascending."""
    if center <= 0 or low <= 0 or high < low:
        raise ValueError("sqrt2_ladder needs 0 < low <= high and a positive center")
    first = math.ceil(2 * math.log2(low / center) - 1e-9)
    last = math.floor(2 * math.log2(high / center) + 1e-9)
    return [center * 2 ** (k / 2) for k in range(first, last + 1)]


def dense_batches(center: int, *, low: float, high: float, every: int, workers: int = 1,
                  largest_allowed: Optional[int] = None, include: Iterable[int] = ()) -> list[int]:
    """The dense frontier's batches, ascending: ``sqrt2_ladder(center, low, high)`` each rounded to the nearest
    batch that lands on every report (``landing_batches(every, workers)``), with ``include`` (the batches a
    schedule can train at, so that each of its batches is on the frontier too) where they land; none above
    ``largest_allowed`` (the training set)."""
    allowed = [b for b in landing_batches(every, workers) if largest_allowed is None or b <= largest_allowed]
    if not allowed:
        raise ValueError(f"no batch divides the report cadence {every} over {workers} workers within "
                         f"{largest_allowed} examples")
    rounded = {nearest_batch(b, allowed) for b in sqrt2_ladder(center, low, high)}
    return sorted(rounded | {int(b) for b in include if int(b) in allowed})
