"""The batch-size schedule and the noise scale in an unmodified ``transformers.Trainer`` (tested on 5.24).

``BatchSizeScheduleCallback(schedule)`` grows the batch by gradient accumulation at a fixed micro-batch
(``per_device_train_batch_size``): the Trainer's loop reads ``args.gradient_accumulation_steps`` afresh for
every optimizer step (``_run_epoch`` pulls that many micro-batches, divides the loss by how many it got, or
counts the step's label tokens into ``num_items_in_batch`` for the exact token mean), so the callback sets it
at each step boundary. ``training_arguments(schedule, per_device_train_batch_size)`` gives the three
``TrainingArguments`` it needs (micro-batch, first accumulation, ``max_steps`` under the schedule).

What an unmodified Trainer cannot do exactly, and what the callback does instead:

- **Stage starts.** The loop decides where a step ends by ``(micro-batch index in the epoch + 1) % accumulation``,
  so a stage must start at a multiple of its own batch (its stage boundary counted in micro-batches divides its
  accumulation); the callback checks this before the first step and raises ``ScheduleError`` otherwise.
- **Epochs.** The loop cuts a step short at an epoch's end (its last micro-batches). Training is exact when the
  run ends within the first epoch, or when the epoch's samples are a multiple of every batch; the callback warns
  otherwise.
- **The LR.** A ``LambdaLR`` (every ``lr_scheduler_type`` but plateau) has its factor multiplied by the stage's LR
  multiplier, so the LR the Trainer logs is the one used; for other schedulers the callback scales the param
  groups around ``optimizer.step()`` and the logged ``learning_rate`` is the trainer's unscaled one.
- **Logs.** The Trainer runs user callbacks after its reporters (W&B, TensorBoard, …): to add
  ``effective_batch_size``, ``samples_seen`` and ``lr_multiplier`` (and ``b_simple``) to what they log, the
  callbacks move themselves ahead of them at ``on_train_begin`` (found by walking the call stack to the Trainer;
  where that fails, the values still go to ``state.log_history``). The final ``train_samples_per_second``, which
  the Trainer computes at the first stage's batch, is recomputed from the samples trained.
- **Resuming** from a checkpoint re-reads the data skip at the saved accumulation: not exact across stages.
"""

from __future__ import annotations

import inspect
import logging
import math
import time

import torch
from transformers import TrainerCallback

from cbs_ray.integrations.schedule import BatchSizeSchedule, ScheduleError
from cbs_ray.integrations.torch_loop import NoiseScaleHook, gradient_sqnorm, scale_lambda_scheduler

__all__ = ["BatchSizeScheduleCallback", "NoiseScaleCallback", "training_arguments"]

logger = logging.getLogger(__name__)


def training_arguments(schedule: BatchSizeSchedule, per_device_train_batch_size: int, *, world_size: int = 1,
                       total_samples: int | None = None) -> dict:
    """``TrainingArguments`` keywords for ``schedule``: the micro-batch, the first stage's accumulation and
    ``max_steps`` (the optimizer steps over ``total_samples``, default the schedule's budget)."""
    plan = schedule.accumulation_plan(per_device_train_batch_size, world_size)
    return {"per_device_train_batch_size": per_device_train_batch_size, "gradient_accumulation_steps": plan[0],
            "max_steps": schedule.optimizer_steps(total_samples)}


def move_ahead_of_reporters(callback) -> bool:
    """Put ``callback`` first in its Trainer's callback list, so what its ``on_log`` adds reaches the reporting
    callbacks. The Trainer is found up the call stack (callbacks get no reference to it)."""
    frame = inspect.currentframe()
    while frame is not None:
        owner = frame.f_locals.get("self")
        handler = getattr(owner, "callback_handler", None)
        callbacks = getattr(handler, "callbacks", None)
        if isinstance(callbacks, list) and any(c is callback for c in callbacks):
            # Moving from index k to 0 while the handler iterates keeps every later callback's turn.
            callbacks.remove(callback)
            callbacks.insert(0, callback)
            return True
        frame = frame.f_back
    return False


