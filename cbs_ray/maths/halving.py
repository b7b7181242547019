"""Synchronous successive halving: the ``bisect`` strategy's choice of alpha.

``candidates`` runs (one per alpha, the prior guess first) each train to ``rung`` samples and wait there; once
every candidate has reported the rung (or ended before it: failed, diverged), those behind the best stop and the
best goes on alone to the full budget. Asynchronous ASHA (Li et al. 2020) judges a run against whatever its rung
holds when it arrives, so two candidates that reach a rung together can both go on; here a loser costs the
samples to its last comparison and nothing more, and the winner's run is the batch's full run.

**A tie is not a decision.** Where several candidates share the best metric exactly (early on, every candidate
of a classifier can still predict the majority class: the same accuracy on the same examples), those tied go on
together to the next comparison, one ``rung`` further (``2·rung``, ``3·rung``, …), wait there again, and so on
until one leads alone; those behind the best stop at each comparison. A metric that is not finite (a diverged
run, one that ended before the comparison) is behind any finite one; where none is finite the first candidate
goes on. Still tied at the full budget, they all complete, and ``maths.bisection`` reads their full runs.

Pure: no Ray. ``tune.per_batch_asha.PerBatchASHA`` pauses the waiting trials and stops or resumes them by the
verdicts here; a resumed experiment replays each trial's persisted reports, which reach the same verdicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable, Optional

__all__ = ["SynchronousHalving", "TRAIN", "WAIT", "GO_ON", "STOP"]

TRAIN = "train"
"""Below the next comparison, or not a candidate: train on."""
WAIT = "wait"
"""At the comparison while another candidate still in the running has not reported it: hold (Tune: pause)."""
GO_ON = "go on"
"""The best alone: train to the full budget."""
STOP = "stop"
"""Behind the best at a comparison (or ended): stop."""


@dataclass
class SynchronousHalving:
    """The comparisons' state: the candidates in the order they were added, each one's metric at each
    comparison it reached, those out of the running, and the winner once one leads alone."""

    candidates: int
    """How many runs compete (the first ``candidates`` added)."""
    rung: int
    """The first comparison, in samples (``asha.grace_period_samples``: ASHA's first rung); comparison ``k`` is at
    ``(k + 1) · rung``."""
    mode: str = "max"
    order: list = field(default_factory=list)
    reported: dict = field(default_factory=dict)
    """candidate -> {comparison: its metric at its first report at or past it (NaN: not finite)}."""
    out: dict = field(default_factory=dict)
    """candidate -> the comparison at which it stopped, or ended (failed, diverged, stopped from outside)."""
    comparison: int = 0
    """The comparison under way (0: the first rung)."""
    winner: Optional[Hashable] = None

    def add(self, key: Hashable) -> bool:
        """Record ``key`` as a candidate while fewer than ``candidates`` are; whether it is one."""
        if key not in self.order and len(self.order) < self.candidates:
            self.order.append(key)
            self.reported[key] = {}
        return key in self.order

    def report(self, key: Hashable, samples: int, metric: Optional[float]) -> str:
        """A candidate's report at ``samples`` (its metric there); its verdict (TRAIN, WAIT, GO_ON or STOP)."""
        if key not in self.order:
            return TRAIN
        value = metric if metric is not None and math.isfinite(metric) else math.nan
        for k in range(samples // self.rung):  # every comparison at or below ``samples`` not yet reported
            self.reported[key].setdefault(k, value)
        self._compare()
        return self.verdict(key)

    def ended(self, key: Hashable) -> None:
        """A candidate ended (completed, stopped, failed): out of the running unless it is the winner."""
        if key in self.order and key not in self.out and key != self.winner:
            self.out[key] = self.comparison
            self._compare()

    @property
    def decided(self) -> bool:
        return self.winner is not None

    def running(self) -> list:
        """The candidates still competing, in order."""
        return [k for k in self.order if k not in self.out]

    def losers(self) -> list:
        """The candidates out of the running so far (stopped behind the best, or ended)."""
        return [k for k in self.order if k in self.out]

    def verdict(self, key: Hashable) -> str:
        if key not in self.order:
            return TRAIN
        if key in self.out:
            return STOP
        if key == self.winner:
            return GO_ON
        return WAIT if self.comparison in self.reported[key] else TRAIN

    def _compare(self) -> None:
        """Settle every comparison that all candidates still in the running have reported."""
        while self.winner is None and len(self.order) == self.candidates:
            running = self.running()
            if not running:  # every candidate ended before a winner: the first is the choice
                self.winner = self.order[0]
                return
            if any(self.comparison not in self.reported[k] for k in running):
                return
            values = {k: self.reported[k][self.comparison] for k in running}
            finite = [v for v in values.values() if math.isfinite(v)]
            best = (max if self.mode == "max" else min)(finite) if finite else None
            leaders = [k for k in running if values[k] == best] or running[:1]
            for k in running:
                if k not in leaders:
                    self.out[k] = self.comparison
            if len(leaders) == 1:
                self.winner = leaders[0]
            else:
                self.comparison += 1
