"""The per-worker training loop of one trial: the same code runs in a Ray Train worker (multi-worker or
GPU trials) and in-process inside the Tune trial (single-CPU-worker trials). Only the ``Session``
(``train.sessions``) differs.

Per optimizer step: ``accumulation`` micro-batches, each micro-batch's summed loss divided by the items
in the whole step (examples; for a causal LM the target tokens, counted over all micro-batches and
workers), so the accumulated gradient is the mean over the effective batch exactly as one step of B
would compute it; DDP's all-reduce only on the last micro-step (``no_sync``), global-norm clipping, then
one optimizer and one scheduler step. Samples are counted in samples (B per step), the LR schedule in
optimizer steps. At every ``eval_every_samples`` milestone the validation metric is summed over each
worker's exact shard of the eval set, all-reduced, reported and (rank 0) checkpointed.

Set-up is ``train.setup``; one optimizer step returns its readings (``_optimizer_step``), and what happens
every ``eval_every_samples`` is ``_at_milestone``. Every report is one ``TrialReport``. What the model and
data are is one question the stages ask their ``source`` (``sources``); what a search method adds to its runs
(branch mode's trunk publishing its state, a ladder run's average of its iterates) is the plan's hooks
(``train.hooks.TrainingHooks``), called where their docstring says. The loop keeps its ``Position``
(phase, batch index, samples) as it goes, so that an error it ends on says where it happened, and an error
that repeats at the same point is not retried (``train.failure``).
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
import time
from typing import Any, NamedTuple, Optional, cast

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from cbs_ray.maths.budget import BatchPlan
from cbs_ray.maths.noise_scale import NOT_MEASURABLE, b_simple
from cbs_ray.records.trial_report import TrialReport
from cbs_ray.sources.builtin import METRICS_OF_EVERY_TASK, WORST_METRIC
from cbs_ray.sources.protocol import Position
from cbs_ray.train.checkpoint import save_state, state_dicts
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.failure import FailureLog
from cbs_ray.train.fsdp import full_tensor
from cbs_ray.train.gauges import TrialGauges
from cbs_ray.train.hooks import TrainingHooks, Trial
from cbs_ray.train.noise_probe import sqnorm
from cbs_ray.train.setup import TrialParts, TrialProgress, batch_plan_for, setup_trial

EMA_ALPHA = 0.5
"""The weight of each step's training loss in the EMA branch mode may compare (Merrill et al. 2025, §3.1)."""

__all__ = ["StepReadings", "train_loop"]


class StepReadings(NamedTuple):
    """What one optimizer step read back from the device (its one wait), and what became of the step."""

    loss: float
    """This rank's training loss of the step (the mean over the effective batch, its share of it)."""
    grad_norm: float
    """The global gradient norm before clipping (of the all-reduced gradient: the same on every rank)."""
    lr: float
    """The LR the step was taken at (NaN for a skipped step)."""
    skipped: bool
    """An fp16 overflow: the scaler skipped the step and lowered its scale."""
    diverged: bool
    """A non-finite gradient norm (or a lone rank's loss) no loss scale can mend: no step was taken."""


# ---- the loop --------------------------------------------------------------------------------------

def train_loop(cfg: TrialConfig, data, session) -> None:
    """Train one (batch size, alpha, warmup) configuration as its plan says (``cfg.plan``, a
    ``run_plan.RunPlan``), in samples: from the plan's start to its stop, each step at the plan's batch and LR,
    reporting at the plan's points (from scratch: the equal-sample budget, every milestone). Stops early,
    reporting ``diverged=True`` and the worst metric, on a non-finite loss or gradient norm, or when a report
    interval's mean loss exceeds ``divergence_factor`` × the first step's loss (Adam at a far too high LR blows
    the loss up without ever producing a NaN).

    What the run's method adds (the plan's ``hooks``: a branch search's trunk publishing its state for the branches,
    a branch starting from it) the loop calls as ``train.hooks.TrainingHooks`` says.

    An error ends the attempt saying where ("IndexError: in evaluation (batch index 3), at 1024 samples: …"),
    recorded in ``cfg.failure_dir``; the same error at the same point as the attempt before says so and is not
    retried (``train.failure.FailureLog``)."""
    failures = FailureLog(cfg.failure_dir, session.rank)
    failures.end_if_repeated()
    position = Position()
    try:
        _train(cfg, data, session, position)
    except Exception as e:
        error = failures.failed(e, position)
        if error is e:
            raise
        raise error from e


