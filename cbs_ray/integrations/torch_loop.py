"""The schedule and the noise scale in a plain PyTorch loop (one process, or torchrun DDP), and the pieces the
HF and Lightning callbacks share.

``scheduled_steps(dataloader, schedule)`` yields one ``ScheduledStep`` per optimizer step: its micro-batches,
how many (the accumulation steps) and the LR multiplier. The LR is a ``LambdaLR`` whose factor
``schedule.lr_factor(your_shape)`` reads your warmup and decay (written for a run at the first stage's batch B0)
at each step's samples and puts the stage's multiplier on top (``scale_lambda_scheduler`` does the same to a
``LambdaLR`` you already have)::

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule.lr_factor(your_shape))
    for step in scheduled_steps(loader, schedule):
        for i, micro in enumerate(step.micro_batches):
            with model.no_sync() if ddp and not step.is_last(i) else nullcontext():
                (model(**micro).loss / step.accumulation_steps).backward()
            noise.after_backward(i, step)                 # optional: NoiseScaleHook
        optimizer.step(); scheduler.step(); optimizer.zero_grad()

Under DDP give the DataLoader a ``DistributedSampler`` (every process then draws its own micro-batches of the
same step; the schedule's batch is global and must be a multiple of micro-batch × world size). Steps never stop
at an epoch's end (the next epoch's micro-batches complete them); a loader that keeps a short last micro-batch
(``drop_last=False``) makes one step an epoch smaller, and ``scheduled_steps`` names those steps once, as a warning.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional

import torch
import torch.distributed as dist

from cbs_ray.integrations.epoch_steps import OddStep, short_micro_batch_steps, warn_odd_steps
from cbs_ray.integrations.schedule import SCHEDULE_MARK, BatchSizeSchedule, Stage
from cbs_ray.maths.noise_scale import NOT_MEASURABLE, NoiseScaleMeter

__all__ = ["ScheduledStep", "scheduled_steps", "world_size", "scale_lambda_scheduler", "initial_lrs",
           "SCHEDULE_MARK", "NoiseScaleHook", "NoiseReading", "gradient_sqnorm"]

logger = logging.getLogger(__name__)


def world_size() -> int:
    """Processes in the default torch.distributed group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


@dataclass
class ScheduledStep:
    """One optimizer step of the schedule on this process."""

    step: int  # 0-based optimizer step
    stage: Stage
    micro_batches: list
    accumulation_steps: int
    samples_before: int  # samples (all processes) trained before this step (short micro-batches as short)

    @property
    def lr_multiplier(self) -> float:
        return self.stage.lr_multiplier

    @property
    def batch_size(self) -> int:
        return self.stage.batch_size

    def is_last(self, index: int) -> bool:
        """Whether micro-batch ``index`` is the step's last (the one to all-reduce under DDP)."""
        return index == self.accumulation_steps - 1

    def items_in_batch(self, labels_key: str = "labels", *, ignore_index: int = -100, shifted: bool = True) -> int:
        """Label tokens of the whole step (all micro-batches, all processes): divide each micro-batch's
        *summed* token loss by it for the exact token-weighted mean (HF's ``num_items_in_batch``; under DDP,
        which averages gradients over processes, multiply the loss by the world size too). ``shifted``: a causal
        LM predicts from position 1 on, so position 0 is not counted."""
        count = sum(int((m[labels_key][..., 1:] if shifted else m[labels_key]).ne(ignore_index).sum())
                    for m in self.micro_batches)
        if world_size() > 1:
            total = torch.tensor([count], dtype=torch.long)
            dist.all_reduce(total)
            count = int(total.item())
        return count


def scheduled_steps(dataloader: Iterable, schedule: BatchSizeSchedule, *, total_samples: Optional[int] = None,
                    micro_batch: Optional[int] = None, processes: Optional[int] = None,
                    start_step: int = 0) -> Iterator[ScheduledStep]:
    """The optimizer steps of ``schedule`` over ``dataloader`` (its ``batch_size`` is the micro-batch; under DDP
    each process passes its own sharded loader). Runs ``schedule.optimizer_steps(total_samples)`` steps (default
    the schedule's budget), starting a new epoch (``sampler.set_epoch``) when the loader runs out; with neither a
    total nor a budget, one pass, ending at the last whole step. Every stage's accumulation is checked first.

    ``start_step``: resume at that optimizer step (a checkpoint's): the micro-batches of the steps before it are
    drawn and dropped, epoch by epoch as the uninterrupted run drew them (``set_epoch`` included), so step
    ``start_step`` trains the same samples it would have. With a shuffling sampler, restore its generator's
    state (or seed it per epoch, as ``DistributedSampler`` does) before calling."""
    micro = micro_batch or getattr(dataloader, "batch_size", None)
    if not micro:
        raise ValueError("the micro-batch is the DataLoader's batch_size; pass micro_batch= for a batch_sampler")
    procs = processes or world_size()
    plan = schedule.accumulation_plan(micro, procs)
    limit = (schedule.optimizer_steps(total_samples) if total_samples is not None or schedule.budget_samples
             else None)
    short = {o.step: o.batch_size - o.samples
             for o in _warn_on_short_micro_batches(dataloader, schedule, micro, procs, limit)}
    short_before = sum(n for k, n in short.items() if k < start_step)  # samples the short micro-batches lacked
    draw = _micro_batches(dataloader, endless=limit is not None)
    skip = schedule.samples_before_step(start_step) // (micro * procs)
    for _ in range(skip):
        if next(draw, None) is None:
            return
    step = start_step
    while limit is None or step < limit:
        stage = schedule.stage_at_step(step)
        wanted = plan[schedule.stages.index(stage)]
        micro_batches = [b for _, b in zip(range(wanted), draw)]
        if len(micro_batches) < wanted:
            return  # one pass, and it has ended (an endless draw never runs short)
        yield ScheduledStep(step, stage, micro_batches, wanted, schedule.samples_before_step(step) - short_before)
        short_before += short.get(step, 0)
        step += 1


