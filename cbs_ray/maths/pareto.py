"""Pareto front of training time against quality.

A point is on the front when no other point is at least as fast and at least as good, and strictly
better in one of the two. The 2-D front is a running best over points sorted by time (as in optuna's
``_multi_objective``).
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["pareto_front"]


def pareto_front(times: Sequence[float], metrics: Sequence[float], *, mode: str = "max") -> list[int]:
    """Indices of the non-dominated (time, metric) points, ordered by increasing time.

    Lower time is better; ``mode`` says whether a higher or lower metric is better. Points with a NaN
    time or metric are never on the front. Of exact duplicates, the first index is kept.
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    if len(times) != len(metrics):
        raise ValueError("times and metrics must have the same length")
    sign = 1.0 if mode == "max" else -1.0
    valid = [i for i in range(len(times)) if not (math.isnan(times[i]) or math.isnan(metrics[i]))]
    # Fastest first; among equal times, best metric first, then lowest index.
    order = sorted(valid, key=lambda i: (times[i], -sign * metrics[i], i))
    front, best_so_far = [], -math.inf
    for i in order:
        if sign * metrics[i] > best_so_far:
            front.append(i)
            best_so_far = sign * metrics[i]
    return front