def _train(cfg: TrialConfig, data, session, position: Position) -> None:
    """``train_loop``'s body, keeping ``position`` up to date."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank (DDP also broadcasts)
    run = cfg.plan
    report_at = set(run.report_at)
    trial, hooks = setup_trial(cfg, data, session)
    parts, progress = trial.parts, trial.progress
    if progress.milestone_row is not None:  # its checkpoint's row, which a crash may have kept from the results
        session.report(progress.milestone_row, None)
    gauges = TrialGauges(cfg.trial_id, cfg.batch_size, cfg.metric) if cfg.trial_id and session.rank == 0 else None
    parts.model.train()
    while progress.samples < run.stop_samples:
        batch = run.batch_at(progress.samples)  # the batch of this step; the micro-batch stays the run's
        if batch != parts.batching.batch_size:
            parts.batching = batch_plan_for(batch, parts.batching.micro_batch, parts.batching.workers)
        # The step's first micro-batch in this worker's data order (_accumulate_gradients adds its own k).
        position.phase, position.samples = "training", progress.samples
        position.batch = progress.drawn // parts.batching.micro_batch
        t0 = time.perf_counter()
        readings = _optimizer_step(cfg, session, parts, position)
        progress.drawn += parts.batching.accumulation * parts.batching.micro_batch
        if readings.skipped:
            continue
        if readings.diverged:
            _report_divergence(session, cfg, parts.batching, progress, readings, readings.loss, hooks)
            break
        progress.step += 1
        progress.samples += parts.batching.batch_size
        hooks.after_step(trial)
        if progress.first_step_at is None:
            progress.first_step_at = time.time()
            progress.first_loss = readings.loss if progress.first_loss is None else progress.first_loss
        elapsed = time.perf_counter() - t0
        progress.interval_time += elapsed
        progress.train_time += elapsed
        progress.interval_loss += readings.loss
        progress.train_loss_ema = readings.loss if progress.train_loss_ema is None else \
            EMA_ALPHA * readings.loss + (1 - EMA_ALPHA) * progress.train_loss_ema
        progress.interval_steps += 1
        progress.interval_samples += parts.batching.batch_size
        if progress.samples in report_at:
            if not _at_milestone(trial, hooks, data, readings, gauges, position):
                break
            hooks.at_checkpoint(trial)
    hooks.at_end(trial)


def _optimizer_step(cfg: TrialConfig, session, parts: TrialParts, position: Optional[Position] = None) -> StepReadings:
    """One optimizer step over the batch's micro-batches (``parts.batching``): forward and backward each, unscale
    and clip, one read of the device, then the step taken, skipped (fp16 overflow) or refused (diverged).
    ``position.batch`` follows the micro-batch being drawn or trained."""
    batching, scaler, optimizer = parts.batching, parts.scaler, parts.optimizer
    first = position.batch if position is not None else None
    batches = []
    for k in range(batching.accumulation):
        if position is not None and first is not None:
            position.batch = first + k
        batches.append(next(parts.micro_batches))
    step_loss, small, to_mean, local_items = _accumulate_gradients(cfg, session, parts, batches, position, first)
    scale = scaler.get_scale() if scaler.is_enabled() else 1.0
    scaler.unscale_(optimizer)  # true gradients for clipping, the norm and the noise scale
    # The norm before clipping, of the whole gradient: over FSDP's DTensor shards too (a replicated DTensor)
    norm = full_tensor(torch.nn.utils.clip_grad_norm_(parts.params, parts.clip))
    if parts.local_sqnorm is not None:
        # The DDP hook saw this worker's summed gradient × to_mean, not ÷ its own items (the same for
        # equal micro-batches of examples).
        small = parts.local_sqnorm() / (to_mean * max(sum(local_items), 1)) ** 2
    # The step's one wait for the device: loss, norm and the noise probe's norm come back together.
    readings = torch.stack([step_loss, norm.double()] + ([small.double()] if small is not None else [])).tolist()
    step_loss, grad_norm = readings[0], readings[1]
    if small is not None and parts.noise is not None:  # the noise probe's reading: its meter is on
        parts.noise.add(readings[2] / scale ** 2, grad_norm ** 2)
    # fp16 overflow, not divergence: the scaler skips the step and halves the scale. Decided on what all
    # ranks share (the all-reduced gradient's norm and the scale; a rank's own loss only when it is the
    # only rank), and only while the scale is at least 1: a gradient still non-finite at a scale below 1
    # is non-finite unscaled, which no smaller scale mends, so the trial has diverged (else: skips forever).
    overflow = scaler.is_enabled() and not math.isfinite(grad_norm) and scale >= 1.0 and (
        session.world_size > 1 or math.isfinite(step_loss))
    if overflow:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return StepReadings(step_loss, grad_norm, math.nan, skipped=True, diverged=False)
    lr = optimizer.param_groups[0]["lr"]  # what the step is taken at (the scheduler's last LR, or a branch's own)
    # The clipped norm is of the all-reduced gradient, so every rank takes the same branch here; a
    # local loss can only be trusted alone when there is a single rank.
    if not math.isfinite(grad_norm) or (session.world_size == 1 and not math.isfinite(step_loss)):
        return StepReadings(step_loss, grad_norm, lr, skipped=False, diverged=True)
    scaler.step(optimizer)
    scaler.update()
    parts.scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return StepReadings(step_loss, grad_norm, lr, skipped=False, diverged=False)


def _accumulate_gradients(cfg: TrialConfig, session, parts: TrialParts, batches: list,
                          position: Optional[Position] = None, first: Optional[int] = None):
    """Forward and backward over the step's host micro-batches. Returns the step's loss (a device tensor,
    read with the norm), the noise probe's first-micro-batch squared norm (or None), the loss factor
    ``to_mean`` and each micro-batch's items. ``position.batch`` is ``first`` + the micro-batch's index."""
    source, device, amp_dtype = parts.source, session.device, parts.amp_dtype
    step_loss = torch.zeros((), dtype=torch.float64, device=device)  # read once per step, by the caller
    small = None
    local_items = [source.items_in(batch) for batch in batches]
    # Examples per step are known; a causal LM's target tokens (or a user collator's num_items_in_batch)
    # are summed over the workers (one scalar).
    step_items = sum(local_items) if source.items_vary else parts.batching.batch_size  # this step's batch
    if source.items_vary and session.world_size > 1:
        step_items = int(session.all_reduce(torch.tensor(step_items, device=device)))
    # Each micro-batch's summed loss over the step's items is its share of the step's mean; DDP averages
    # the workers' gradients, hence × world size. (Each micro-batch's mean ÷ accumulation would weight a
    # short micro-batch's tokens more than a long one's: a mean of means, which one step of B is not.)
    to_mean = session.world_size / max(step_items, 1)
    last = len(batches) - 1
    for k, batch in enumerate(source.inputs(b, device) for b in batches):
        if position is not None and first is not None:
            position.batch = first + k
        if parts.is_fsdp:  # FSDP2's no_sync: the gradients accumulate unsharded until the last micro-batch
            cast(Any, parts.model).set_requires_gradient_sync(k == last)
        sync = contextlib.nullcontext() if (k == last or not parts.is_ddp) else cast(DDP, parts.model).no_sync()
        with sync:
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = source.summed_loss(parts.forward, batch, cfg, local_items[k]) * to_mean
            parts.scaler.scale(loss).backward()
        step_loss += loss.detach()
        if k == 0 and parts.noise is not None and parts.local_sqnorm is None:
            # The first micro-batch's own mean gradient: its mean loss carried to_mean × its items
            # (1 / accumulation for equal micro-batches of examples).
            small = sqnorm(parts.params) / (to_mean * max(local_items[0], 1)) ** 2
    return step_loss, small, to_mean, local_items


# ---- at a milestone -------------------------------------------------------------------------------

def _at_milestone(trial: Trial, hooks: TrainingHooks, data, readings: StepReadings, gauges: Optional[TrialGauges],
                  position: Optional[Position] = None) -> bool:
    """Evaluate (and at the full budget the dev set), check the interval for divergence, report, and
    checkpoint (rank 0). False when the trial diverged (reported as such) and must stop."""
    cfg, session, parts, progress = trial.cfg, trial.session, trial.parts, trial.progress
    samples = progress.samples
    position = position or Position()
    position.phase, position.samples = "evaluation", samples
    limit = cfg.plan.evaluation_limit(samples)

    def evaluate(module) -> dict:
        return parts.source.evaluate(module, session, cfg, batch_size=parts.eval_batch, position=position,
                                     limit=limit)

    evaluation = evaluate(parts.forward)
    evaluation.update(hooks.at_evaluation(trial, evaluate))  # a method's own (a ladder run's averaged model)
    if samples == cfg.budget_samples and parts.source.has_dev:
        position.phase = "dev evaluation"
        dev = parts.source.evaluate(parts.forward, session, cfg, on_dev=True, batch_size=parts.eval_batch,
                                    position=position)
        evaluation.update({f"dev_{key}": dev[key] for key in ("accuracy", "bleu", "eval_loss", "eval_examples")
                           if key in dev})
    position.phase, position.batch = "report", None
    noise = _noise_metrics(parts.noise, session)
    if cfg.plan.noise_scale_off:
        noise["noise_scale_note"] = cfg.plan.noise_scale_off
    # Mean training loss over the interval and the first step's loss, averaged over workers: every
    # rank sees the same numbers and takes the same branch.
    ema = progress.train_loss_ema if progress.train_loss_ema is not None else math.nan
    train_loss, initial_loss, train_loss_ema = (session.all_reduce(torch.tensor(
        [progress.interval_loss / progress.interval_steps, progress.first_loss, ema], dtype=torch.float64,
        device=session.device)) / session.world_size).tolist()
    if train_loss > cfg.spec.training.divergence_factor * initial_loss:
        _report_divergence(session, cfg, parts.batching, progress, readings, train_loss, hooks)
        return False
    report = _trial_report(
        cfg, parts.batching, progress, readings, train_loss,
        hooks.report_fields(cfg.plan, train_loss_ema if math.isfinite(train_loss_ema) else None),
        evaluation=evaluation, **noise,
        warmup_steps=cfg.warmup_steps, samples_per_s=progress.interval_samples / progress.interval_time,
        train_time_s=progress.train_time, first_step_at=progress.first_step_at, trial_started_at=cfg.started_at,
        reported_at=time.time(), diverged=False, resumed_from_samples=progress.resumed_from_samples)
    progress.interval_time, progress.interval_loss, progress.interval_steps = 0.0, 0.0, 0
    progress.interval_samples = 0
    metrics = report.to_dict()
    if gauges is not None:
        gauges.publish(metrics)
    states = state_dicts(parts.model, parts.optimizer) if parts.is_fsdp else None  # a collective: every rank
    with tempfile.TemporaryDirectory() as directory:
        if session.rank == 0:
            save_state(directory, parts.model, parts.optimizer, parts.scheduler, parts.scaler, progress.step, {
                "train_time_s": progress.train_time, "wall_time_s": report.wall_time_s,
                "first_loss": progress.first_loss, "samples_drawn": progress.drawn,
                "noise_meter": parts.noise.saved((noise["grad_sq"], noise["trace_sigma"]))
                if parts.noise is not None else None, "report": milestone_row(metrics)}, states=states)
        session.report(metrics, directory if session.rank == 0 else None)
    return True


def milestone_row(metrics: dict) -> str:
    """A milestone's reported row as the checkpoint keeps it (JSON text: ``torch.load(weights_only=True)`` reads
    it back). A restarted trial reports it again before it trains on: the checkpoint and the row are
    written by two processes (the trial persists the checkpoint, the driver then writes ``result.json``), so a
    SIGKILL between them left a checkpoint whose row was lost, and the rung decisions read a later row instead.
    Reported twice, the row is the same row: the history keeps one (``records.storage``), ASHA's rungs record a
    trial once."""
    return json.dumps(metrics, default=lambda value: value.item() if hasattr(value, "item") else str(value))


def _trial_report(cfg: TrialConfig, batching: BatchPlan, progress: TrialProgress, readings: StepReadings,
                  train_loss: float, method_fields: dict, **fields_of_this_report) -> TrialReport:
    """The report at the trial's current step: what every report has, the run's method's fields
    (``TrainingHooks.report_fields``), plus this one's own fields. ``batching`` is the batch in use (the last
    step's, with its peak LR by the alpha rule)."""
    return TrialReport(
        samples_seen=progress.samples, steps=progress.step, batch_size=batching.batch_size,
        alpha=cfg.alpha, warmup_fraction=cfg.warmup_fraction, peak_lr=cfg.plan.peak_lr(batching.batch_size),
        lr=readings.lr, train_loss=train_loss, grad_norm=readings.grad_norm,
        wall_time_s=time.perf_counter() - progress.loop_start, micro_batch=batching.micro_batch,
        accumulation=batching.accumulation, workers=batching.workers, node_id=ray_node_id(), **method_fields,
        tokens_seen=progress.samples * cfg.tokens_per_sample if cfg.tokens_per_sample else None,
        **fields_of_this_report)


