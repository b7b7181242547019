"""Batch-size ramps that follow a measured critical batch CBS(t): the ``fitted`` rule, the ``seesaw``
rule, and geometric checkpoint placement. Pure: inputs are samples, batches and LR multipliers.

A ramp is ``[[start_samples, batch], …]``, first ``[0, trunk_batch]``, batches non-decreasing powers-of-two
multiples of the trunk's batch, never above ``largest_batch`` (the largest batch measured) and never above the
**cap**: the lowest CBS measured at the latest checkpoint at or before the sample or at any later one (``cap_at``;
the trunk's batch before the first resolvable checkpoint: no measurement, no evidence), so that the ramp is never
above the CBS measured at any checkpoint. CBS(t) at a checkpoint is k*·B, the lower end of
its interval [k*·B, next·B] (Merrill et al. 2025, "Critical Batch Size Revisited", arXiv 2505.23971, §3.1).

**fitted** (``fitted_ramp``): CBS(s) = a·s^b fitted by least squares in log2–log2 through the measured points
(``fit_power_law``: b ≥ 0, CBS does not fall; one point gives a constant), and
B(s) = the largest trunk·2^j ≤ fit(s) / 2^``margin_doublings`` (one batch below the fitted CBS by default: at a
checkpoint the fit passes through, half its CBS, the level at which ``once_per_crossing`` stands there), capped as
above. The batch switches where the fit crosses the next batch's threshold or where a checkpoint lifts the cap,
not only at checkpoints, and as many doublings at once as the fit and cap allow (no one-doubling-per-crossing lag).

**seesaw** (``seesaw_ramp``; Meterez et al. 2025, "Seesaw: Accelerating Training by Balancing Learning Rate and
Batch Size Scheduling", arXiv 2510.14717, abstract and §3): wherever the base LR decay would halve the LR
(its multiplier reaches 2^−k after its peak, k = 1, 2, …), Seesaw doubles the batch and multiplies the LR by 1/√2
instead (for normalized SGD, their proxy for Adam, the schedules (η·a^−k, B·b^k) match when a·√b is equal: a = 2,
b = 1 against a = √2, b = 2). Here the target batch after k halvings is trunk·2^k, capped as above; a doubling
the cap holds back is taken at the checkpoint that lifts it (until then the LR takes the base decay's halving,
the other side of the same equivalence). **From the tuned batch**: Seesaw starts from the batch one
would train at fixed, not from the trunk's; ``start_batch`` sets it (``methods.branch.reading``: CBS at the first
resolvable checkpoint, or the best tuned fixed batch), and the target after k halvings is start·2^k, never above
the cap (nor below the start: the start is a choice, not a measurement the cap overrules). **Late switch**
(``first_doubling_samples``): no doubling before that sample; the halvings before it are taken there, capped, as a
held-back doubling is. The LR is not set here: under the alpha-0.5 rule the schedule's run
uses, η0·√(B/B0)·m(s), the LR at the k-th cut is η0·2^(k/2)·2^−k = η0·(1/√2)^k, Seesaw's, and between cuts it
follows the base decay smoothly rather than in steps (a deviation from the paper's piecewise-constant LR).

**Geometric checkpoints** (``geometric_checkpoints``): 1/32, 1/16, …, 1/2 of the budget, each twice the one
before, so that early training, where CBS(t) grows fastest in relative terms, gets as many points as late.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

__all__ = ["cap_at", "fit_power_law", "fitted_ramp", "geometric_checkpoints", "halving_points", "seesaw_ramp"]


def geometric_checkpoints(first: float = 1 / 32, last: float = 0.5) -> list[float]:
    """Fractions of the budget from ``first`` to ``last``, each twice the one before (``first`` · 2^k ≤ ``last``)."""
    if not 0.0 < first <= last < 1.0:
        raise ValueError(f"need 0 < first <= last < 1, got first={first}, last={last}")
    out, point = [], float(first)
    while point <= last * (1 + 1e-12):
        out.append(point)
        point *= 2
    return out


def cap_at(measured: Sequence[tuple[int, int]], samples: int, trunk_batch: int) -> int:
    """The cap at ``samples`` (``measured``: ``(checkpoint samples, CBS)``): the lowest CBS measured at the latest
    checkpoint at or before ``samples`` or at any later one (CBS(t) grows, so a later, lower reading is noise
    that a ramp which never comes down must respect: it is then never above the CBS measured at any checkpoint),
    floored to a trunk·2^j; ``trunk_batch`` before the first checkpoint."""
    ordered = sorted(measured)
    started = [i for i, (point, _) in enumerate(ordered) if point <= samples]
    if not started:
        return int(trunk_batch)
    return _grid_floor(min(cbs for _, cbs in ordered[started[-1]:]), trunk_batch)


def fit_power_law(measured: Sequence[tuple[int, int]]) -> Optional[tuple[float, float]]:
    """``(a, b)`` of CBS(s) = a·s^b, least squares in log2(CBS) on log2(samples); b clipped at 0 (then a is the
    geometric mean). One point, or every point at one sample: b = 0. None without a point."""
    pts = [(math.log2(s), math.log2(c)) for s, c in measured if s > 0 and c > 0]
    if not pts:
        return None
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    b = 0.0 if sxx == 0 else max(0.0, sum((x - mx) * (y - my) for x, y in pts) / sxx)
    return 2.0 ** (my - b * mx), b


def _grid_floor(value: float, trunk_batch: int) -> int:
    """The largest trunk·2^j ≤ value (the trunk's batch when value is below it)."""
    if value < trunk_batch:
        return int(trunk_batch)
    return int(trunk_batch) * int(2 ** int(math.floor(math.log2(value / trunk_batch) + 1e-9)))  # 31.999… is 32


def _append(ramp: list[list[int]], start: int, batch: int) -> None:
    if batch <= ramp[-1][1]:
        return
    if ramp[-1][0] == start:
        ramp[-1][1] = batch
    else:
        ramp.append([int(start), int(batch)])


def _round_up(samples: float, unit: int) -> int:
    return int(math.ceil(samples / unit - 1e-9)) * unit


def fitted_ramp(measured: Sequence[tuple[int, int]], *, trunk_batch: int, largest_batch: int, budget_samples: int,
                margin_doublings: int = 1, unit: int = 1) -> list[list[int]]:
    """The ``fitted`` ramp (module docstring) from ``measured`` ``(checkpoint samples, CBS)`` (resolvable points
    only). A switch between checkpoints lands on the first whole ``unit`` of samples at or after the fit's
    crossing; none at or past ``budget_samples``."""
    ramp = [[0, int(trunk_batch)]]
    fit = fit_power_law(measured)
    if fit is None:
        return ramp
    a, b = fit
    scale = 2.0 ** margin_doublings
    points = sorted(int(s) for s, _ in measured)
    for i, start in enumerate(points):
        end = points[i + 1] if i + 1 < len(points) else budget_samples
        ceiling = min(cap_at(measured, start, trunk_batch), int(largest_batch))
        _append(ramp, start, min(ceiling, _grid_floor(a * start ** b / scale, trunk_batch)))
        while b > 0 and ramp[-1][1] * 2 <= ceiling:
            crossing = _round_up((ramp[-1][1] * 2 * scale / a) ** (1.0 / b), unit)
            if crossing >= end:
                break
            _append(ramp, max(crossing, start), ramp[-1][1] * 2)
    return ramp


def halving_points(multipliers: Sequence[tuple[int, float]]) -> list[int]:
    """Where the base LR decay halves: for k = 1, 2, …, the first sample (after the multiplier's peak) at which
    the multiplier is at most 2^−k of the peak; ``multipliers`` are ``(samples, multiplier)`` per optimizer step,
    in order. A step that falls past several halvings at once counts once for each."""
    if not multipliers:
        return []
    peak_index = max(range(len(multipliers)), key=lambda i: (multipliers[i][1], -i))
    peak = multipliers[peak_index][1]
    out, k = [], 1
    for samples, m in multipliers[peak_index:]:
        while peak > 0 and m <= peak * 2.0 ** -k * (1 + 1e-9):
            out.append(int(samples))
            k += 1
    return out


def seesaw_ramp(multiplier_at: Callable[[int], float], *, measured: Sequence[tuple[int, int]], trunk_batch: int,
                largest_batch: int, budget_samples: int, unit: int = 1, start_batch: Optional[int] = None,
                first_doubling_samples: int = 0) -> list[list[int]]:
    """The ``seesaw`` ramp (module docstring): ``multiplier_at(step)`` is the base LR decay's multiplier at
    optimizer step ``step`` of a run at ``trunk_batch`` over ``budget_samples`` (the trunk's schedule, laid out in
    samples as step × trunk_batch); ``measured`` the resolvable ``(checkpoint samples, CBS)``. A halving lands on
    the first whole ``unit`` of samples at or after it (the largest batch: every batch then ends the budget on a
    whole step); none at or past the budget. ``start_batch`` (default the trunk's, at most ``largest_batch``): the
    batch at step 0; ``first_doubling_samples``: the late switch, no doubling before it."""
    start = min(int(start_batch or trunk_batch), int(largest_batch))
    steps = budget_samples // trunk_batch
    cuts = [c for c in (_round_up(c, unit) for c in
                        halving_points([(k * trunk_batch, multiplier_at(k)) for k in range(steps)]))
            if c < budget_samples]
    switch = _round_up(first_doubling_samples, unit) if first_doubling_samples > 0 else 0
    events = sorted(e for e in set(cuts) | {int(s) for s, _ in measured if 0 <= s < budget_samples}
                    | ({switch} if 0 < switch < budget_samples else set()) if e >= switch)
    ramp = [[0, start]]
    for samples in events:
        halvings = sum(1 for c in cuts if c <= samples)
        ceiling = min(cap_at(measured, samples, trunk_batch), int(largest_batch))
        doublings = max((j for j in range(halvings + 1) if start * 2 ** j <= ceiling), default=0)
        _append(ramp, samples, start * 2 ** doublings)
    return ramp
