"""Ray Tune's tracker callbacks, given each trial's readable parameters and ``samples_seen`` as the step
(see ``tune.tracking``). Importing this module imports MLflow and W&B where installed (seconds): only searches
that track import it."""

from __future__ import annotations

import os
from typing import Any

from ray.air.integrations.mlflow import MLflowLoggerCallback
from ray.air.integrations.wandb import WandbLoggerCallback
from ray.tune.logger import TBXLoggerCallback
from ray.tune.result import TIMESTEPS_TOTAL, TRAINING_ITERATION

from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.trial_plans import TrialPlans
from cbs_ray.tune.tracking import mlflow_uri, trial_params

__all__ = ["tracking_callbacks", "SamplesStepMLflow", "SamplesStepTBX", "SamplesStepWandb"]


def tracking_callbacks(spec: SearchSpec, budget_samples: int, plans: TrialPlans, meta: ExperimentMeta) -> list:
    """Ray Tune callbacks for the trackers the spec turns on (``plans``: the experiment's trials' plans, whose
    parameters each trial's run records; ``meta``: the experiment's metadata, which holds the MLflow parent
    run)."""
    t = spec.tracking
    callbacks: list[Any] = []
    if t.mlflow is not None:
        callbacks.append(SamplesStepMLflow(
            spec=spec, budget_samples=budget_samples, plans=plans, tracking_uri=mlflow_uri(t.mlflow.tracking_uri),
            experiment_name=t.mlflow.experiment_name or spec.name,
            tags={"mlflow.parentRunId": meta.mlflow_parent_run_id} if meta.mlflow_parent_run_id else {}))
    if t.tensorboard:
        callbacks.append(SamplesStepTBX())
    if t.wandb is not None:
        callbacks.append(SamplesStepWandb(spec=spec, budget_samples=budget_samples, plans=plans,
                                          project=t.wandb.project or spec.name, mode=t.wandb.mode))
    return callbacks



def _samples_as_step(result: dict) -> dict:
    return {**result, TIMESTEPS_TOTAL: result["samples_seen"]} if "samples_seen" in result else result


class SamplesStepMLflow(MLflowLoggerCallback):
    """One MLflow run per trial, a child of the search's parent run, stepped by ``samples_seen``."""

    def __init__(self, *, spec: SearchSpec, budget_samples: int, plans: TrialPlans, **kwargs):
        super().__init__(**kwargs)
        self._spec, self._budget_samples, self._plans = spec, budget_samples, plans

    def log_trial_start(self, trial):
        if trial not in self._trial_runs:
            run = self.mlflow_util.start_run(tags={**(self.tags or {}), "trial_name": str(trial)}, run_name=str(trial))
            self._trial_runs[trial] = run.info.run_id
        params = trial_params(self._spec, self._budget_samples, self._plans.plan(trial.config))
        params.update({k: v for k, v in trial.config.items() if k not in params})
        self.mlflow_util.log_params(run_id=self._trial_runs[trial], params_to_log=params)

    def log_trial_result(self, iteration: int, trial, result: dict):
        super().log_trial_result(iteration, trial, _samples_as_step(result))


class SamplesStepTBX(TBXLoggerCallback):
    """TensorBoard events in each trial's directory, stepped by ``samples_seen``."""

    def log_trial_result(self, iteration: int, trial, result: dict):
        super().log_trial_result(iteration, trial, _samples_as_step(result))


class SamplesStepWandb(WandbLoggerCallback):
    """One W&B run per trial (grouped by experiment), stepped by ``samples_seen``; Tune's iteration count
    is kept as ``tune_iteration``."""

    def __init__(self, *, spec: SearchSpec, budget_samples: int, plans: TrialPlans, **kwargs):
        super().__init__(**kwargs)
        self._spec, self._budget_samples, self._plans = spec, budget_samples, plans

    def setup(self, *args, **kwargs):
        if self.kwargs.get("mode") in ("offline", "disabled"):  # Ray asks for an API key unless told so
            os.environ["WANDB_MODE"] = self.kwargs["mode"]
        super().setup(*args, **kwargs)

    def _start_logging_actor(self, trial, exclude_results, **wandb_init_kwargs):
        config = wandb_init_kwargs.get("config") or {}
        wandb_init_kwargs["config"] = {**config, **trial_params(self._spec, self._budget_samples,
                                                                          self._plans.plan(trial.config))}
        super()._start_logging_actor(trial, exclude_results, **wandb_init_kwargs)

    def log_trial_result(self, iteration: int, trial, result: dict):
        if "samples_seen" in result:
            result = {**result, "tune_iteration": result.get(TRAINING_ITERATION),
                      TRAINING_ITERATION: result["samples_seen"]}
        super().log_trial_result(iteration, trial, result)
