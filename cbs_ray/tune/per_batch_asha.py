"""ASHA within each batch size: a thin router over Ray's own ``AsyncHyperBandScheduler``.

At equal samples, a large batch has taken fewer optimizer steps and always looks worse early, so plain
ASHA across all trials stops large batches before they finish and the turning point is never observed.
Here every batch size gets its own ASHA bracket (Li et al. 2020, "A System for Massively Parallel
Hyperparameter Tuning"): a trial is compared only with trials of the same batch size. The first trial of
each batch size the scheduler is given (the search's seeded trial: seeds are suggested first, and a
resumed experiment re-adds its trials in their original order) is never stopped early, so every batch
size has at least one trial at the full budget. ASHA alone would not promise that: a concurrent trial of
the same batch size can reach a rung first and set its cutoff.
"""

from __future__ import annotations

import json
from typing import Callable, Dict

from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler, TrialScheduler

from cbs_ray.ray_internals import trial_storage

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
        reduction_factors: a batch size's own reduction factor where it differs (the ``bisect`` strategy's
            alpha batch: its candidates' count, so that only the best goes on from each rung).
    """

    def __init__(self, batch_of: Callable[[dict], int], *, time_attr: str, max_t: int, grace_period: int,
                 reduction_factor: float, metric: str | None = None, mode: str | None = None,
                 reduction_factors: Dict[int, float] | None = None):
        super().__init__()
        self._batch_of = batch_of
        self._asha_args = dict(time_attr=time_attr, max_t=max_t, grace_period=grace_period,
                               reduction_factor=reduction_factor)
        self._reduction_factors = dict(reduction_factors or {})
        self._metric, self._mode = metric, mode
        self._by_batch: Dict[int, AsyncHyperBandScheduler] = {}
        self._trial_batch: Dict[str, int] = {}
        self._first_of_batch: Dict[int, str] = {}

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
            args = {**self._asha_args, "reduction_factor": self._reduction_factors.get(
                batch_size, self._asha_args["reduction_factor"])}
            self._by_batch[batch_size] = AsyncHyperBandScheduler(
                metric=self._metric, mode=self._mode, brackets=1, **args)
        return self._by_batch[batch_size]

    def _for(self, trial) -> AsyncHyperBandScheduler:
        return self._by_batch[self._trial_batch[trial.trial_id]]

    def on_trial_add(self, tune_controller, trial):
        batch = self._batch_of(trial.config)
        self._trial_batch[trial.trial_id] = batch
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

    def on_trial_result(self, tune_controller, trial, result) -> str:
        if trial.trial_id not in self._trial_batch:
            return TrialScheduler.CONTINUE
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
        if trial.trial_id in self._trial_batch:
            self._for(trial).on_trial_complete(tune_controller, trial, result)
            del self._trial_batch[trial.trial_id]

    def on_trial_remove(self, tune_controller, trial):
        if trial.trial_id in self._trial_batch:
            self._for(trial).on_trial_remove(tune_controller, trial)
            del self._trial_batch[trial.trial_id]

    def on_trial_error(self, tune_controller, trial):
        self.on_trial_remove(tune_controller, trial)

    def debug_string(self) -> str:
        return "\n".join(f"B={b}: {s.debug_string()}" for b, s in sorted(self._by_batch.items()))
