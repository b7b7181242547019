"""One Tune trial: a function trainable that trains one (batch size, alpha, warmup) configuration.

Multi-worker and GPU trials build a Ray Train ``TorchTrainer`` (the Train V2 pattern: a Tune function
trainable launches the Train run and ``TuneReportCallback`` forwards rank 0's metrics to Tune). A trial
with a single CPU worker runs the very same ``train_loop`` in-process, skipping the Train controller and
worker start-up that would otherwise dominate short CPU trials.

What a trial trains is one ``TrialConfig``: the validated spec, which the loop reads by section
(``cfg.spec.training.precision``), and the few values that are this trial's own. A new training option is
a field of the spec and its use in the loop; nothing here copies it.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional

from .branch_plan import BranchPlan, plan_from_config
from .budget import optimizer_steps
from .lr_schedule import scaled_lr, warmup_steps
from .sessions import LocalSession, TrainSession, quiet_per_report_logs
from .spec import SearchSpec, dataloader_workers
from .train_loop import train_loop

__all__ = ["TrialConfig", "run_trial", "train_worker", "trial_resources", "worker_resources", "train_workers",
           "batch_size_of", "in_process", "DataRef"]


def batch_size_of(config: dict) -> int:
    """Trials sample log2 of the batch size (an ordered integer for TPE); this is the batch itself."""
    return 2 ** int(config["log2_batch"])


@dataclass(frozen=True)
class TrialConfig:
    """Everything one trial's loop needs: the spec, plus what Tune chose for this trial and what the
    driver resolved. Built in the trial (``from_tune``), pickled to each of its workers."""

    spec: SearchSpec
    """The validated search spec; the loop reads its sections (``training``, ``resources``, ``data``)."""
    batch_size: int
    """The effective batch B of one optimizer step, over all workers and micro-batches."""
    alpha: float
    """LR-scaling exponent: peak LR = base_lr · (B / base_batch) ** alpha."""
    warmup_fraction: float
    """Warmup as a fraction of this trial's optimizer steps."""
    seed: int
    """Model initialisation and data order: the search's seed plus the trial's offset (a repeat's)."""
    budget_samples: int
    """Samples to train on (the resolved equal-sample budget)."""
    model_config: Any
    """The Hugging Face config object built in the driver (vocabulary, labels, padding resolved)."""
    trial_id: str = ""
    """The Tune trial's id (tags the trial's gauges in Ray's metrics); empty outside Tune."""
    started_at: float = field(default_factory=time.time)
    """When the trial started (epoch seconds), reported as ``trial_started_at``."""
    plan: Optional[BranchPlan] = None
    """Branch mode (``search.method: branch``): what this run of the branch search trains, in samples (its
    role, batch schedule, start, stop, reports, saves and LR). None: a from-scratch trial."""
    tokens_per_sample: Optional[int] = None
    """Tokens in every training sample with packed data (reported as ``tokens_seen``); None otherwise."""

    @classmethod
    def from_tune(cls, spec: SearchSpec, config: dict, *, budget_samples: int, model_config,
                  trial_id: str = "", tokens_per_sample: Optional[int] = None) -> TrialConfig:
        """From Tune's config: ``log2_batch``, ``alpha``, ``warmup_fraction`` and, for a repeat,
        ``seed_offset``. A branch-mode run's config also has ``role`` (``branch_plan.trunk_config`` and its
        kin): its plan is built here, and its batch is the plan's first; its seed is the search's, the trunk's."""
        plan = plan_from_config(spec, config, budget_samples, tokens_per_sample) if "role" in config else None
        return cls(spec=spec, batch_size=plan.batch_schedule[0][1] if plan else batch_size_of(config),
                   alpha=float(config["alpha"]), warmup_fraction=float(config["warmup_fraction"]),
                   seed=spec.search.seed + int(config.get("seed_offset", 0)), budget_samples=budget_samples,
                   model_config=model_config, trial_id=trial_id, started_at=time.time(), plan=plan,
                   tokens_per_sample=tokens_per_sample)

    # ---- derived values ------------------------------------------------------------------------------
    @property
    def task(self) -> str:
        return self.spec.task

    @property
    def metric(self) -> str:
        return self.spec.search.metric

    @property
    def model(self) -> dict:
        """What ``build_model`` and the probe cache key take: the pretrained name or the config keys."""
        return {"name": self.spec.model.name, "config": self.spec.model.config}

    @property
    def use_gpu(self) -> bool:
        return self.spec.resources.use_gpu

    @property
    def threads(self) -> int:
        """torch's thread count in each worker: its CPUs."""
        return self.spec.resources.cpus_per_worker

    @property
    def dataloader_workers(self) -> int:
        return dataloader_workers(self.spec.training, self.use_gpu)

    @property
    def peak_lr(self) -> float:
        """The peak LR at ``batch_size``: the alpha rule from ``training.base_lr`` at ``base_batch``; in branch
        mode from the trunk's peak at the trunk's batch (``BranchPlan.peak_lr``)."""
        if self.plan is not None:
            return self.plan.peak_lr(self.batch_size)
        t = self.spec.training
        return scaled_lr(t.base_lr, self.batch_size, t.base_batch, self.alpha)

    @property
    def total_steps(self) -> int:
        """Optimizer steps of this trial: the budget's at ``batch_size``; in branch mode this run's, from its
        start to its stop."""
        if self.plan is not None:
            return len(self.plan.steps())
        return optimizer_steps(self.budget_samples, self.batch_size)

    @property
    def warmup_steps(self) -> int:
        """Warmup steps of the LR schedule; in branch mode the trunk's (every run follows its schedule)."""
        if self.plan is not None:
            return self.plan.trunk_warmup_steps
        return warmup_steps(self.warmup_fraction, self.total_steps)

    @property
    def probe_limit(self) -> int:
        """Largest micro-batch the probe tries: the search's largest batch per worker, so one probe (and
        its cache entry) serves every batch size of the search."""
        return max(self.spec.batch_sizes) // self.spec.resources.workers_per_trial

    @property
    def probe_seq_len(self) -> int:
        """The sequence length the probe measures at: the data's padded length."""
        return self.spec.data.max_seq_length


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
              tokens_per_sample: Optional[int] = None) -> None:
    """The Tune function trainable (bound to the spec and the data's ``DataRef`` with
    ``tune.with_parameters``). An in-process trial fetches the data itself; a multi-worker trial hands
    its workers the ``DataRef``, so its Train run carries a handle, not the data."""
    from ray import tune

    trial = TrialConfig.from_tune(spec, config, budget_samples=budget_samples, model_config=model_config,
                                  trial_id=tune.get_context().get_trial_id() or "",
                                  tokens_per_sample=tokens_per_sample)
    quiet_per_report_logs()
    if in_process(spec):
        train_loop(trial, data_ref.get(), LocalSession())
        return

    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    r = spec.resources
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={"trial": trial, "data_ref": data_ref},
        torch_config=TorchConfig(backend="nccl" if r.use_gpu else "gloo"),
        scaling_config=ScalingConfig(num_workers=r.workers_per_trial, use_gpu=r.use_gpu,
                                     resources_per_worker=worker_resources(spec)),
        run_config=RunConfig(
            name=tune.get_context().get_trial_id(),
            storage_path=f"{spec.storage_uri.rstrip('/')}/{spec.name}_train_runs",
            callbacks=[TuneReportCallback()],
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            # A dead worker restarts the worker group from the last checkpoint (samples_seen continues);
            # the same run name also makes a resumed experiment's trial pick up its Train run's checkpoint.
            failure_config=FailureConfig(max_failures=r.max_failures),
        ),
    )
    trainer.fit()
