"""The batch-size schedule and the noise scale in Lightning (2.4+), at optimizer-step boundaries.

Lightning's own ``GradientAccumulationScheduler`` changes accumulation per *epoch*; ``BatchSizeScheduleCallback``
changes ``trainer.accumulate_grad_batches`` after the optimizer step that ends a stage (the fit loop reads it
for every batch, and automatic optimization divides the loss by it), at a fixed micro-batch: the train
DataLoader's ``batch_size``. The LR: a ``LambdaLR`` stepped every optimizer step (``"interval": "step"``) has
its factor multiplied by the stage's multiplier; with no scheduler the callback sets the param groups' LR to
the initial LR (each group's ``initial_lr``, which the optimizer's checkpoint keeps, so a resumed run is not
scaled twice) × the multiplier before each step; other schedulers are refused (their LR cannot be scaled
without fighting them). A ``LambdaLR``'s factor is read at the samples seen, in steps of the first stage's batch
B0 (``torch_loop.scale_lambda_scheduler``): write it for a run at B0. As in HF Trainer, a stage starts at a
multiple of its own batch (Lightning ends a step when the epoch's batch count is a multiple of the accumulation;
a stage that does not is deferred to the next boundary that is, with a warning) and an epoch's end cuts a step
short unless the epoch's samples are a multiple of every batch (one warning names each such step and its samples,
``epoch_steps``; Lightning divides a cut step's loss by the stage's accumulation, so the callback scales its
gradient back to the mean over the samples it holds, before clipping, and zeroes the gradients before a step that
starts off its accumulation's multiple, where Lightning would not). Resuming from a
checkpoint restores the accumulation, the LR and the step's place in the epoch; the data position is the
DataLoader's own: Lightning restarts a plain DataLoader's epoch from its first batch, so resuming mid-epoch needs
a resumable loader (``state_dict``/``load_state_dict``), and the callback refuses in one line otherwise. The RNG
state (torch's, CUDA's, numpy's and Python's: dropout draws from it) is the callback's own state in the checkpoint,
restored where the uninterrupted run had it at the next micro-batch (without it, dropout differed by 6e-3 after
a resume): at the checkpoint's load, before the loader's iterator draws its seed, for a resume at an epoch's start;
at the first micro-batch for one mid-epoch, whose new iterator the uninterrupted run never drew. One process only:
under DDP (several processes, each its own RNG) it is neither saved nor restored. Logs
``effective_batch_size``, ``samples_seen`` (the samples trained, a cut step's as cut)
and ``lr_multiplier`` through ``pl_module.log_dict`` (every logger the Trainer has) every
``log_every_n_steps`` optimizer steps, Lightning's own cadence (a ``log_dict`` call costs about a millisecond).
"""

from __future__ import annotations

import logging
import math
import random
from typing import cast

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from cbs_ray.integrations.epoch_steps import EpochWalk, odd_steps_at_epoch_ends, trainer_position, warn_odd_steps
from cbs_ray.integrations.errors import ScheduleError
from cbs_ray.integrations.schedule import BatchSizeSchedule
from cbs_ray.integrations.torch_loop import NoiseScaleHook, initial_lrs, scale_lambda_scheduler

__all__ = ["BatchSizeScheduleCallback", "NoiseScaleCallback"]

logger = logging.getLogger(__name__)


