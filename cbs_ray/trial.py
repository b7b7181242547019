"""One Tune trial: a function trainable that trains one (batch size, alpha, warmup) configuration.

Multi-worker and GPU trials build a Ray Train ``TorchTrainer`` (the Train V2 pattern: a Tune function
trainable launches the Train run and ``TuneReportCallback`` forwards rank 0's metrics to Tune). A trial
with a single CPU worker runs the very same ``train_loop`` in-process, skipping the Train controller and
worker start-up that would otherwise dominate short CPU trials.
"""

from __future__ import annotations

import time

from .spec import SearchSpec, dataloader_workers
from .train_loop import LocalSession, TrialSetup, quiet_per_report_logs, train_loop, train_worker

__all__ = ["make_setup", "run_trial", "trial_resources", "batch_size_of", "in_process"]


def batch_size_of(config: dict) -> int:
    """Trials sample log2 of the batch size (an ordered integer for TPE); this is the batch itself."""
    return 2 ** int(config["log2_batch"])


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


def make_setup(spec: SearchSpec, config: dict, *, budget_samples: int, model_config) -> TrialSetup:
    t = spec.training
    return TrialSetup(
        batch_size=batch_size_of(config), alpha=float(config["alpha"]),
        warmup_fraction=float(config["warmup_fraction"]), budget_samples=budget_samples,
        eval_every_samples=t.eval_every_samples, base_lr=t.base_lr, base_batch=t.base_batch,
        lr_decay=t.lr_decay, optimizer=t.optimizer, weight_decay=t.weight_decay,
        label_smoothing=t.label_smoothing, layer_lr_decay=t.layer_lr_decay, precision=t.precision,
        gradient_checkpointing=t.gradient_checkpointing, compile=t.compile, compile_mode=t.compile_mode,
        dataloader_workers=dataloader_workers(t, spec.resources.use_gpu), pin_memory=t.pin_memory,
        persistent_workers=t.persistent_workers,
        divergence_factor=t.divergence_factor, probe_micro_batch=t.probe_micro_batch,
        memory_limit_gb=t.memory_limit_gb, eval_batch_size=t.eval_batch_size,
        probe_seq_len=spec.data.max_seq_length,
        probe_limit=max(spec.batch_sizes) // spec.resources.workers_per_trial,
        grad_clip_norm=t.grad_clip_norm, micro_batch_size=t.micro_batch_size, task=spec.task,
        metric=spec.search.metric, model={"name": spec.model.name, "config": spec.model.config},
        model_config=model_config, threads=spec.resources.cpus_per_worker,
        seed=spec.search.seed + int(config.get("seed_offset", 0)), use_gpu=spec.resources.use_gpu, noise_scale=t.noise_scale,
        started_at=time.time())


def run_trial(config: dict, *, spec: SearchSpec, data, budget_samples: int, model_config) -> None:
    """The Tune function trainable (bound to spec and data with ``tune.with_parameters``)."""
    from ray import tune

    setup = make_setup(spec, config, budget_samples=budget_samples, model_config=model_config)
    setup.trial_id = tune.get_context().get_trial_id() or ""
    quiet_per_report_logs()
    if in_process(spec):
        train_loop(setup, data, LocalSession())
        return

    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    r = spec.resources
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={"setup": setup, "data": data},
        torch_config=TorchConfig(backend="nccl" if r.use_gpu else "gloo"),
        scaling_config=ScalingConfig(num_workers=r.workers_per_trial, use_gpu=r.use_gpu,
                                     resources_per_worker={"CPU": r.cpus_per_worker}),
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