def _check_stage_starts(schedule: BatchSizeSchedule) -> None:
    for i, s in enumerate(schedule.stages[1:], 1):
        if s.start_samples % s.batch_size:
            raise ScheduleError(f"stage {i} starts at sample {s.start_samples}, not a multiple of its batch "
                                f"{s.batch_size}: HF Trainer ends a step where the micro-batch count is a multiple of "
                                "the accumulation, so start each stage at a multiple of its batch")


class BatchSizeScheduleCallback(TrainerCallback):
    """Train ``schedule`` in an unmodified ``transformers.Trainer`` (module docstring: how, and its limits).
    ``TrainingArguments`` need ``max_steps`` > 0 (``training_arguments`` gives it)."""

    def __init__(self, schedule: BatchSizeSchedule):
        self.schedule = schedule
        self.plan: list[int] = []
        self.samples_seen = 0
        self._param_group_scaling = False
        self._started = 0.0

    def _accumulation_for(self, step: int) -> int:
        return self.plan[self.schedule.stages.index(self.schedule.stage_at_step(step))]

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, train_dataloader=None,
                       **kwargs):
        plan = self.schedule.accumulation_plan(args.per_device_train_batch_size, args.world_size)
        _check_stage_starts(self.schedule)
        if args.max_steps <= 0:
            raise ScheduleError("BatchSizeScheduleCallback needs TrainingArguments(max_steps=...): the trainer counts "
                                "epochs at the first batch; max_steps=schedule.optimizer_steps(total_samples)")
        if args.gradient_accumulation_steps != plan[0]:
            raise ScheduleError(f"gradient_accumulation_steps is {args.gradient_accumulation_steps}, the first stage "
                                f"needs {plan[0]} (training_arguments(schedule, ...) gives all three settings)")
        self.plan, self.samples_seen = plan, self.schedule.samples_before_step(state.global_step)
        self._started = time.time()
        args.gradient_accumulation_steps = self._accumulation_for(state.global_step)
        self._warn_on_epoch_ends(args, state, train_dataloader)
        self._param_group_scaling = not scale_lambda_scheduler(lr_scheduler, self.schedule)
        if self._param_group_scaling:
            logger.warning("the LR scheduler is not a LambdaLR: the schedule's LR multiplier is applied around "
                           "optimizer.step() and the logged learning_rate is the unscaled one")
        move_ahead_of_reporters(self)
        logger.info("batch-size schedule, per_device_train_batch_size %d × %d process(es):\n%s",
                    args.per_device_train_batch_size, args.world_size,
                    self.schedule.describe(args.per_device_train_batch_size, args.world_size))

    def _warn_on_epoch_ends(self, args, state, train_dataloader) -> None:
        try:
            epoch = len(train_dataloader) * args.per_device_train_batch_size * args.world_size
        except TypeError:
            return  # no length: one endless epoch
        needed = self.schedule.samples_before_step(state.max_steps)
        batches = {s.batch_size for s in self.schedule.stages}
        if epoch < needed and any(epoch % b for b in batches):
            logger.warning("an epoch holds %d samples, not a multiple of every batch %s: the trainer cuts the step "
                           "at each epoch's end short (a dataset of at least %d samples avoids it)", epoch,
                           sorted(batches), needed)

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        if self._param_group_scaling:
            m = self.schedule.stage_at_step(state.global_step).lr_multiplier
            for group in optimizer.param_groups:
                group["lr"] *= m

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        if self._param_group_scaling:
            m = self.schedule.stage_at_step(state.global_step).lr_multiplier
            for group in optimizer.param_groups:
                group["lr"] /= m

    def on_step_end(self, args, state, control, **kwargs):
        # The step just taken is global_step - 1; the next update step reads the accumulation set here.
        self.samples_seen = self.schedule.samples_before_step(state.global_step)
        args.gradient_accumulation_steps = self._accumulation_for(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or not self.plan:
            return
        stage = self.schedule.stage_at_step(max(state.global_step - 1, 0))
        extra = {"effective_batch_size": stage.batch_size, "samples_seen": self.samples_seen,
                 "lr_multiplier": stage.lr_multiplier}
        if "train_runtime" in logs and logs["train_runtime"] > 0:
            extra["train_samples_per_second"] = round(self.samples_seen / logs["train_runtime"], 3)
        logs.update(extra)
        if state.log_history:
            state.log_history[-1].update(extra)


class NoiseScaleCallback(TrainerCallback):
    """B_simple during an HF Trainer run (McCandlish et al. 2018; ``torch_loop.NoiseScaleHook``): the first
    micro-batch's gradient against the whole step's, read before clipping (at the end of the step's last
    backward, after DDP's all-reduce). Needs ``gradient_accumulation_steps`` ≥ 2; logs ``b_simple``,
    ``noise_grad_sq``, ``noise_trace_sigma`` with the trainer's logs, and says once, as a warning and as
    ``b_simple_above_batch`` = 1, when B_simple passes the current batch. ``decay``: the moving averages'
    (0.98, about 50 steps)."""

    def __init__(self, decay: float = 0.98):
        self.decay = decay
        self.hook: NoiseScaleHook | None = None
        self._micro = 0
        self._big = math.nan
        self._accumulation, self._batch = 1, 0
        self._said = False

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.hook = NoiseScaleHook(list(model.parameters()), args.per_device_train_batch_size, self.decay)
        move_ahead_of_reporters(self)

    def on_step_begin(self, args, state, control, **kwargs):
        self._micro, self._big = 0, math.nan
        self._accumulation = args.gradient_accumulation_steps  # of this step (a schedule may change it at its end)
        self._batch = self._accumulation * args.per_device_train_batch_size * args.world_size
        if args.gradient_accumulation_steps == 2:
            self._arm_last_backward()

    def on_substep_end(self, args, state, control, **kwargs):
        if self._micro == 0:
            self.hook.read_small(args.gradient_accumulation_steps)
        self._micro += 1
        if self._micro == args.gradient_accumulation_steps - 1 and args.gradient_accumulation_steps > 2:
            self._arm_last_backward()

    def _arm_last_backward(self) -> None:
        """Read |G|² once the step's last backward has finished (clipping comes after it, and no callback runs
        in between): a one-shot hook on a parameter queues a callback on autograd's engine, which queues itself
        once more so it runs after DDP's own end-of-backward all-reduce."""
        assert self.hook is not None  # armed by on_step_begin once the hook is made
        parameters = self.hook.parameters
        param = parameters[0]
        handle = None

        def read() -> None:
            self._big = gradient_sqnorm(parameters)

        def on_grad(_):
            handle.remove()
            engine = torch.autograd.Variable._execution_engine
            engine.queue_callback(lambda: engine.queue_callback(read))

        handle = param.register_post_accumulate_grad_hook(on_grad)

    def on_step_end(self, args, state, control, **kwargs):
        if self._accumulation < 2 or not math.isfinite(self._big):
            return
        batch = self._batch
        reading = self.hook.read_big(batch, state.global_step - 1, sqnorm=self._big)
        if reading and reading.above_batch and not self._said:
            self._said = True
            logger.warning("B_simple %.1f has passed the batch %d at step %d: a larger batch would still use its "
                           "samples well", reading.b_simple, batch, state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        reading = self.hook.reading if self.hook else None
        if logs is None or reading is None:
            return
        extra = {"b_simple": reading.b_simple, "noise_grad_sq": reading.grad_sq,
                 "noise_trace_sigma": reading.trace_sigma}
        if reading.above_batch:
            extra["b_simple_above_batch"] = 1
        logs.update(extra)
        if state.log_history:
            state.log_history[-1].update(extra)
