"""Whether CBS(t) rises over training: a decrease is *within the noise* when every batch in between
was a close call at one end (``trend``); and the trunk's gradient noise scale over training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pandas as pd

from cbs_ray.analysis.bounds import bound_text
from cbs_ray.maths.critical_batch import LOWER, UPPER
from cbs_ray.methods.branch.reading_points import CbsPoint, as_dict, is_finite_number, last_by_samples, rows_of_role
from cbs_ray.records.columns import Column

__all__ = ["Decrease", "Trend", "trend", "b_simple_over_training"]


# ---- the shape ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decrease:
    """CBS(t) lower at a later checkpoint than at an earlier one."""

    from_samples: int
    from_batch: int
    to_samples: int
    to_batch: int
    within_noise: bool
    """Every batch in (to_batch, from_batch] was a close comparison at one of the two checkpoints."""

    def to_dict(self) -> dict:
        return as_dict(self)


@dataclass(frozen=True)
class Trend:
    """The shape of CBS(t) (issue target: it does not decrease within its noise)."""

    verdict: str
    """``increasing``, ``flat``, ``decreases_within_noise``, ``decreasing`` or ``undetermined``."""
    text: str
    holds: Optional[bool]
    """Whether CBS(t) does not decrease beyond its noise (None: fewer than two determined points)."""
    decreases: tuple[Decrease, ...] = ()

    def to_dict(self) -> dict:
        return as_dict(self)


def _unit(samples: int, tokens_per_sample: Optional[int]) -> str:
    return f"{samples * tokens_per_sample} tokens" if tokens_per_sample else f"{samples} samples"


def _decrease_within_noise(earlier: CbsPoint, later: CbsPoint) -> bool:
    between = sorted({o.batch_size for o in (*earlier.branches, *later.branches)
                      if later.batch_size < o.batch_size <= earlier.batch_size})
    if not between:
        return False

    def close(point: CbsPoint, batch: int) -> bool:
        o = point.outcome(batch)
        return bool(o and o.close)

    return all(close(earlier, b) or close(later, b) for b in between)


def trend(points: Sequence[CbsPoint], *, tokens_per_sample: Optional[int] = None) -> Trend:
    """Whether CBS(t) grows, stays flat or decreases over the checkpoints, in one sentence. Each point is
    compared with the highest earlier one; a lower later point is a decrease, reported with its batches and
    checkpoints and whether it lies within the noise (module docstring). Nothing is smoothed."""
    pts = sorted((p for p in points if p.trunk_loss is not None and p.branches and p.resolvable),
                 key=lambda p: p.samples_seen)
    if len(pts) < 2:
        unresolved = sum(1 for p in points if p.trunk_loss is not None and not p.resolvable)
        return Trend("undetermined", f"CBS(t) measured at {len(pts)} resolvable checkpoint(s)"
                     + (f" ({unresolved} not resolvable)" if unresolved else "") + ": no trend to read", None)
    decreases, peak = [], pts[0]
    for p in pts[1:]:
        if p.batch_size < peak.batch_size:
            decreases.append(Decrease(peak.samples_seen, peak.batch_size, p.samples_seen, p.batch_size,
                                      _decrease_within_noise(peak, p)))
        if p.batch_size > peak.batch_size:
            peak = p
    u = lambda s: _unit(s, tokens_per_sample)  # noqa: E731
    path = " → ".join(bound_text(p.batch_size, p.bound) for p in pts)
    beyond = [d for d in decreases if not d.within_noise]
    if beyond:
        text = "; ".join(f"CBS(t) decreases from {d.from_batch} at {u(d.from_samples)} to {d.to_batch} at "
                         f"{u(d.to_samples)}, beyond its noise" for d in beyond)
        return Trend("decreasing", f"{text} ({path})", False, tuple(decreases))
    if decreases:
        text = "; ".join(f"CBS(t) dips from {d.from_batch} at {u(d.from_samples)} to {d.to_batch} at "
                         f"{u(d.to_samples)}, within its noise (every batch in between was a close call)"
                         for d in decreases)
        return Trend("decreases_within_noise", f"{text} ({path})", True, tuple(decreases))
    if pts[-1].batch_size > pts[0].batch_size:
        first, last = pts[0], pts[-1]
        return Trend("increasing", f"CBS(t) does not decrease: it grows from "
                     f"{bound_text(first.batch_size, first.bound)} at {u(first.samples_seen)} to "
                     f"{bound_text(last.batch_size, last.bound)} at {u(last.samples_seen)} ({path})", True)
    edge = {LOWER: ": the largest branch batch recovers at every checkpoint, branch at larger batches to see "
                   "where it stops", UPPER: ": even the smallest branch batch fails at every checkpoint"}
    same_edge = all(p.bound == pts[0].bound for p in pts)
    return Trend("flat", f"CBS(t) is flat at {path.split(' → ')[0]} over the checkpoints"
                 + (edge.get(pts[0].bound or "", "") if same_edge else "") + f" ({path})", True)


# ---- the trunk's noise scale ---------------------------------------------------------------------------

def b_simple_over_training(history: pd.DataFrame) -> list[list[float]]:
    """The trunk's B_simple (McCandlish et al. 2018) per report: ``[samples_seen, b_simple]`` pairs, NaN
    (not measurable yet) left out."""
    trunk = rows_of_role(history, "trunk")
    if trunk.empty or Column.b_simple not in trunk:
        return []
    trunk = last_by_samples(trunk.sort_values(Column.samples_seen, kind="stable"))
    return [[int(r[Column.samples_seen]), float(r[Column.b_simple])] for _, r in trunk.iterrows()
            if is_finite_number(r[Column.b_simple]) and float(r[Column.b_simple]) > 0]