def ray_node_id() -> str:
    """The Ray node this process runs on, or "" outside a Ray worker or driver (the in-process tests).
    Ray is not imported here for the asking: a process that never imported it is not in Ray."""
    import sys

    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return ""
    return ray.get_runtime_context().get_node_id() or ""


def _report_divergence(session, cfg: TrialConfig, batching: BatchPlan, progress: TrialProgress, readings: StepReadings,
                       train_loss: float, hooks: TrainingHooks) -> None:
    """Report a diverged trial: the worst metric for its task, no checkpoint."""
    worst = {name: value for name, value in WORST_METRIC.items() if name in METRICS_OF_EVERY_TASK
             or (name, cfg.task) in (("accuracy", "sequence-classification"), ("bleu", "seq2seq"))}
    if cfg.metric not in worst:  # a compute_metrics key: the worst its direction allows
        worst[cfg.metric] = -math.inf if cfg.spec.search.mode == "max" else math.inf
    report = _trial_report(cfg, batching, progress, readings, train_loss, hooks.report_fields(cfg.plan, None),
                           evaluation=worst, diverged=True)
    session.report(report.to_dict(), None)


def _noise_metrics(noise, session) -> dict:
    """B_simple now: each estimate's moving average, averaged over workers, then their ratio. NaN where
    the averaged |G|² is not yet positive, and (with ``noise_scale_note``) where a single batch size was
    all there was."""
    if noise is None:
        return {"grad_sq": math.nan, "trace_sigma": math.nan, "b_simple": math.nan,
                "b_small": math.nan, "noise_scale_note": "off or " + NOT_MEASURABLE}
    local = torch.tensor(noise.averages(), dtype=torch.float64, device=session.device)
    grad_sq, trace = (session.all_reduce(local) / session.world_size).cpu().tolist()
    return {"grad_sq": grad_sq, "trace_sigma": trace, "b_simple": b_simple(grad_sq, trace), "b_small": noise.b_small,
            "noise_scale_note": ""}
