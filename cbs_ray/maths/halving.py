"""Synchronous halving at one rung: the ``bisect`` strategy's choice of alpha.

``candidates`` runs (one per alpha, the prior guess first) each train to ``rung`` samples and wait there; once
every candidate has reported the rung (or ended before it: failed, diverged), the prior guess goes on to the
full budget, the best of the others goes on too only where it leads the prior there by more than ``margin``
(``search.tolerance``: what the turning point counts as a real difference), and the rest stop. Alpha is then the
best of those that completed the budget (``maths.bisection``). Asynchronous ASHA (Li et al. 2020) judges a run
against whatever its rung holds when it arrives, so two candidates that reach a rung together can both go on;
here a loser costs the rung and nothing more.

Why the prior is kept: at the first rung the candidates can stand within noise of each other (on SST-2 at 2048
samples every candidate still predicts about the majority class), and a comparison there picks by noise, or the
run that learns first, not the one that ends best: measured, a pure best-goes-on rule picked alpha 1 on two of
three SST-2 seeds, which ended at 0.55 and 0.68 against the prior's 0.81
(docs/benchmarks-archive.md#issue-38-s2).

A tie among the others goes to the earlier; a metric that is not finite (a diverged run, one that ended before the
rung) leads nothing, nor does one read a milestone later than the others (``whole_rung``). Pure: no Ray.
``methods.scratch.per_batch_asha.PerBatchASHA`` pauses the waiting trials and stops or
resumes them by the verdicts here; a resumed experiment replays each trial's persisted reports, which reach the
same verdicts.
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
"""Train to the full budget (the prior, and a challenger that leads it)."""
STOP = "stop"
"""Stop at the rung."""


@dataclass
class SynchronousHalving:
    """The rung's state: the candidates in the order they were added and each one's metric at the rung."""

    candidates: int
    """How many runs compete (the first ``candidates`` added; the first is the prior guess)."""
    rung: int
    """Where they are compared, in samples (``asha.grace_period_samples``: ASHA's first rung)."""
    mode: str = "max"
    margin: float = 0.0
    """By how much the best challenger must lead the prior at the rung to go on too."""
    relative: bool = False
    """``margin`` a fraction of the prior's metric at the rung (else in the metric's units)."""
    order: list[Hashable] = field(default_factory=list)
    at_rung: dict[Hashable, float] = field(default_factory=dict)
    """Each candidate's metric at its first report at or past the rung (NaN: it ended before, or diverged)."""
    read_at: dict[Hashable, float] = field(default_factory=dict)
    """Where each candidate's rung metric was read (samples). Only candidates read where the rung was reached first
    are compared (``whole_rung``): one whose report at the rung was lost (a SIGKILL between its checkpoint and its
    row) and whose first report past it came a milestone later trained more than the others, and read
    there it led them unfairly."""

    rank: dict[Hashable, float] = field(default_factory=dict)
    """Each candidate's place in the searcher's order where ``add`` was given it (0: the prior)."""

    def add(self, key: Hashable, rank: Optional[float] = None) -> bool:
        """Record ``key`` as a candidate while fewer than ``candidates`` are; whether it is one. With ``rank``
        (its place in the searcher's order: 0 for the prior), ``order`` is kept in that order whatever order the
        candidates are added in: a resumed experiment re-adds its trials latest result first (Tune's
        ``_requeue_restored_trials``), which made another candidate the prior."""
        if key not in self.order and len(self.order) < self.candidates:
            self.order.append(key)
            if rank is not None:
                self.rank[key] = rank
                self.order.sort(key=lambda k: self.rank.get(k, math.inf))  # stable: unranked keep their order
        return key in self.order

    def report(self, key: Hashable, samples: int, metric: Optional[float]) -> str:
        """A candidate's report at ``samples``: TRAIN (below the rung), WAIT, GO_ON or STOP (``verdict``)."""
        if key not in self.order:
            return TRAIN
        if samples >= self.rung and key not in self.at_rung:
            self.at_rung[key] = metric if metric is not None and math.isfinite(metric) else math.nan
            self.read_at[key] = samples
        return self.verdict(key)

    def ended(self, key: Hashable) -> None:
        """A candidate ended (completed, stopped, failed); before the rung it counts as reporting NaN there."""
        if key in self.order and key not in self.at_rung:
            self.at_rung[key] = math.nan

    @property
    def decided(self) -> bool:
        return len(self.order) == self.candidates and len(self.at_rung) == self.candidates

    def going_on(self) -> list[Hashable]:
        """The candidates that train to the full budget, once ``decided`` (else none): the prior, and the best
        other where it leads the prior by more than ``margin``."""
        if not self.decided:
            return []
        sign = 1.0 if self.mode == "max" else -1.0
        value = self.whole_rung()
        prior, others = self.order[0], [k for k in self.order[1:] if math.isfinite(value[k])]
        if not others:
            return [prior]
        best = max(others, key=lambda k: (sign * value[k], -self.order.index(k)))  # a tie: the earlier
        prior_value = value[prior]
        margin = self.margin * abs(prior_value) if self.relative and math.isfinite(prior_value) else self.margin
        leads = not math.isfinite(prior_value) or sign * (self.at_rung[best] - prior_value) > margin
        return [prior, best] if leads else [prior]

    def whole_rung(self) -> dict[Hashable, float]:
        """Each candidate's metric where the rung was reached first (the fewest samples read at), NaN for one
        read later (``read_at``): the comparison reads one rung, the same for all."""
        first = min(self.read_at.values(), default=self.rung)
        return {k: v if self.read_at.get(k, first) == first else math.nan for k, v in self.at_rung.items()}

    def verdict(self, key: Hashable) -> str:
        if key not in self.order:
            return TRAIN
        if not self.decided:
            return WAIT if key in self.at_rung else TRAIN
        return GO_ON if key in self.going_on() else STOP

    def losers(self) -> list[Hashable]:
        """The candidates that stop, once ``decided`` (else none)."""
        going_on = self.going_on()
        return [k for k in self.order if self.decided and k not in going_on]
