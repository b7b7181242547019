"""The ``bisect`` search strategy's policy: which (batch, alpha) to train next, from the finished runs alone.

A from-scratch search spends most of its samples choosing alpha and warmup per batch size, yet alpha is one
number per task (lr = base_lr · (B/B0)^α) and warmup has a rule (``lr_schedule.seed_warmup_fraction``). Here:

1. **Alpha once.** ``alphas`` (the middle of ``search.alpha_range`` first, then its ends, by default) are trained at
   one batch, ``alpha_batch`` (by default the walk's first probe, ``minimax_walk.first_probe``: on 7 batches the
   fifth, on 5 or 6 the fourth; the grid's middle or just above it), together, halved
   synchronously at ASHA's first rung (``maths.halving``, run by ``methods.scratch.per_batch_asha``): each waits
   there until all have reported; the first candidate (the prior guess) goes on, the best other too only where it
   leads by more than the tolerance. The best that completed the budget fixes alpha for the rest (a tie: the earlier
   candidate), and its run is that batch's run. With one candidate there is nothing to choose: no alpha batch, the walk
   starts at once with the smallest batch (and ``base_batch``). The smallest batch starts at once where its LR does not
   depend on alpha (it is ``base_batch``).
2. **Batches by a minimax walk on the monotone reading.** The grid's smallest batch (where the best usually is);
   then, while the monotone turning point over the batches measured (``critical_batch.turning_point``,
   ``monotone=True``) has an unmeasured grid batch between it and the next batch measured above it (or the top
   of the grid, an open end: the largest batch is trained only where the walk reaches it), the grid batch in that
   bracket that makes the fewest full runs in the worst case until the answer and both its neighbours are
   measured, then the fewest on average over the answers the bracket still allows (uniform), a tie to the upper
   middle (``maths.minimax_walk``, which says why; no task's answer is an input to it); last, the grid neighbour
   just below the turning point, so that the answer and both its neighbours are measured. Each batch trains
   once, to the full budget. (Before this walk the probe was always the bracket's upper middle and the
   alpha batch the grid's middle: on 7 batches five runs for two answers, now for one.)

A failed or diverged run counts as a metric of NaN (``turning_point`` takes it as outside the tolerance), so the
walk goes on below it. Pure: no Ray; ``methods.scratch.bisection_search.BisectionSearcher`` feeds it Tune's results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from cbs_ray.maths.critical_batch import turning_point
from cbs_ray.maths.minimax_walk import first_probe, next_probe

__all__ = ["Bisection", "Run", "middle_of", "middle_first"]


@dataclass(frozen=True)
class Run:
    """One run to train: its batch and alpha (its warmup follows the batch by the seed rule)."""

    batch: int
    alpha: float


def middle_of(grid: Sequence[int], low: int, high: int) -> Optional[int]:
    """The grid batch halfway (by index, i.e. in log2 on a grid of powers of two; the upper of two middles)
    strictly between ``low`` and ``high``; None when they are neighbours in the grid."""
    i, j = grid.index(low), grid.index(high)
    return None if j - i < 2 else grid[(i + j + 1) // 2]


def middle_first(values: Sequence[float]) -> list[float]:
    """``values`` (ascending) reordered from the middle outwards, the lower side before the upper at each distance
    (the lower of two middles first): [0.5, 0.625, 0.75] → [0.625, 0.5, 0.75]."""
    centre = (len(values) - 1) / 2
    return sorted(values, key=lambda v: (abs(values.index(v) - centre), values.index(v) > centre))


@dataclass
class Bisection:
    """The policy's state: the runs proposed, and the metric at the full budget of each that ended.

    ``next_runs()`` lists what may start now (nothing while a decision waits on a running run), ``ended(run,
    metric)`` records a run's end (``metric`` None: stopped early by ASHA, not completed), ``finished`` says
    that no run is left to propose."""

    grid: list[int]
    alphas: list[float]
    mode: str = "max"
    tolerance: float = 0.01
    relative: bool = True
    """``tolerance`` a fraction of the best (else absolute, in the metric's units: nats for a loss)."""
    base_batch: int = 0
    """The batch whose LR does not depend on alpha (``training.base_batch``): trained at once if in the grid."""
    alpha_batch: Optional[int] = None
    """Where alpha is chosen; default the walk's first probe (``minimax_walk.first_probe``, trained together with
    the smallest and the base batch)."""
    proposed: list[Run] = field(default_factory=list)
    results: dict[Run, Optional[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.grid = sorted(self.grid)
        if self.alpha_batch is None:
            self.alpha_batch = self.grid[first_probe(len(self.grid), self.start_indices())]

    # ---- what is known ----------------------------------------------------------------------------
    @property
    def alpha(self) -> Optional[float]:
        """The chosen alpha, once every candidate at ``alpha_batch`` has ended: the best that completed (the
        first candidate when none did: the search goes on and the report shows what happened)."""
        if len(self.alphas) == 1:  # nothing to choose
            return self.alphas[0]
        candidates = [Run(self.alpha_choice_batch(), a) for a in self.alphas]
        if any(c not in self.results for c in candidates):
            return None
        completed = {c: m for c in candidates if (m := self.results[c]) is not None and math.isfinite(m)}
        if not completed:
            return self.alphas[0]
        sign = 1.0 if self.mode == "max" else -1.0
        best = max(sign * m for m in completed.values())
        return next(c.alpha for c, m in completed.items() if sign * m == best)  # a tie: the first candidate

    def measured(self) -> dict[int, float]:
        """Each batch's metric at the full budget at the chosen alpha (NaN where its run did not complete)."""
        alpha = self.alpha
        if alpha is None:
            return {}
        out: dict[int, float] = {}
        for run, metric in self.results.items():
            if run.alpha == alpha or (run.batch == self.base_batch and run.batch != self.alpha_batch):
                out[run.batch] = metric if metric is not None and math.isfinite(metric) else math.nan
        return out

    @property
    def finished(self) -> bool:
        return self.alpha is not None and not self._pending() and not self._wanted()

    def reading(self) -> Optional[int]:
        """The monotone turning point over the batches measured so far (None before any finite metric)."""
        measured = self.measured()
        if not any(math.isfinite(m) for m in measured.values()):
            return None
        batches = sorted(measured)
        return turning_point(batches, [measured[b] for b in batches], mode=self.mode, tolerance=self.tolerance,
                             relative=self.relative, monotone=True)

    # ---- what to do next --------------------------------------------------------------------------
    def next_runs(self) -> list[Run]:
        """The runs that may start now, in order; each is recorded as proposed."""
        runs = []
        if len(self.alphas) == 1:  # no alpha to choose: the smallest and the base batch, then the walk
            first = [Run(self.grid[i], self.alphas[0]) for i in self.start_indices()]
            runs += first if not self.proposed else [Run(b, self.alphas[0]) for b in self._wanted()]
        elif not any(r.batch == self.alpha_batch for r in self.proposed):
            runs += [Run(self.alpha_choice_batch(), a) for a in self.alphas]
            if self.base_batch in self.grid and self.base_batch != self.alpha_batch:
                runs.append(Run(self.base_batch, self.alphas[0]))  # its LR is the same at every alpha
        elif self.alpha is not None:
            runs += [Run(b, self.alpha) for b in self._wanted()]
        self.proposed += runs
        return runs

    def ended(self, run: Run, metric: Optional[float]) -> None:
        self.results[run] = metric

    def _pending(self) -> list[Run]:
        return [r for r in self.proposed if r not in self.results]

    def _has(self, batch: int) -> bool:
        return any(r.batch == batch for r in self.proposed if r.alpha == self.alpha or r.batch == self.base_batch)

    def _wanted(self) -> list[int]:
        """The batches to train next at the chosen alpha (none while a run whose result decides is running)."""
        if self.alpha is None:
            return []
        if not self._has(self.grid[0]):
            return [self.grid[0]]
        if self._pending():
            return []
        measured = self.measured()
        reading = self.reading()
        if reading is None:  # nothing completed: the walk has no start; stop here and let the report say so
            return []
        above = [b for b in sorted(measured) if b > reading]
        i = self.grid.index(reading)
        j = self.grid.index(above[0]) if above else len(self.grid)  # the top of the grid: an open end
        probe = next_probe(len(self.grid), i, j, [self.grid.index(b) for b in measured])
        return [] if probe is None else [self.grid[probe]]

    def start_indices(self) -> list[int]:
        """The grid indices trained before any result is known, the alpha batch aside: the smallest batch, and
        the base batch where it is in the grid."""
        return list(dict.fromkeys([0] + ([self.grid.index(self.base_batch)] if self.base_batch in self.grid else [])))

    def alpha_choice_batch(self) -> int:
        """The batch where alpha is chosen: ``alpha_batch``, which ``__post_init__`` sets where it was not given."""
        assert self.alpha_batch is not None
        return self.alpha_batch