def _rng_state() -> dict:
    """torch's (CPU, and every CUDA device's where CUDA is in use), numpy's and Python's RNG states, in the types a
    weights-only ``torch.load`` reads (numpy's keys as a list)."""
    kind, keys, position, has_gauss, gauss = cast(tuple, np.random.get_state(legacy=True))  # not the dict form
    state = {"torch": torch.get_rng_state(), "numpy": [kind, keys.tolist(), position, has_gauss, gauss],
             "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"].cpu())
    kind, keys, position, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([c.cpu() for c in cuda])


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
        self.schedule = schedule.for_trainers()
        self.plan: list[int] = []
        self._base_lrs: list[list[float]] | None = None
        self._last_step = -1
        self._walk: EpochWalk | None = None  # the run's steps under Lightning's epoch rule
        self._world_size = 1
        self._rng_at_checkpoint: dict | None = None  # a resumed run's, until its first micro-batch

    def state_dict(self) -> dict:
        """The RNG state at the checkpoint (one process only: under DDP each process has its own, and the checkpoint
        keeps the first's)."""
        return {"rng": _rng_state()} if self._world_size == 1 else {}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore the checkpoint's RNG state now, before the resumed run's loader draws its iterator's seed (as the
        uninterrupted run's did at an epoch's start), and again at the first micro-batch where that is mid-epoch."""
        rng = state_dict.get("rng")
        if rng is not None:
            _set_rng_state(rng)
            self._rng_at_checkpoint = rng

    def _accumulation_for(self, step: int) -> int:
        return self.plan[self.schedule.stage_index_at_step(step)]

    def on_train_start(self, trainer, pl_module):
        micro = _micro_batch(trainer)
        self._world_size = trainer.world_size
        self.plan = self.schedule.accumulation_plan(micro, trainer.world_size)
        step = trainer.global_step
        self._refuse_a_resume_lightning_cannot_place(trainer, step)
        trainer.accumulate_grad_batches = self._accumulation_for(step)
        self._last_step = step  # the step whose micro-batches come first
        configs = trainer.lr_scheduler_configs
        for config in configs:
            if config.interval != "step" or not scale_lambda_scheduler(config.scheduler, self.schedule):
                raise ScheduleError("BatchSizeScheduleCallback scales a LambdaLR stepped every optimizer step "
                                    "(interval 'step'), or the LR itself with no scheduler; got "
                                    f"{type(config.scheduler).__name__} with interval {config.interval!r}")
        if not configs:
            self._base_lrs = [initial_lrs(opt) for opt in trainer.optimizers]
        batches = trainer.num_training_batches
        if math.isfinite(batches) and batches and trainer.max_steps > 0:
            self._walk = odd_steps_at_epoch_ends(self.schedule, micro_batch=micro, world_size=trainer.world_size,
                                                 epoch_micro_batches=int(batches), max_steps=trainer.max_steps)
            warn_odd_steps(self._walk.odd, logger, why="an epoch's end makes Lightning cut steps short")
        logger.info("batch-size schedule:\n%s", self.schedule.describe(micro, trainer.world_size))

    def _refuse_a_resume_lightning_cannot_place(self, trainer, step: int) -> None:
        """A resume mid-epoch with a loader Lightning restarts from its first batch would train other samples."""
        loader = trainer.train_dataloader
        batches = trainer.num_training_batches
        if not step or not math.isfinite(batches) or callable(getattr(loader, "load_state_dict", None)):
            return
        _, place = trainer_position(self.schedule, micro_batch=_micro_batch(trainer), world_size=trainer.world_size,
                                    epoch_micro_batches=int(batches), step=step)
        if place:
            raise ScheduleError(f"resuming at step {step}, {place} micro-batches into an epoch: "
                                "Lightning restarts a plain DataLoader's epoch from its first batch; give it a "
                                "resumable loader (state_dict/load_state_dict) or resume from an epoch's end")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._rng_at_checkpoint is not None:
            rng, self._rng_at_checkpoint = self._rng_at_checkpoint, None
            if batch_idx and trainer.world_size == 1:  # mid-epoch: the uninterrupted run drew no iterator's seed here
                _set_rng_state(rng)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        cut = self._walk.samples_at(trainer.global_step) if self._walk else None
        if cut is not None:  # Lightning divided the cut step's loss by the stage's accumulation: make it a mean
            share = self.schedule.stage_at_step(trainer.global_step).batch_size / cut
            for p in pl_module.parameters():
                if p.grad is not None:
                    p.grad.mul_(share)
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
        following = batch_idx + 1
        if following % trainer.accumulate_grad_batches and following < trainer.num_training_batches:
            # Lightning zeroes the gradients where a micro-batch's place is a multiple of the accumulation: a step an
            # epoch's end left off that multiple would otherwise start on the last step's gradient.
            for optimizer in trainer.optimizers:
                optimizer.zero_grad()
        if step % trainer.log_every_n_steps == 0:  # Lightning's cadence: a log_dict call costs ~1 ms
            stage = self.schedule.stage_at_step(max(step - 1, 0))
            cut = self._walk.samples_at(max(step - 1, 0)) if self._walk else None
            batch = stage.batch_size if cut is None else cut
            pl_module.log_dict({"effective_batch_size": float(batch), "lr_multiplier": stage.lr_multiplier,
                                "samples_seen": float(self._walk.samples_before_step(self.schedule, step)
                                                      if self._walk else self.schedule.samples_before_step(step))},
                               on_step=True, on_epoch=False)


class NoiseScaleCallback(Callback):
    """B_simple during a Lightning run (``torch_loop.NoiseScaleHook``): the first micro-batch's gradient against
    the whole step's, read in ``on_after_backward`` (before clipping; after DDP's all-reduce on the last one).
    Needs ``accumulate_grad_batches`` ≥ 2. Logs ``b_simple``, ``noise_grad_sq``, ``noise_trace_sigma`` (every
    ``log_every_n_steps``, NaN readings too) and says once (a warning, and ``b_simple_above_batch`` = 1) when
    B_simple, averaged over about 50 steps, passes the current batch. Gradients are read unscaled under fp16."""

    def __init__(self, decay: float = 0.98):
        self.decay = decay
        self.hook: NoiseScaleHook | None = None
        self._micro = 0
        self._step = -1  # the optimizer step whose micro-batches _micro counts
        self._said = False

    def on_train_start(self, trainer, pl_module):
        scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)  # fp16: read unscaled
        self.hook = NoiseScaleHook(list(pl_module.parameters()), _micro_batch(trainer), self.decay, scaler=scaler)
        self._micro = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._accumulation = trainer.accumulate_grad_batches
        if trainer.global_step != self._step:  # a new step: an epoch's end may have cut the last one short
            self._step, self._micro = trainer.global_step, 0

    def on_after_backward(self, trainer, pl_module):
        accumulation = self._accumulation
        if accumulation < 2:
            return
        assert self.hook is not None  # made by on_train_start
        if self._micro == 0:
            self.hook.read_small(accumulation)
        self._micro += 1
        if self._micro < accumulation:
            return
        self._micro = 0
        batch = accumulation * self.hook.micro_batch * trainer.world_size
        reading = self.hook.read_big(batch, trainer.global_step)
        if reading is None:
            return
        if reading.above_batch and not self._said:  # above_batch waits for the averages to settle (~50 steps)
            self._said = True
            logger.warning("B_simple %.1f has passed the batch %d at step %d (an average over %d steps): a larger "
                           "batch would still use its samples well", reading.b_simple, batch, trainer.global_step,
                           reading.steps)
        if (trainer.global_step + 1) % trainer.log_every_n_steps:  # this step's number, Lightning's cadence
            return
        values = {"b_simple": reading.b_simple, "noise_grad_sq": reading.grad_sq,
                  "noise_trace_sigma": reading.trace_sigma}
        if reading.above_batch:
            values["b_simple_above_batch"] = 1.0
        pl_module.log_dict({k: torch.tensor(float(v)) for k, v in values.items()}, on_step=True, on_epoch=False)
