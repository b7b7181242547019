"""ASHA within each batch size: a thin router over Ray's own ``AsyncHyperBandScheduler``.

At equal samples, a large batch has taken fewer optimizer steps and always looks worse early, so plain
ASHA across all trials stops large batches before they finish and the turning point is never observed.
Here every batch size gets its own ASHA bracket (Li et al. 2020, "A System for Massively Parallel
Hyperparameter Tuning"): a trial is compared only with trials of the same batch size. The first trial of
each batch size the scheduler is given (the search's seeded trial: seeds are suggested first, and a
resumed experiment re-adds its trials in their original order) is never stopped early, so every batch
size has at least one trial at the full budget. ASHA alone would not promise that: a concurrent trial of
the same batch size can reach a rung first and set its cutoff.

A batch given in ``halving`` (the ``bisect`` strategy's alpha batch) is not ASHA's: its first trials are
candidates of one synchronous halving (``maths.halving``): each pauses at the first rung until every candidate
has reported there; then the first (the prior guess) goes on, the best other too where it leads by more than
``halving_margin``, and the rest stop.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Dict, Hashable, Optional

from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler, TrialScheduler

from cbs_ray.maths.halving import GO_ON, STOP, WAIT, SynchronousHalving
from cbs_ray.ray_internals import stop_paused_trial, trial_storage

__all__ = ["PerBatchASHA", "persisted_results"]


def persisted_results(trial) -> list[dict]:
    """The results a trial has already reported, from the ``result.json`` Tune keeps in its directory
    (one JSON object per line); [] for a new trial, or when none can be read."""
    if getattr(trial, "storage", None) is None or not getattr(trial, "has_reported_at_least_once", False):
        return []
    fs, trial_dir = trial_storage(trial)
    try:
        with fs.open_input_stream(f"{trial_dir}/result.json") as f:
            lines = f.readall().decode().splitlines()
        return [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError):
        return []


class PerBatchASHA(FIFOScheduler):
    """One ``AsyncHyperBandScheduler`` per batch size; trials are routed by ``batch_of(trial.config)``.

    Args:
        batch_of: maps a trial's config to its batch size.
        time_attr, max_t, grace_period, reduction_factor: as for ``AsyncHyperBandScheduler``
            (here in samples: ``samples_seen``, the budget and the grace period).
        halving: {batch size: candidates}: that batch's first ``candidates`` trials are halved synchronously at
            the first rung (``grace_period``) instead (the ``bisect`` strategy's alpha batch; none where the
            rung is not below ``max_t``).
        halving_margin: by how much a challenger must lead the first candidate at the rung to go on too
            (``halving_relative``: a fraction of the first candidate's metric there).
        halving_rank: a candidate's place in the searcher's order from its config (0: the prior), so that a
            resumed experiment, whose trials Tune re-adds latest result first, keeps the same prior.
    """

    def __init__(self, batch_of: Callable[[dict], int], *, time_attr: str, max_t: int, grace_period: int,
                 reduction_factor: float, metric: str | None = None, mode: str | None = None,
                 halving: Dict[int, int] | None = None, halving_margin: float = 0.0, halving_relative: bool = False,
                 halving_rank: Optional[Callable[[dict], float]] = None):
        super().__init__()
        self._batch_of = batch_of
        self._asha_args: dict[str, Any] = dict(time_attr=time_attr, max_t=max_t, grace_period=grace_period,
                                                 reduction_factor=reduction_factor)
        self._metric, self._mode = metric, mode
        self._by_batch: Dict[int, AsyncHyperBandScheduler] = {}
        self._trial_batch: Dict[str, int] = {}
        self._first_of_batch: Dict[int, str] = {}
        self._halving_candidates = dict(halving or {}) if grace_period < max_t else {}
        self._halving: Dict[int, SynchronousHalving] = {}
        self._candidates: Dict[Hashable, Any] = {}  # trial id -> trial, for each halving candidate
        self._halving_margin, self._halving_relative = halving_margin, halving_relative
        self._halving_rank = halving_rank

    @property
    def metric(self):
        return self._metric

    def set_search_properties(self, metric, mode, **spec) -> bool:
        if (self._metric and metric) or (self._mode and mode):
            return False
        self._metric = self._metric or metric
        self._mode = self._mode or mode
        return True

    def bracket(self, batch_size: int) -> AsyncHyperBandScheduler:
        if batch_size not in self._by_batch:
            self._by_batch[batch_size] = AsyncHyperBandScheduler(
                metric=self._metric, mode=self._mode, brackets=1, **self._asha_args)
        return self._by_batch[batch_size]

    def halving(self, batch_size: int) -> SynchronousHalving:
        """The synchronous halving of a batch given in ``halving``."""
        if batch_size not in self._halving:
            self._halving[batch_size] = SynchronousHalving(
                self._halving_candidates[batch_size], self._asha_args["grace_period"], mode=self._mode or "max",
                margin=self._halving_margin, relative=self._halving_relative)
        return self._halving[batch_size]

    def _for(self, trial) -> AsyncHyperBandScheduler:
        return self._by_batch[self._trial_batch[trial.trial_id]]

    def on_trial_add(self, tune_controller, trial):
        batch = self._batch_of(trial.config)
        self._trial_batch[trial.trial_id] = batch
        rank = self._halving_rank(trial.config) if self._halving_rank is not None else None
        if batch in self._halving_candidates and self.halving(batch).add(trial.trial_id, rank):
            self._add_candidate(tune_controller, trial, batch)
            return
        self._first_of_batch.setdefault(batch, trial.trial_id)
        bracket = self.bracket(batch)
        bracket.on_trial_add(tune_controller, trial)
        # A trial restored by --resume: Tune does not give its scheduler state back, so the rungs would
        # start empty and the next trials of this batch size would run unopposed. Its persisted results,
        # replayed in order, refill them (the decisions they return are past and ignored).
        for past in persisted_results(trial):
            bracket.on_trial_result(tune_controller, trial, past)
        if getattr(trial, "status", None) in ("TERMINATED", "ERROR"):  # finished: will report nothing more
            self.on_trial_remove(tune_controller, trial)

    def _add_candidate(self, tune_controller, trial, batch: int) -> None:
        """A halving candidate; one restored by --resume replays its persisted reports (the verdicts are
        reached again; a waiting or losing trial that Tune restarts meets its verdict at its next report)."""
        self._candidates[trial.trial_id] = trial
        halving = self.halving(batch)
        for past in persisted_results(trial):
            halving.report(trial.trial_id, past.get(self._asha_args["time_attr"], 0), self._metric_in(past))
        if getattr(trial, "status", None) in ("TERMINATED", "ERROR"):
            self.on_trial_remove(tune_controller, trial)

    def _metric_in(self, result: dict) -> float:
        value = result.get(self._metric)
        return math.nan if result.get("diverged") or value is None else float(value)

    def _halve(self, tune_controller, trial, result) -> str:
        """A halving candidate's report: train on below the rung, wait (pause) there, then go on or stop."""
        batch = self._trial_batch[trial.trial_id]
        samples = result.get(self._asha_args["time_attr"], 0)
        verdict = self.halving(batch).report(trial.trial_id, samples, self._metric_in(result))
        self._stop_losers(tune_controller, batch)
        if samples >= self._asha_args["max_t"]:  # its last report: it completes whatever the verdict
            return TrialScheduler.CONTINUE
        return {WAIT: TrialScheduler.PAUSE, STOP: TrialScheduler.STOP}.get(verdict, TrialScheduler.CONTINUE)

    def _stop_losers(self, tune_controller, batch: int, *, but: Optional[str] = None) -> None:
        """Stop the losers that wait paused. One still saving to pause, or whose pause Tune has queued but not
        begun, is stopped here once paused (``choose_trial_to_run`` calls this at every step of Tune's loop):
        Tune pauses a trial stopped while it saves all the same; one running stops at its own report. ``but``:
        the trial Tune is stopping now (its ``stop_trial`` calls ``on_trial_remove`` while the trial is still
        PAUSED; stopping it again from there ended it twice: two "stopped early" lines, two searcher ends)."""
        for key in self.halving(batch).losers():
            loser = self._candidates.get(key)
            if loser is not None and key != but and loser.status == "PAUSED":
                stop_paused_trial(tune_controller, loser)

    def choose_trial_to_run(self, tune_controller):
        """FIFO's choice, except that a paused halving candidate resumes only once it goes on (a paused loser
        is stopped here)."""
        for batch in self._halving:
            self._stop_losers(tune_controller, batch)
        for trial in tune_controller.get_trials():
            if trial.status == "PENDING":
                return trial
        for trial in tune_controller.get_trials():
            if trial.status == "PAUSED" and self._may_resume(trial):
                return trial
        return None

    def _may_resume(self, trial) -> bool:
        batch = self._batch_of(trial.config)
        if trial.trial_id not in self._candidates or batch not in self._halving:
            return True
        return self._halving[batch].verdict(trial.trial_id) == GO_ON

    def on_trial_result(self, tune_controller, trial, result) -> str:
        if trial.trial_id not in self._trial_batch:
            return TrialScheduler.CONTINUE
        if trial.trial_id in self._candidates:
            return self._halve(tune_controller, trial, result)
        decision = self._for(trial).on_trial_result(tune_controller, trial, result)  # records the rung either way
        budget_left = result.get(self._asha_args["time_attr"], 0) < self._asha_args["max_t"]
        if decision == TrialScheduler.STOP and budget_left and self.is_first_of_its_batch(trial):
            return TrialScheduler.CONTINUE
        return decision

    def is_first_of_its_batch(self, trial) -> bool:
        """Whether ``trial`` is its batch size's first (seeded) trial, which runs to the full budget."""
        batch = self._trial_batch.get(trial.trial_id)
        return batch is not None and self._first_of_batch.get(batch) == trial.trial_id

    def on_trial_complete(self, tune_controller, trial, result):
        if trial.trial_id in self._candidates:
            self._candidate_ended(tune_controller, trial)
        elif trial.trial_id in self._trial_batch:
            self._for(trial).on_trial_complete(tune_controller, trial, result)
            del self._trial_batch[trial.trial_id]

    def on_trial_remove(self, tune_controller, trial):
        if trial.trial_id in self._candidates:
            self._candidate_ended(tune_controller, trial)
        elif trial.trial_id in self._trial_batch:
            self._for(trial).on_trial_remove(tune_controller, trial)
            del self._trial_batch[trial.trial_id]

    def _candidate_ended(self, tune_controller, trial) -> None:
        """A candidate that ended before the rung counts as NaN there; the last to end may decide."""
        batch = self._trial_batch.pop(trial.trial_id, None)
        if batch is not None:
            self.halving(batch).ended(trial.trial_id)
            self._stop_losers(tune_controller, batch, but=trial.trial_id)

    def on_trial_error(self, tune_controller, trial):
        self.on_trial_remove(tune_controller, trial)

    def debug_string(self) -> str:
        lines = [f"B={b}: {s.debug_string()}" for b, s in sorted(self._by_batch.items())]
        return "\n".join(lines + [f"B={b}: synchronous halving of {h.candidates} at {h.rung} samples, "
                                   f"{len(h.at_rung)} at the rung" for b, h in sorted(self._halving.items())])
