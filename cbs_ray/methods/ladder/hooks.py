"""What a ladder run adds to the training loop where the ladder reads the average of its iterates
(``ladder.reading: ewa``; ``train.hooks.TrainingHooks``): ``AveragesIterates`` keeps the average
(``train.averaging``: polynomial-decay weights, FSDP's shards averaged in place), folds in every optimizer step and
evaluates it beside the raw model at every report (``ewa_eval_loss``, ``ewa_excess_loss``). Not checkpointed: a run
restarted from its checkpoint starts its average again there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from cbs_ray.train.hooks import TrainingHooks, Trial

__all__ = ["AVERAGED_METRICS", "AveragesIterates"]

AVERAGED_METRICS = ("eval_loss", "excess_loss")
"""The metrics of the average of the iterates a run reports beside the raw model's (``ewa_eval_loss``, …)."""


@dataclass(frozen=True)
class AveragesIterates(TrainingHooks):
    """A ladder run read through the average of its iterates: its ``start`` makes the average of this run."""

    @property
    def evaluation_forwards(self) -> int:
        return 2  # the raw iterate and the average

    def start(self, trial: Trial) -> TrainingHooks:
        from cbs_ray.train.averaging import iterate_average  # torch: in the worker

        model = trial.parts.model
        return _Averaging(iterate_average(model if trial.parts.is_fsdp else getattr(model, "module", model)))


@dataclass(frozen=True)
class _Averaging(TrainingHooks):
    """One run's average of its iterates (``train.averaging.iterate_average``)."""

    average: Any

    def after_step(self, trial: Trial) -> None:
        self.average.update_parameters(getattr(trial.parts.model, "module", trial.parts.model))

    def at_evaluation(self, trial: Trial, evaluate: Callable[[Any], dict]) -> dict:
        from cbs_ray.train.averaging import AVERAGED_PREFIX, averaged_module

        with averaged_module(self.average) as module:  # FSDP's: its averaged shards swapped in
            averaged = evaluate(module)
        return {f"{AVERAGED_PREFIX}{key}": averaged[key] for key in AVERAGED_METRICS if key in averaged}
