"""A trial's set-up, in stages after torchtune's recipes and Levanter's trainer: the model
(``_setup_model``), the optimizer and LR schedule (``_setup_optimizer``), a restore from its checkpoint
(``_restore``), its method's start (``train.hooks.TrainingHooks.start``), the data (``_setup_data``);
``setup_trial`` runs them in order.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from cbs_ray.maths.budget import BatchPlan, plan_batch
from cbs_ray.maths.noise_scale import NoiseScaleMeter
from cbs_ray.sources.amp import autocast_dtype
from cbs_ray.sources.choose import loop_source
from cbs_ray.sources.protocol import Source
from cbs_ray.train.checkpoint import load_state
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.data_order import ResumableSampler, endless_micro_batches
from cbs_ray.train.fsdp import is_fsdp, shard_model, uses_fsdp
from cbs_ray.train.hooks import TrainingHooks, Trial
from cbs_ray.train.microbatch_probe import probe_micro_batch_size
from cbs_ray.train.noise_probe import attach_noise_probe
from cbs_ray.train.optimizer import make_optimizer


@dataclass
class TrialParts:
    """What building makes and the step and the milestones use."""

    model: torch.nn.Module
    """DDP-wrapped where there are workers (no_sync, the parameters and the state dict), or sharded by FSDP2
    (``training.parallelism: fsdp``: ``set_requires_gradient_sync``, DTensor parameters)."""
    forward: Callable
    """What runs the forward passes: the compiled module with ``training.compile``, else ``model``."""
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    amp_dtype: Optional[torch.dtype]
    batching: BatchPlan
    """How the current batch splits into micro-batches, accumulation steps and workers (``maths.budget``); what
    the trial trains is its ``TrialConfig.plan``, a ``RunPlan``."""
    eval_batch: int
    micro_batches: Any
    """The endless iterator of host micro-batches, continuing where a checkpoint (or the run a method's start
    continues) left it; None until the data are set up, after the start."""
    params: list
    clip: float
    is_ddp: bool
    is_fsdp: bool
    noise: Optional[NoiseScaleMeter]
    local_sqnorm: Optional[Callable[[], torch.Tensor]]
    source: Source
    """Where the model and data come from: ``BuiltinSource`` (the spec's) or ``sources.user_objects.UserObjects``."""


@dataclass
class TrialProgress:
    """Where the trial stands: the step, the examples drawn and the clocks a checkpoint saves, and the
    current report interval."""

    step: int
    drawn: int
    """Examples this rank has drawn: a skipped fp16 step draws its micro-batches without a step, and a
    restart may plan another micro-batch size (then the position is the nearest micro-batch). A run that starts
    from another's state continues its data order (a branch: the trunk's)."""
    resumed_from_samples: int
    """The samples of the checkpoint this start continues from (0: a fresh start)."""
    loop_start: float
    train_time: float
    first_loss: Optional[float]
    first_step_at: Optional[float] = None
    samples: int = 0
    """Samples seen (absolute: a branch counts from the trunk's checkpoint it started at)."""
    interval_time: float = 0.0
    interval_loss: float = 0.0
    interval_steps: int = 0
    interval_samples: int = 0
    train_loss_ema: Optional[float] = None
    """The training loss's EMA (α = 0.5 per step) since this start (a restart begins it again)."""
    milestone_row: Optional[dict] = None
    """A restart's: the row its checkpoint's milestone reported (``loop.milestone_row``), reported again first."""


# ---- building -------------------------------------------------------------------------------------

def _setup_model(cfg: TrialConfig, session, amp_dtype, source) -> tuple[torch.nn.Module, BatchPlan, int]:
    """The model (``source``'s: gradient checkpointing on, micro-batch probed where asked), its batch plan
    and evaluation batch, placed on the device and prepared by the session (DDP)."""
    training = cfg.spec.training
    model = source.build_model(cfg)
    if training.gradient_checkpointing:
        # The HF model's own switch (renamed in transformers 5), before DDP wraps the model.
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    sharded = uses_fsdp(training, session.world_size)
    if sharded:  # sharded block by block instead of DDP's whole copy (train.fsdp); probed so: memory per rank
        model = shard_model(model.to(session.device), block_class=training.fsdp_block_class,
                            param_dtype=amp_dtype if session.device.type == "cuda" else None)
    micro_cap, fits_up_to = probe_micro_batch_size(model, cfg, session, amp_dtype, source) \
        if training.probe_micro_batch else (training.micro_batch_size, None)
    # A forward without gradients needs less memory than a training step of the same size: evaluating in
    # batches no larger than the probed size cannot run out where training did not. Larger could: a
    # causal LM's logits over a large vocabulary, in fp32, grow with the batch whatever the probe's limit.
    eval_batch = min(training.eval_batch_size, fits_up_to) if fits_up_to else training.eval_batch_size
    batching: BatchPlan = _first_batch_plan(cfg, session.world_size, micro_cap)
    if session.rank == 0:
        title = cfg.plan.title
        print((f"trial ({title}): " if title else "trial: ")
              + f"{batching}, peak lr {cfg.peak_lr:.3g} (alpha {cfg.alpha:.3g}), {cfg.total_steps} steps, "
              f"{cfg.warmup_steps} warmup steps" + (f", eval batch {eval_batch} (memory)"
                                                    if eval_batch < training.eval_batch_size else ""), flush=True)
    if not sharded:
        # Ray's prepare_model moves it too; a local run needs the move
        model = session.prepare_model(model.to(session.device))
    return model, batching, eval_batch


def _first_batch_plan(cfg: TrialConfig, workers: int, micro_cap: Optional[int]) -> BatchPlan:
    """How the first step's batch is made. From scratch: the trial's one batch, micro-batches of at most
    ``micro_cap``. A branch search's run (``RunPlan.fixes_micro_batch``): the micro-batch is fixed for the run,
    planned for the smallest batch of its schedule; a larger batch accumulates more micro-batches
    (``batch_plan_for``). A run at the trunk's batch with the noise scale on, on a single worker, takes
    micro-batches of half that batch (``RunPlan.noise_micro_batch``): the trunk's B_simple is measured (the
    probe needs accumulation ≥ 2), and the schedule run trains exactly as the trunk while their batches agree."""
    run = cfg.plan
    if not run.fixes_micro_batch:
        return plan_batch(cfg.batch_size, workers, micro_cap)
    half = run.noise_micro_batch
    if cfg.spec.training.noise_scale and workers == 1 and half:
        micro_cap = min(micro_cap or half, half)
    micro = plan_batch(min(b for _, b in run.batch_schedule), workers, micro_cap).micro_batch
    return batch_plan_for(cfg.batch_size, micro, workers)


def batch_plan_for(batch: int, micro: int, workers: int) -> BatchPlan:
    """``batch`` in micro-batches of ``micro`` on each of ``workers`` (a branch search's run: its micro-batch
    at the batch of the step)."""
    per_worker, rest = divmod(batch, workers)
    if rest or per_worker % micro:
        raise ValueError(f"batch {batch} is not a whole number of micro-batches of {micro} on {workers} workers")
    return BatchPlan(batch, micro, per_worker // micro, workers)


def _setup_optimizer(cfg: TrialConfig, model, session, amp_dtype):
    """The optimizer at the trial's peak LR, its LR schedule (the plan's LR of every optimizer step,
    ``RunPlan.lr_factors``: warmup, then decay, in optimizer steps) and the fp16 gradient scaler (disabled
    otherwise)."""
    optimizer = make_optimizer(model, cfg.spec.training, cfg.peak_lr, model_config=cfg.model_config)
    # fp16 needs loss scaling; bf16 has fp32's exponent range and does not.
    scaler = torch.amp.GradScaler(session.device.type, enabled=amp_dtype == torch.float16)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cfg.plan.lr_factors())
    return optimizer, scheduler, scaler


def _restore(cfg: TrialConfig, session, model, optimizer, scheduler, scaler) -> tuple[int, dict]:
    """(step, saved progress) of the session's checkpoint; (0, {}) for a trial starting afresh."""
    checkpoint = session.get_checkpoint()
    # A restarted trial (dead worker, resumed experiment) continues from its last milestone, clocks included.
    step, saved = load_state(checkpoint, model, optimizer, scheduler, scaler) if checkpoint else (0, {})
    if step and session.rank == 0:
        print(f"trial: resumed from its checkpoint at {cfg.plan.samples_after(step)} samples", flush=True)
    return step, saved


def _setup_data(cfg: TrialConfig, source, session, batching: BatchPlan, drawn: int):
    """The endless micro-batches of this rank's share of ``source``'s training set, after the ``drawn``
    examples a checkpoint says were taken."""
    training = cfg.spec.training
    stream = getattr(source, "micro_batches", None)
    if stream is not None:  # a streamed Parquet corpus (sources.streamed): its rows in the global order
        return stream(seed=cfg.seed, rank=session.rank, workers=session.world_size, micro=batching.micro_batch,
                      drawn=drawn, whole=cfg.plan.largest_batch or max(cfg.spec.batch_sizes), use_ray=ray_is_running())
    dataset, collate = source.training_data()
    if cfg.plan.largest_batch:
        dataset = _whole_batches(dataset, cfg.plan.largest_batch)
    workers = cfg.dataloader_workers
    # The loop's own DistributedSampler, seeded by the trial, one worker included: its shuffle is a function
    # of (seed, epoch), which a restart can replay. Ray's prepare_data_loader leaves it in place; without it,
    # it adds one with seed 0 (the same data order for every seed, so repeats would differ only in their
    # initial weights) and rebuilds the loader without persistent_workers.
    sampler = ResumableSampler(dataset, num_replicas=session.world_size, rank=session.rank, shuffle=True,
                                seed=cfg.seed, drop_last=True)
    loader = session.prepare_data_loader(torch.utils.data.DataLoader(
        dataset, batch_size=batching.micro_batch, sampler=sampler, drop_last=True, collate_fn=collate,
        generator=torch.Generator().manual_seed(cfg.seed), num_workers=workers,
        pin_memory=cfg.use_gpu if training.pin_memory is None else training.pin_memory,
        persistent_workers=workers > 0 if training.persistent_workers is None else training.persistent_workers))
    return endless_micro_batches(loader, drawn=drawn // batching.micro_batch)


def ray_is_running() -> bool:
    """Whether this process is in Ray (a Tune trial, a Ray Train worker): a streamed corpus is then read through
    Ray Data. Ray is not imported for the asking."""
    import sys

    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _whole_batches(dataset, batch: int):
    """The first whole number of ``batch`` examples of ``dataset`` (a branch search: ``RunPlan.largest_batch``):
    every run's epoch is then a whole number of its micro-batches, so runs with different micro-batches walk
    the same data order with the same epoch boundaries."""
    usable = len(dataset) // batch * batch
    if not usable:
        raise ValueError(f"branch mode: the training set ({len(dataset)} examples) holds no whole batch of {batch}")
    return dataset if usable == len(dataset) else torch.utils.data.Subset(dataset, range(usable))


def setup_trial(cfg: TrialConfig, data, session) -> tuple[Trial, TrainingHooks]:
    """Everything the steps need, in order: model, optimizer and schedule, restore, noise probe, the method's start
    (``TrainingHooks.start``: the hooks the run calls), data."""
    training = cfg.spec.training
    amp_dtype = autocast_dtype(training.precision, session.device)
    source = loop_source(data, cfg.task)
    model, batching, eval_batch = _setup_model(cfg, session, amp_dtype, source)
    optimizer, scheduler, scaler = _setup_optimizer(cfg, model, session, amp_dtype)
    step, saved = _restore(cfg, session, model, optimizer, scheduler, scaler)
    # The compiled module runs the forward passes; the (DDP-wrapped) model keeps no_sync, the parameters
    # and the state dict, so checkpoints and the noise probe see the same objects either way.
    forward = torch.compile(model, mode=None if training.compile_mode == "default" else training.compile_mode) \
        if training.compile else model
    params = [p for p in model.parameters() if p.requires_grad]
    # A run may leave the noise scale to another (branch mode: the trunk's B_simple is what the summary plots).
    measured = training.noise_scale and not cfg.plan.noise_scale_off
    noise, local_sqnorm = attach_noise_probe(model, params, batching) if measured else (None, None)
    if noise is not None and saved.get("noise_meter"):  # a restarted trial's noise scale continues, not restarts
        noise.resume(saved["noise_meter"])
    parts = TrialParts(model=model, forward=forward, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                   amp_dtype=amp_dtype, batching=batching, eval_batch=eval_batch, micro_batches=None,
                   params=params, is_ddp=hasattr(model, "no_sync"), is_fsdp=is_fsdp(model),
                   clip=training.grad_clip_norm if training.grad_clip_norm is not None else float("inf"),
                   noise=noise, local_sqnorm=local_sqnorm, source=source)
    samples = cfg.plan.samples_after(step)
    drawn = saved.get("samples_drawn", step * batching.accumulation * batching.micro_batch)
    progress = TrialProgress(step=step, drawn=drawn, resumed_from_samples=samples if step else 0,
                         loop_start=time.perf_counter() - saved.get("wall_time_s", 0.0),
                         train_time=saved.get("train_time_s", 0.0), first_loss=saved.get("first_loss"),
                         samples=samples,
                         milestone_row=json.loads(saved["report"]) if step and saved.get("report") else None)
    trial = Trial(cfg=cfg, session=session, parts=parts, progress=progress)
    hooks = cfg.plan.hooks.start(trial)  # may continue another run's state: its weights, data position, first loss
    parts.micro_batches = _setup_data(cfg, source, session, batching, progress.drawn)
    return trial, hooks
