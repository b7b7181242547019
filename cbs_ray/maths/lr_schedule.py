"""Learning-rate scaling rules and the warmup-then-decay schedule.

The LR of a trial follows the batch it trains with (Goyal et al. 2017 for the linear rule,
Krizhevsky 2014 / Hoffer et al. 2017 for the square-root rule that is often more stable with Adam):

    lr(B) = base_lr * (B / B0) ** alpha      alpha = 1: linear rule, alpha = 0.5: sqrt rule

The schedule is counted in *optimizer steps*, never in micro-steps, so gradient accumulation does not
change it: linear warmup over ``warmup_steps`` from ~0 to the peak, then decay to zero at ``total_steps``.
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["scaled_lr", "warmup_steps", "lr_multiplier", "lr_weighted_steps", "seed_warmup_fraction",
           "SEED_WARMUP_DOUBLINGS"]


def scaled_lr(base_lr: float, batch_size: int, base_batch: int, alpha: float) -> float:
    """Peak LR for ``batch_size`` scaled from ``base_lr`` tuned at ``base_batch`` (B0)."""
    if base_lr <= 0 or batch_size <= 0 or base_batch <= 0:
        raise ValueError("base_lr, batch_size and base_batch must be positive")
    return base_lr * float((batch_size / base_batch) ** alpha)


def warmup_steps(warmup_fraction: float, total_steps: int) -> int:
    """Warmup length in optimizer steps: a fraction of the trial's steps, rounded to nearest (Python's
    ``round``: an exact half goes to the even neighbour, 0.1 × 25 → 2), never more than the steps.

    A non-zero fraction always yields at least one warmup step, so "some warmup" is never silently
    rounded away at large batch sizes where a trial has few steps.
    """
    if not 0.0 <= warmup_fraction <= 1.0:
        raise ValueError(f"warmup_fraction must be in [0, 1], got {warmup_fraction}")
    if warmup_fraction == 0.0:
        return 0
    return min(total_steps, max(1, round(warmup_fraction * total_steps)))


def lr_weighted_steps(steps: float, warmup: int) -> float:
    """Optimizer steps counted by their LR, in steps at the peak: Σ over the first ``steps`` steps of
    ``lr_multiplier`` (a linear warmup of ``warmup`` steps from (step + 1)/warmup, constant after). Within the warmup
    t(t + 1)/(2·warmup); after it t − (warmup − 1)/2 (the warmup's deficit). Continuous in a fractional ``steps`` (a
    crossing interpolated between evaluations). With ``warmup`` ≤ 1 it is ``steps`` itself.

    The ladder reads S(B) this way with ``ladder.step_count: lr_weighted``: early in training a step's
    progress is about proportional to its LR, so a warmup of W steps is worth about W/2 peak steps, and batches whose
    warmups differ in steps (a floor of ``ladder.min_warmup_steps`` for the larger ones) would otherwise read as a
    shift of S(B) that the tradeoff S = S_min + E_min/B takes for a change of B_crit."""
    if steps < 0 or warmup < 0:
        raise ValueError(f"steps and warmup must be non-negative, got {steps}, {warmup}")
    if warmup <= 1:
        return float(steps)
    if steps <= warmup:
        return steps * (steps + 1) / (2 * warmup)
    return steps - (warmup - 1) / 2


SEED_WARMUP_DOUBLINGS = 4
"""How many doublings of B from B0 the seeded warmup takes to reach an end of the warmup range."""


def seed_warmup_fraction(warmup_range: Sequence[float], batch_size: int, base_batch: int) -> float:
    """The warmup fraction a search seeds batch size ``batch_size`` with: warmup grows with the batch, whose
    LR grows with it (``scaled_lr``), from the middle of ``warmup_range`` at ``base_batch`` (B0, where
    ``base_lr`` is right) by 1/(2·``SEED_WARMUP_DOUBLINGS``) of the range per doubling, up or down, clipped to
    the range: the ends 4 doublings away (B0/16 and 16·B0). A function of B, B0 and the range only, not of
    the other batch sizes searched, so a batch size gets the same seed in every grid.

    >>> [seed_warmup_fraction([0.0, 0.2], b, 16) for b in (1, 8, 16, 32, 128, 512)]
    [0.0, 0.075, 0.1, 0.125, 0.175, 0.2]
    """
    low, high = float(warmup_range[0]), float(warmup_range[1])
    if batch_size <= 0 or base_batch <= 0:
        raise ValueError("batch_size and base_batch must be positive")
    share = 0.5 + math.log2(batch_size / base_batch) / (2 * SEED_WARMUP_DOUBLINGS)
    return round(low + (high - low) * min(1.0, max(0.0, share)), 6)


def lr_multiplier(step: int, warmup: int, total_steps: int, *, decay: str = "linear") -> float:
    """Multiplier of the peak LR used for optimizer step ``step`` (0-based).

    Warmup: (step + 1) / warmup for step < warmup, so the first step already moves the weights and the
    last warmup step is at the peak. Decay after warmup: "linear" or "cosine" towards 0 one step past
    the end (so no step is wasted at LR 0 and the peak is not repeated), or "constant".
    """
    if step < warmup:
        return (step + 1) / warmup
    if decay == "constant":
        return 1.0
    offset = 1 if warmup else 0  # with warmup, the peak was already used by the last warmup step
    progress = min(1.0, (step - warmup + offset) / max(1, total_steps - warmup + offset))
    if decay == "linear":
        return 1.0 - progress
    if decay == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown decay {decay!r}")