def _warn_on_short_micro_batches(dataloader: Iterable, schedule: BatchSizeSchedule, micro: int, procs: int,
                                 limit: Optional[int]) -> list[OddStep]:
    """Name, once, the steps that hold an epoch's short last micro-batch (a loader with ``drop_last=False`` over
    an epoch that is not a whole number of micro-batches): they train fewer samples than their stage's batch.
    Returns them (``ScheduledStep.samples_before`` counts what they trained)."""
    if getattr(dataloader, "drop_last", True) or getattr(dataloader, "batch_size", None) != micro:
        return []
    try:
        epoch_samples = len(dataloader.sampler)  # type: ignore[attr-defined]  # this process's, under DDP
    except (AttributeError, TypeError):
        return []
    steps = limit
    if steps is None:  # one pass: its whole steps
        drawn = -(-epoch_samples // micro) * micro * procs
        steps = schedule.optimizer_steps(drawn)
        steps -= schedule.samples_before_step(steps) > drawn
    odd = short_micro_batch_steps(schedule, micro_batch=micro, world_size=procs, epoch_samples=epoch_samples,
                                  steps=steps)
    warn_odd_steps(odd, logger, why="an epoch's short last micro-batch makes steps smaller than their stage's batch")
    return odd


def _micro_batches(dataloader: Iterable, *, endless: bool) -> Iterator:
    """The loader's micro-batches, epoch after epoch (``sampler.set_epoch`` at each new one) when ``endless``."""
    epoch = 0
    while True:
        drawn = 0
        for drawn, batch in enumerate(dataloader, 1):
            yield batch
        if not endless or not drawn:
            return
        epoch += 1
        set_epoch = getattr(getattr(dataloader, "sampler", None), "set_epoch", None)
        if set_epoch is not None:
            set_epoch(epoch)


def scale_lambda_scheduler(scheduler, schedule: BatchSizeSchedule, *,
                           at_base_batch: Optional[Callable[[Callable], Callable]] = None) -> bool:
    """Lay a ``LambdaLR``'s factors out in samples and put the stage's LR multiplier on top (every HF
    ``get_scheduler`` type but plateau is a ``LambdaLR``): optimizer step k's factor becomes
    ``factor(samples before step k // B0) × the stage's multiplier`` (``BatchSizeSchedule.lr_factor``), so the
    warmup and decay you wrote for a run at the first stage's batch B0 follow the samples, not the steps, and the
    LR the scheduler sets, reports and logs is the one used. The scheduler must be stepped once per optimizer step.

    ``at_base_batch`` turns a factor built for the run's own steps into one for the same samples at B0 (the HF
    callback's ``hf.at_base_batch``: the Trainer builds its schedulers for ``max_steps``). Returns False, changing
    nothing, for other schedulers. A scheduler already wrapped is left as it is (the mark, ``SCHEDULE_MARK``, never
    enters its state_dict). The current LR is set from the scheduler's ``base_lrs`` (the groups' ``initial_lr``),
    never from the live LR, which a checkpoint may hold already scaled."""
    if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        return False
    if all(getattr(f, SCHEDULE_MARK, None) is not None for f in scheduler.lr_lambdas):
        return True

    def wrapped(factor: Callable[[int], float]) -> Callable[[int], float]:
        shape = at_base_batch(factor) if at_base_batch else factor

        def lr_lambda(step: int) -> float:
            return schedule.lr_at(schedule.samples_before_step(step), shape)
        setattr(lr_lambda, SCHEDULE_MARK, schedule)
        return lr_lambda

    scheduler.lr_lambdas = [wrapped(f) for f in scheduler.lr_lambdas]
    # Set the current step's LR at once (the scheduler set the unscaled one when it was built or loaded).
    for group, base, factor in zip(scheduler.optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * factor(scheduler.last_epoch)
    scheduler._last_lr = [g["lr"] for g in scheduler.optimizer.param_groups]
    return True


def initial_lrs(optimizer) -> list[float]:
    """Each param group's LR before any schedule: its ``initial_lr`` (what torch's schedulers record, and what an
    optimizer's state_dict saves with the group), set from the live LR the first time it is asked for. A resumed
    run so reads the LR the run started at, not the one the checkpoint left scaled."""
    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])
    return [group["initial_lr"] for group in optimizer.param_groups]


