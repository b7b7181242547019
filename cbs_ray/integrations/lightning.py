"""The batch-size schedule and the noise scale in Lightning (2.4+), at optimizer-step boundaries.

Lightning's own ``GradientAccumulationScheduler`` changes accumulation per *epoch*; ``BatchSizeScheduleCallback``
changes ``trainer.accumulate_grad_batches`` after the optimizer step that ends a stage (the fit loop reads it
for every batch, and automatic optimization divides the loss by it), at a fixed micro-batch: the train
DataLoader's ``batch_size``. The LR: a ``LambdaLR`` stepped every optimizer step (``"interval": "step"``) has
its factor multiplied by the stage's multiplier; with no scheduler the callback sets the param groups' LR to
the initial LR × the multiplier before each step; other schedulers are refused (their LR cannot be scaled
without fighting them). As in HF Trainer, a stage must start at a multiple of its own batch (Lightning ends a
step when the epoch's batch count is a multiple of the accumulation) and an epoch's end cuts a step short
unless the epoch's samples are a multiple of every batch. Logs ``effective_batch_size``, ``samples_seen``
and ``lr_multiplier`` through ``pl_module.log_dict`` (every logger the Trainer has) every
``log_every_n_steps`` optimizer steps, Lightning's own cadence (a ``log_dict`` call costs about a millisecond).
"""

from __future__ import annotations

import logging
import math

import torch
from lightning.pytorch.callbacks import Callback

from cbs_ray.integrations.schedule import BatchSizeSchedule, ScheduleError
from cbs_ray.integrations.torch_loop import NoiseScaleHook, scale_lambda_scheduler

__all__ = ["BatchSizeScheduleCallback", "NoiseScaleCallback"]

logger = logging.getLogger(__name__)


def _micro_batch(trainer) -> int:
    loader = trainer.train_dataloader
    size = getattr(loader, "batch_size", None)
    if not size:
        raise ScheduleError("the micro-batch is the train DataLoader's batch_size, and it has none")
    return int(size)


class BatchSizeScheduleCallback(Callback):
    """Train ``schedule`` in a Lightning ``Trainer`` (module docstring). Set ``max_steps`` to
    ``schedule.optimizer_steps(total_samples)`` so the run ends where the schedule does."""

    def __init__(self, schedule: BatchSizeSchedule):
        self.schedule = schedule
        self.plan: list[int] = []
        self._base_lrs: list[float] | None = None
        self._last_step = -1

    def _accumulation_for(self, step: int) -> int:
        return self.plan[self.schedule.stages.index(self.schedule.stage_at_step(step))]

    def on_train_start(self, trainer, pl_module):
        self.plan = self.schedule.accumulation_plan(_micro_batch(trainer), trainer.world_size)
        for i, s in enumerate(self.schedule.stages[1:], 1):
            if s.start_samples % s.batch_size:
                raise ScheduleError(f"stage {i} starts at sample {s.start_samples}, not a multiple of its batch "
                                    f"{s.batch_size}: start each stage at a multiple of its batch")
        trainer.accumulate_grad_batches = self._accumulation_for(trainer.global_step)
        configs = trainer.lr_scheduler_configs
        for config in configs:
            if config.interval != "step" or not scale_lambda_scheduler(config.scheduler, self.schedule):
                raise ScheduleError("BatchSizeScheduleCallback scales a LambdaLR stepped every optimizer step "
                                    "(interval 'step'), or the LR itself with no scheduler; got "
                                    f"{type(config.scheduler).__name__} with interval {config.interval!r}")
        if not configs:
            self._base_lrs = [[g["lr"] for g in opt.param_groups] for opt in trainer.optimizers]
        logger.info("batch-size schedule:\n%s", self.schedule.describe(_micro_batch(trainer), trainer.world_size))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if self._base_lrs is not None:
            m = self.schedule.stage_at_step(trainer.global_step).lr_multiplier
            for opt, bases in zip(trainer.optimizers, self._base_lrs):
                for group, base in zip(opt.param_groups, bases):
                    group["lr"] = base * m

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step  # optimizer steps taken; unchanged after a micro-batch that accumulated
        if step == self._last_step:
            return
        self._last_step = step
        trainer.accumulate_grad_batches = self._accumulation_for(step)
        if step % trainer.log_every_n_steps == 0:  # Lightning's cadence: a log_dict call costs ~1 ms
            stage = self.schedule.stage_at_step(max(step - 1, 0))
            pl_module.log_dict({"effective_batch_size": float(stage.batch_size), "lr_multiplier": stage.lr_multiplier,
                                "samples_seen": float(self.schedule.samples_before_step(step))},
                               on_step=True, on_epoch=False)


class NoiseScaleCallback(Callback):
    """B_simple during a Lightning run (``torch_loop.NoiseScaleHook``): the first micro-batch's gradient against
    the whole step's, read in ``on_after_backward`` (before clipping; after DDP's all-reduce on the last one).
    Needs ``accumulate_grad_batches`` ≥ 2. Logs ``b_simple``, ``noise_grad_sq``, ``noise_trace_sigma`` (every
    ``log_every_n_steps``) and says
    once (a warning, and ``b_simple_above_batch`` = 1) when B_simple passes the current batch."""

    def __init__(self, decay: float = 0.98):
        self.decay = decay
        self.hook: NoiseScaleHook | None = None
        self._micro = 0
        self._said = False

    def on_train_start(self, trainer, pl_module):
        self.hook = NoiseScaleHook(list(pl_module.parameters()), _micro_batch(trainer), self.decay)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._accumulation = trainer.accumulate_grad_batches

    def on_after_backward(self, trainer, pl_module):
        accumulation = self._accumulation
        if accumulation < 2:
            return
        if self._micro == 0:
            self.hook.read_small(accumulation)
        self._micro += 1
        if self._micro < accumulation:
            return
        self._micro = 0
        batch = accumulation * self.hook.micro_batch * trainer.world_size
        reading = self.hook.read_big(batch, trainer.global_step)
        if reading is None or not math.isfinite(reading.b_simple):
            return
        if reading.above_batch and not self._said:
            self._said = True
            logger.warning("B_simple %.1f has passed the batch %d at step %d: a larger batch would still use "
                           "its samples well", reading.b_simple, batch, trainer.global_step)
        if (trainer.global_step + 1) % trainer.log_every_n_steps:  # this step's number, Lightning's cadence
            return
        values = {"b_simple": reading.b_simple, "noise_grad_sq": reading.grad_sq,
                  "noise_trace_sigma": reading.trace_sigma}
        if reading.above_batch:
            values["b_simple_above_batch"] = 1.0
        pl_module.log_dict({k: torch.tensor(float(v)) for k, v in values.items()}, on_step=True, on_epoch=False)
