"""Synchronous successive halving with one rung: the ``bisect`` strategy's choice of alpha.

``candidates`` runs (one per alpha, the prior guess first) each train to ``rung`` samples and wait there; once
every candidate has reported the rung (or ended before it: failed, diverged), the best goes on to the full
budget and the others stop. Asynchronous ASHA (Li et al. 2020) judges a run against whatever its rung holds
when it arrives, so two candidates that reach a rung together can both go on; here the losers cost the rung
and nothing more, ``(candidates - 1) · rung`` samples in all, and the winner's run is the batch's full run.

A tie goes to the earlier candidate (the prior guess first): where the data cannot tell the candidates apart
the prior stands. (On SST-2 every candidate still predicts the majority class at the first rung; deferring the tie
to the next comparison was measured to pick the candidate that left it first, alpha 1, which ended at 0.68 against
the prior's 0.81: BENCHMARKS.md, issue 38.) A metric that is not finite (a diverged run, one that ended before
the rung) loses to any finite one; when none is finite the first candidate goes on.

Pure: no Ray. ``tune.per_batch_asha.PerBatchASHA`` pauses the waiting trials and stops or resumes them by the
verdicts here; a resumed experiment replays each trial's persisted reports, which reach the same verdicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable, Optional

__all__ = ["SynchronousHalving", "TRAIN", "WAIT", "GO_ON", "STOP"]

TRAIN = "train"
"""Below the rung, or not a candidate: train on."""
WAIT = "wait"
"""At the rung while another candidate has not reported it: hold (Tune: pause)."""
GO_ON = "go on"
"""The best at the rung: train to the full budget."""
STOP = "stop"
"""Not the best at the rung: stop."""


@dataclass
class SynchronousHalving:
    """The rung's state: the candidates in the order they were added and each one's metric at the rung."""

    candidates: int
    """How many runs compete (the first ``candidates`` added)."""
    rung: int
    """Where they are compared, in samples (``asha.grace_period_samples``: ASHA's first rung)."""
    mode: str = "max"
    order: list = field(default_factory=list)
    at_rung: dict = field(default_factory=dict)
    """Each candidate's metric at its first report at or past the rung (NaN: it ended before, or diverged)."""

    def add(self, key: Hashable) -> bool:
        """Record ``key`` as a candidate while fewer than ``candidates`` are; whether it is one."""
        if key not in self.order and len(self.order) < self.candidates:
            self.order.append(key)
        return key in self.order

    def report(self, key: Hashable, samples: int, metric: Optional[float]) -> str:
        """A candidate's report at ``samples``: TRAIN (below the rung), WAIT, GO_ON or STOP (``verdict``)."""
        if key not in self.order:
            return TRAIN
        if samples >= self.rung and key not in self.at_rung:
            self.at_rung[key] = metric if metric is not None and math.isfinite(metric) else math.nan
        return self.verdict(key)

    def ended(self, key: Hashable) -> None:
        """A candidate ended (completed, stopped, failed); before the rung it counts as reporting NaN there."""
        if key in self.order and key not in self.at_rung:
            self.at_rung[key] = math.nan

    @property
    def decided(self) -> bool:
        return len(self.order) == self.candidates and len(self.at_rung) == self.candidates

    @property
    def winner(self) -> Optional[Hashable]:
        """The candidate that goes on, once ``decided``."""
        if not self.decided:
            return None
        sign = 1.0 if self.mode == "max" else -1.0
        finite = [k for k in self.order if math.isfinite(self.at_rung[k])]
        if not finite:
            return self.order[0]
        return max(finite, key=lambda k: (sign * self.at_rung[k], -self.order.index(k)))  # a tie: the earlier

    def verdict(self, key: Hashable) -> str:
        if key not in self.order:
            return TRAIN
        if not self.decided:
            return WAIT if key in self.at_rung else TRAIN
        return GO_ON if key == self.winner else STOP

    def losers(self) -> list:
        """The candidates that stop, once ``decided`` (else none)."""
        return [k for k in self.order if self.decided and k != self.winner]