def gradient_sqnorm(parameters) -> float:
    """|g|² over the parameters' gradients: one fused norm (as ``clip_grad_norm_``), read as a float."""
    grads = [p.grad.detach() for p in parameters if p.grad is not None]
    if not grads:
        return math.nan
    return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).double()) ** 2)


@dataclass
class NoiseReading:
    """The noise scale after a step: bias-corrected moving averages of |G|² and tr Σ and their ratio."""

    b_simple: float
    grad_sq: float
    trace_sigma: float
    steps: int  # steps measured so far
    batch_size: int
    above_batch: bool  # B_simple has passed the step's batch: a larger batch would still use its samples well


@dataclass
class NoiseScaleHook:
    """B_simple during training (McCandlish et al. 2018, ``maths.noise_scale``) from two batch sizes every step
    has: the first micro-batch's gradient (B_small = micro-batch samples, this process's own: under DDP it is
    accumulated under ``no_sync``) and the whole step's (B_big = the step's global batch, all-reduced). Needs
    at least two micro-batches a step (accumulation ≥ 2); a step with one says nothing and is skipped.

    Call ``after_backward(i, step)`` after each micro-batch's backward; the last one reads the step's gradient,
    so call it before clipping. ``reading`` is the latest ``NoiseReading`` (None before the first). Under mixed
    precision pass the ``scaler`` (``torch.amp.GradScaler``): the gradients are read before ``unscale_`` and
    divided by its scale. ``above_batch`` is said only once the averages hold ``1 / (1 − decay)`` steps (50 at
    0.98): one reading is too noisy to act on."""

    parameters: list
    micro_batch: int
    decay: float = 0.98
    scaler: Optional[object] = None
    meter: NoiseScaleMeter = field(init=False)
    reading: Optional[NoiseReading] = field(init=False, default=None)
    passed_at_step: Optional[int] = field(init=False, default=None)  # first step B_simple passed the batch
    _small: float = field(init=False, default=math.nan)

    def __post_init__(self):
        self.parameters = [p for p in self.parameters if p.requires_grad]
        self.meter = NoiseScaleMeter(self.micro_batch, 2 * self.micro_batch, self.decay)

    @property
    def note(self) -> str:
        return NOT_MEASURABLE if self.meter.count == 0 else ""

    @property
    def settled_steps(self) -> int:
        """Steps the moving averages need before ``above_batch`` is said: 1 / (1 − decay)."""
        return max(1, round(1 / (1 - self.decay))) if self.decay < 1 else 1

    def sqnorm(self) -> float:
        """|g|² of the parameters' gradients now, unscaled (÷ the GradScaler's scale² under mixed precision)."""
        value = gradient_sqnorm(self.parameters)
        scaler: Any = self.scaler
        if scaler is not None and getattr(scaler, "is_enabled", lambda: True)():
            value /= float(scaler.get_scale()) ** 2
        return value

    def read_small(self, accumulation_steps: int) -> None:
        """The first micro-batch's |g|², its loss having been divided by ``accumulation_steps``."""
        self._small = self.sqnorm() * accumulation_steps ** 2

    def read_big(self, batch_size: int, step: int, sqnorm: Optional[float] = None) -> Optional[NoiseReading]:
        """Feed the step's |G|² (read now unless given) at ``batch_size`` samples; returns the new reading."""
        small, self._small = self._small, math.nan
        if not math.isfinite(small) or batch_size <= self.micro_batch:
            return None
        big = self.sqnorm() if sqnorm is None else sqnorm
        self.meter.b_small, self.meter.b_big = self.micro_batch, batch_size
        self.meter.add(small, big)
        grad_sq, trace = self.meter.averages()
        b = trace / grad_sq if grad_sq > 0 and trace > 0 else math.nan
        above = math.isfinite(b) and b > batch_size and self.meter.count >= self.settled_steps
        if above and self.passed_at_step is None:
            self.passed_at_step = step
        self.reading = NoiseReading(b, grad_sq, trace, self.meter.count, batch_size, above)
        return self.reading

    def after_backward(self, index: int, step: ScheduledStep) -> Optional[NoiseReading]:
        """After micro-batch ``index`` of ``step`` (a ``ScheduledStep``) went backward."""
        if step.accumulation_steps < 2:
            return None
        if index == 0:
            self.read_small(step.accumulation_steps)
        if step.is_last(index):
            return self.read_big(step.batch_size, step.step)
        return None
