"""Where a ladder run stops (``search.method: ladder``; ``methods.ladder.settings``): not at a fixed fraction for every
batch, which right-censors the larger batches (a batch B needs E(B) = E_min·(1 + B/B_crit) samples to reach the
smallest batch's loss, more than the smallest batch's D_j), but once the run has reached its target or its cap.

The smallest batch (the reference) trains to where its loss is the target (the fraction; D when validating); its
seed-mean loss there is the target. Every other batch trains until all its seeds have reported a loss at or below
the target, or to the cap. ``LadderStop`` decides this report by report as the runs go
(``methods.ladder.search`` asks it);
``ladder_cuts`` finds, after the fact, where each batch's runs would have stopped for the ladder's own target, so
that a validated experiment's ladder reads exactly what a ladder alone would have trained. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional

import numpy as np

__all__ = ["LadderStop", "ladder_cuts", "samples_trained"]


class LadderStop:
    """Report by report: whether a ladder run has trained far enough (``observe``)."""

    def __init__(self, *, reference_batch: int, reference_stop: int, seeds: int):
        self.reference_batch, self.reference_stop, self.seeds = reference_batch, reference_stop, seeds
        self.reference_values: dict = {}
        """seed → the reference's reading at ``reference_stop``."""
        self.reached: dict = {}
        """batch → the seeds that have reported a reading at or below the target."""

    @property
    def target(self) -> Optional[float]:
        """The reference's seed-mean reading at ``reference_stop``, once every seed has reported there."""
        if len(self.reference_values) < self.seeds:
            return None
        return float(np.mean(list(self.reference_values.values())))

    def observe(self, batch: int, seed: int, samples: int, value: float) -> bool:
        """Record one report (the reading ``value`` of run (``batch``, ``seed``) at ``samples``); True when the run
        should stop: the reference at its stop, any other run once its batch's every seed has reached the target.
        (A run's plan stops it at the cap regardless.)"""
        if batch == self.reference_batch:
            if samples == self.reference_stop:
                self.reference_values[seed] = value
            return samples >= self.reference_stop
        target = self.target
        if target is not None and math.isfinite(value) and value <= target:
            self.reached.setdefault(batch, set()).add(seed)
        return len(self.reached.get(batch, ())) >= self.seeds


def _first_at_or_below(run: Sequence[tuple[float, float]], target: float) -> Optional[float]:
    return next((s for s, v in sorted(run) if math.isfinite(v) and v <= target), None)


def ladder_cuts(curves: dict, *, reference_stop: float, cap: float) -> dict:
    """Per batch, where a ladder alone would have stopped its runs (``LadderStop``'s rule after the fact): the
    reference (smallest batch) at ``reference_stop``; every other batch at the latest of its seeds' first evaluation
    at or below the target (the reference's seed-mean reading at ``reference_stop``), or at ``cap`` where a seed
    never got there by it. ``curves``: batch → runs of (samples, reading), as ``maths.ladder.Curves``."""
    reference = min(curves)
    at_stop = [v for run in curves[reference] for s, v in run if s == reference_stop]
    target = float(np.mean(at_stop)) if len(at_stop) == len(curves[reference]) and at_stop else math.nan
    cuts = {reference: float(reference_stop)}
    for batch, runs in curves.items():
        if batch == reference:
            continue
        firsts = [_first_at_or_below([(s, v) for s, v in run if s <= cap], target) for run in runs]
        reached = [f for f in firsts if f is not None]
        cuts[batch] = float(cap) if len(reached) < len(firsts) or math.isnan(target) else float(max(reached))
    return cuts


def samples_trained(curves: dict, cuts: Optional[dict] = None) -> int:
    """Samples the runs trained: each run's last evaluation, or with ``cuts`` the least of that and its batch's cut."""
    total = 0.0
    for batch, runs in curves.items():
        for run in runs:
            last = max((s for s, _ in run), default=0.0)
            total += min(last, cuts[batch]) if cuts is not None else last
    return int(total)
