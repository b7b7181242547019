"""The schedule and the noise scale in a plain PyTorch loop (one process, or torchrun DDP), and the pieces the
HF and Lightning callbacks share.

``scheduled_steps(dataloader, schedule)`` yields one ``ScheduledStep`` per optimizer step: its micro-batches,
how many (the accumulation steps) and the LR multiplier::

    for step in scheduled_steps(loader, schedule):
        for i, micro in enumerate(step.micro_batches):
            with model.no_sync() if ddp and not step.is_last(i) else nullcontext():
                (model(**micro).loss / step.accumulation_steps).backward()
            noise.after_backward(i, step)                 # optional: NoiseScaleHook
        for group in optimizer.param_groups:
            group["lr"] = base_lr * step.lr_multiplier    # on top of your own LR schedule
        optimizer.step(); optimizer.zero_grad()

Under DDP give the DataLoader a ``DistributedSampler`` (every process then draws its own micro-batches of the
same step; the schedule's batch is global and must be a multiple of micro-batch × world size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional

import torch
import torch.distributed as dist

from cbs_ray.integrations.schedule import BatchSizeSchedule, Stage
from cbs_ray.maths.noise_scale import NOT_MEASURABLE, NoiseScaleMeter

__all__ = ["ScheduledStep", "scheduled_steps", "world_size", "scale_lambda_scheduler", "NoiseScaleHook",
           "NoiseReading", "gradient_sqnorm"]


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
    samples_before: int  # samples (all processes) trained before this step

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
                    micro_batch: Optional[int] = None, processes: Optional[int] = None) -> Iterator[ScheduledStep]:
    """The optimizer steps of ``schedule`` over ``dataloader`` (its ``batch_size`` is the micro-batch; under DDP
    each process passes its own sharded loader). Runs ``schedule.optimizer_steps(total_samples)`` steps (default
    the schedule's budget), starting a new epoch (``sampler.set_epoch``) when the loader runs out; with neither a
    total nor a budget, one pass, ending at the last whole step. Every stage's accumulation is checked first."""
    micro = micro_batch or getattr(dataloader, "batch_size", None)
    if not micro:
        raise ValueError("the micro-batch is the DataLoader's batch_size; pass micro_batch= for a batch_sampler")
    procs = processes or world_size()
    plan = schedule.accumulation_plan(micro, procs)
    limit = (schedule.optimizer_steps(total_samples) if total_samples is not None or schedule.budget_samples
             else None)
    epoch, batches, step = 0, iter(dataloader), 0
    while limit is None or step < limit:
        stage = schedule.stage_at_step(step)
        wanted = plan[schedule.stages.index(stage)]
        micro_batches: list[Any] = []
        while len(micro_batches) < wanted:
            try:
                micro_batches.append(next(batches))
            except StopIteration:
                if limit is None:
                    return
                epoch += 1
                set_epoch = getattr(getattr(dataloader, "sampler", None), "set_epoch", None)
                if set_epoch is not None:
                    set_epoch(epoch)
                batches = iter(dataloader)
        yield ScheduledStep(step, stage, micro_batches, wanted, schedule.samples_before_step(step))
        step += 1


def scale_lambda_scheduler(scheduler, schedule: BatchSizeSchedule) -> bool:
    """Multiply a ``LambdaLR``'s factors (every HF ``get_scheduler`` type but plateau is one) by the stage's LR
    multiplier at each step, so the LR the scheduler sets, reports and logs is the scaled one. The multiplier
    is a function of the scheduler's step count, which must be the optimizer step (stepped once per optimizer
    step). Returns False, changing nothing, for other schedulers."""
    if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        return False
    if getattr(scheduler, "_cbs_ray_scaled", False):
        return True

    def scaled(factor: Callable[[int], float]) -> Callable[[int], float]:
        def lr_lambda(step: int) -> float:
            return factor(step) * schedule.stage_at_step(step).lr_multiplier
        return lr_lambda

    scheduler.lr_lambdas = [scaled(f) for f in scheduler.lr_lambdas]
    setattr(scheduler, "_cbs_ray_scaled", True)
    # Set the current step's LR at once (the scheduler set the unscaled one when it was built).
    for group, base, factor in zip(scheduler.optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * factor(scheduler.last_epoch)
    scheduler._last_lr = [g["lr"] for g in scheduler.optimizer.param_groups]
    return True


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
    so call it before clipping. ``reading`` is the latest ``NoiseReading`` (None before the first)."""

    parameters: list
    micro_batch: int
    decay: float = 0.98
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

    def read_small(self, accumulation_steps: int) -> None:
        """The first micro-batch's |g|², its loss having been divided by ``accumulation_steps``."""
        self._small = gradient_sqnorm(self.parameters) * accumulation_steps ** 2

    def read_big(self, batch_size: int, step: int, sqnorm: Optional[float] = None) -> Optional[NoiseReading]:
        """Feed the step's |G|² (read now unless given) at ``batch_size`` samples; returns the new reading."""
        small, self._small = self._small, math.nan
        if not math.isfinite(small) or batch_size <= self.micro_batch:
            return None
        big = gradient_sqnorm(self.parameters) if sqnorm is None else sqnorm
        self.meter.b_small, self.meter.b_big = self.micro_batch, batch_size
        self.meter.add(small, big)
        grad_sq, trace = self.meter.averages()
        b = trace / grad_sq if grad_sq > 0 and trace > 0 else math.nan
        above = math.isfinite(b) and b > batch_size
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
