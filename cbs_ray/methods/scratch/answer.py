"""The from-scratch ``Summary.answer``, the one critical batch the report stands behind: the turning point (on the
monotone fit by default), how sure the noise lets it be (the verdict), whether it is a bound at the edge of
the grid and where to search next, and whether the tradeoff and the 20 % rule agree with it within one grid
step.
"""

from __future__ import annotations

from typing import Optional

from cbs_ray.analysis.bounds import bound_text
from cbs_ray.maths.critical_batch import LOWER, UPPER, agree_within, bound_interval, next_batch_range
from cbs_ray.methods.scratch.summary import Answer, OverheadRule, Tradeoff, TurningPoint

__all__ = ["answer_of", "READINGS", "CROSS_CHECKS", "EFFORT_MARK"]

# ---- the one answer ---------------------------------------------------------------------------------

READINGS = {"monotone": "monotone fit", "raw": "raw bests"}  # search.turning_point
NEXT_DOUBLINGS = 3  # a bound at the grid's edge: search this many doublings past it next
THIN_DATA = 4  # fewer batch sizes reaching the target after their first report: the rules rest on thin data
# The answer line's short forms of the cross-check line and the notes that follow it in the headline.
CROSS_CHECKS = {True: "cross-checks agree within one grid step", False: "a cross-check differs (below)",
                None: "no cross-check determined"}
EFFORT_MARK = "unequal search effort (below)"


def _sureness(turning: TurningPoint) -> tuple[Optional[bool], Optional[str]]:
    """The verdict in a few words: resolved, not resolved (and what would resolve it), or no estimate."""
    unc = turning.uncertainty
    if unc is None:
        return None, None
    if unc.verdict is None:
        return None, "no noise estimate (one run per batch size: set search.repeats >= 2)"
    v = unc.verdict
    if v.resolved:
        return True, "resolved"
    return False, ("not resolved: use " + (f"≥ {v.repeats_needed} repeats, " if v.repeats_needed else "")
                   + "a larger evaluation set or a smoother metric")


def _bound_phrase(turning: TurningPoint, next_range: Optional[list[int]], min_batch: int) -> Optional[str]:
    """Why the answer is a bound, and where to search next."""
    if turning.bound == LOWER:
        if turning.reason:  # the walk ended at a batch size with no completed trial
            return turning.reason
        return "the drop was not reached" + (f"; search {next_range[0]}…{next_range[1]} next" if next_range else "")
    if turning.bound == UPPER:
        phrase = "the drop comes right after the smallest batch measured"
        if next_range is None:
            return phrase + f"; no smaller batch to search ({min_batch} is the workers per trial)"
        floor = (f" (not below {min_batch}, the workers per trial)"
                 if next_range[0] == min_batch and turning.batch_size / 2 ** NEXT_DOUBLINGS < min_batch else "")
        return phrase + f"; search {next_range[0]}…{next_range[1]} next{floor}"
    return turning.reason


def _cross_checks(turning: TurningPoint, tradeoff: Tradeoff, overhead: OverheadRule) -> tuple[Optional[bool], str]:
    """The tradeoff and the 20 % rule against the turning point: within one grid step (a factor of 2,
    bounds as the ranges they allow: ``maths.critical_batch.agree_within``), or why they differ."""
    anchor = bound_interval(turning.batch_size, turning.bound)
    plural = tradeoff.points != 1
    thin = (f" (thin data: {tradeoff.points} batch size{'s' if plural else ''} reached the target after "
            f"{'their' if plural else 'its'} first report)" if tradeoff.points < THIN_DATA else "")
    parts, agreed, reasons = [], [], []
    b_crit = tradeoff.b_crit if tradeoff.b_crit is not None else tradeoff.b_crit_bound
    for name, value, bound, reason, fmt in (("tradeoff B_crit", b_crit, tradeoff.bound, tradeoff.reason, "{:.3g}"),
                                            ("20% rule", overhead.batch_size, overhead.bound, overhead.reason, "{}")):
        text, allowed = f"{name} {bound_text(value, bound, fmt)}", bound_interval(value, bound)
        if value is None or allowed is None:
            parts.append(f"{text} ({'the same reason' if reason in reasons else reason})")
            reasons.append(reason)
        elif anchor is not None:
            agreed.append(agree_within(anchor, allowed))
            parts.append(text + (" agrees within one grid step" if agreed[-1] else
                                 f" differs from {bound_text(turning.batch_size, turning.bound)} by more than one "
                                 f"grid step{thin}"))
        else:
            parts.append(text)
    return (all(agreed) if agreed else None), "Cross-checks: " + "; ".join(parts)


def answer_of(turning: TurningPoint, tradeoff: Tradeoff, overhead: OverheadRule, grid: list[int], *,
            min_batch: int, within: Optional[str] = None) -> Answer:
    """The headline's answer: the turning point, as the spec reads it (``search.turning_point``), is the
    critical batch; the verdict says how sure; the tradeoff and the 20 % rule are cross-checks. ``within``: the
    tolerance in the metric's units ("within 0.01 nats of the best"), which the text states."""
    reading = f"turning point, {READINGS[turning.fit]}"
    next_range = (next_batch_range(turning.batch_size, turning.bound, grid, min_batch=min_batch,
                                   doublings=NEXT_DOUBLINGS)
                  if turning.batch_size is not None and not (turning.bound == LOWER and turning.reason) else None)
    resolved, sure = _sureness(turning)
    agree, cross = _cross_checks(turning, tradeoff, overhead)
    notes = [n for n in (turning.unequal_effort,) if n]
    if turning.batch_size is None:
        text = f"Critical batch: not determined ({turning.reason})"
    else:
        phrase = _bound_phrase(turning, next_range, min_batch)
        said = f"turning point {within}, {READINGS[turning.fit]}" if within else reading
        bits = [said + (f": {phrase}" if phrase else ""), sure, CROSS_CHECKS[agree], EFFORT_MARK if notes else None]
        text = (f"Critical batch: {bound_text(turning.batch_size, turning.bound)} ("
                + "; ".join(b for b in bits if b) + ")")
    return Answer(batch_size=turning.batch_size, bound=turning.bound, reading=reading, resolved=resolved,
                  cross_checks_agree=agree, cross_checks=cross, next_batch_range=next_range, notes=notes, text=text)
