"""One Tune trial: a function trainable that trains one (batch size, alpha, warmup) configuration.

Multi-worker and GPU trials build a Ray Train ``TorchTrainer`` (the Train V2 pattern: a Tune function
trainable launches the Train run and ``TuneReportCallback`` forwards rank 0's metrics to Tune). A trial
with a single CPU worker runs the very same ``train.loop`` in-process, skipping the Train controller and
worker start-up that would otherwise dominate short CPU trials.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from cbs_ray.ray_internals import poll_train_workers_every
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.train.sessions import LocalSession, TrainSession, quiet_per_report_logs
from cbs_ray.train.trial_plans import TrialPlans

__all__ = ["run_trial", "train_worker", "trial_resources", "worker_resources", "train_workers", "in_process", "DataRef"]


def in_process(spec: SearchSpec) -> bool:
    return spec.resources.workers_per_trial == 1 and not spec.resources.use_gpu


def trial_resources(spec: SearchSpec) -> dict:
    """What the Tune trial itself holds. In-process trials hold their worker's CPUs; a trial that
    launches a TorchTrainer holds no CPU (its workers request their own, so a 2-worker trial fits on
    2 cores); Tune refuses an empty request, so it holds a token 1 MB of memory instead."""
    r = spec.resources
    if in_process(spec):
        return {"CPU": r.cpus_per_worker}
    return {"CPU": 0, "memory": 1_000_000}


def worker_resources(spec: SearchSpec) -> dict:
    """What each of a trial's Ray Train workers holds: its CPUs, and one GPU with ``use_gpu`` (what
    ``ScalingConfig(use_gpu=…, resources_per_worker=…)`` reserves). The Train controller holds none and
    runs on the trial's node."""
    r = spec.resources
    return {"CPU": r.cpus_per_worker, **({"GPU": 1} if r.use_gpu else {})}


def train_workers(spec: SearchSpec) -> int:
    """Ray Train workers a trial starts beside its own actor: none for an in-process trial."""
    return 0 if in_process(spec) else spec.resources.workers_per_trial


TRAIN_POLL_S = 0.5
"""How often a multi-worker trial's Ray Train controller polls its workers (Train's default: 2 s), so that a report,
which waits for a poll, and the run's end reach Tune within half a second
(``ray_internals.poll_train_workers_every``)."""

_PUT: dict = {}
"""``DataRef.put``'s handles: id(data) → (a weak reference to the data, the Ray session, its DataRef)."""


@dataclass(frozen=True)
class DataRef:
    """What a trial trains on (the spec path's ``data.PreparedData`` or the user's ``UserObjects``), as a
    handle to one copy of it in Ray's object store. The driver puts the data there once per Ray session
    (``put``: the probe, the search and its repeats share the copy); trials and their Ray Train workers carry
    only this handle and fetch the data where the loop runs (``get``): numpy arrays come back zero-copy,
    mapped from the node's shared memory, so neither a trial's config nor a TorchTrainer's
    ``train_loop_config`` ever holds the data itself. The handle is held until the driver leaves Ray (a
    nested ref lives as long as the object holding it)."""

    ref: Any
    """The ``ray.ObjectRef`` of the data."""

    @classmethod
    def put(cls, data) -> DataRef:
        """The data's handle: put into the object store on the first call in this Ray session, the same
        handle after (one copy however many Tune experiments train on it)."""
        import ray

        session = ray.get_runtime_context().get_job_id()
        held = _PUT.get(id(data))
        if held is not None and held[0]() is data and held[1] == session:
            return held[2]
        handle = cls(ray.put(data))
        _PUT[id(data)] = (weakref.ref(data), session, handle)
        return handle

    def get(self):
        import ray

        return ray.get(self.ref)


def train_worker(config: dict) -> None:
    """Entry point of a Ray Train worker (``TorchTrainer(train_loop_per_worker=train_worker)``): the
    trial's ``TrialConfig`` and the ``DataRef`` of its data, fetched here from the object store."""
    quiet_per_report_logs()
    train_loop(config["trial"], config["data_ref"].get(), TrainSession())


def run_trial(config: dict, *, spec: SearchSpec, data_ref: DataRef, budget_samples: int, model_config,
              plans: TrialPlans) -> None:
    """The Tune function trainable (bound to the spec, the data's ``DataRef`` and the experiment's ``plans`` with
    ``tune.with_parameters``): it trains the plan ``plans`` has for its point ``config``. An in-process trial
    fetches the data itself; a multi-worker trial hands its workers the ``DataRef``, so its Train run carries a
    handle, not the data."""
    from ray import tune

    context = tune.get_context()
    trial = TrialConfig.for_plan(spec, plans.plan(config), budget_samples=budget_samples, model_config=model_config,
                                 trial_id=context.get_trial_id() or "", tokens_per_sample=plans.tokens_per_sample,
                                 # where a failure's point is recorded, for the next attempt (train.failure)
                                 failure_dir=context.get_trial_dir() or "")
    quiet_per_report_logs()
    if in_process(spec):
        train_loop(trial, data_ref.get(), LocalSession())
        return

    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    r = spec.resources
    poll_train_workers_every(TRAIN_POLL_S)
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={"trial": trial, "data_ref": data_ref},
        torch_config=TorchConfig(backend="nccl" if r.use_gpu else "gloo"),
        scaling_config=ScalingConfig(num_workers=r.workers_per_trial, use_gpu=r.use_gpu,
                                     resources_per_worker=worker_resources(spec)),
        run_config=RunConfig(
            name=tune.get_context().get_trial_id(),
            storage_path=f"{spec.storage_uri.rstrip('/')}/{spec.name}_train_runs",
            # Ray types RunConfig.callbacks as Tune's Callback; Train's own TuneReportCallback is what its docs use
            callbacks=[TuneReportCallback()],  # type: ignore[list-item]
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            # A dead worker restarts the worker group from the last checkpoint (samples_seen continues);
            # the same run name also makes a resumed experiment's trial pick up its Train run's checkpoint.
            failure_config=FailureConfig(max_failures=r.max_failures),
        ),
    )
    trainer.fit()
