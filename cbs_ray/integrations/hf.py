"""The batch-size schedule and the noise scale in an unmodified ``transformers.Trainer`` (tested on 5.25).

``BatchSizeScheduleCallback(schedule)`` grows the batch by gradient accumulation at a fixed micro-batch
(``per_device_train_batch_size``): the Trainer's loop reads ``args.gradient_accumulation_steps`` afresh for
every optimizer step (``_run_epoch`` pulls that many micro-batches, divides the loss by how many it got, or
counts the step's label tokens into ``num_items_in_batch`` for the exact token mean), so the callback sets it
at each step boundary. ``training_arguments(schedule, per_device_train_batch_size)`` gives the three
``TrainingArguments`` it needs (micro-batch, first accumulation, ``max_steps`` under the schedule).

What an unmodified Trainer cannot do exactly, and what the callback does instead:

- **Stage starts.** The loop decides where a step ends by ``(micro-batch index in the epoch + 1) % accumulation``,
  so a stage must start at a multiple of its own batch: a stage that does not is deferred to the next step
  boundary that is (``BatchSizeSchedule.for_trainers``; the shift is said once, as a warning).
- **Epochs.** The loop cuts a step short at an epoch's end (its last micro-batches). Training is exact when the
  run ends within the first epoch, or when the epoch's samples are a multiple of every batch; otherwise the
  callback warns once before the first step, naming each step of another size and its samples
  (``epoch_steps``), logs those samples as the step's ``effective_batch_size``, and has the Trainer run the
  epochs the schedule needs to reach ``max_steps`` (it counts them at the first stage's accumulation); the logged
  ``samples_seen`` counts the samples the steps trained, cut ones as cut. A step an
  epoch's end leaves off its accumulation's multiple is prefetched alone (``get_batch_samples``), so its loss is
  divided by its own micro-batches, not shared with the next step's; a resume counts the cut steps as drawn.
- **The LR, laid out in samples.** A ``LambdaLR`` (every ``lr_scheduler_type`` but plateau) is read at the samples
  seen, counted in steps of the first stage's batch B0 (``torch_loop.scale_lambda_scheduler``), times the stage's
  multiplier; the Trainer's own schedulers are rebuilt for the run's samples at B0 first (``at_base_batch``), so
  growing the batch keeps the LR its samples would have had at B0. The Trainer logs the LR used. For other
  schedulers the callback scales the param groups around ``optimizer.step()`` and the logged ``learning_rate`` is
  the trainer's unscaled one.
- **Logs.** The Trainer runs user callbacks after its reporters (W&B, TensorBoard, …): to add
  ``effective_batch_size``, ``samples_seen`` and ``lr_multiplier`` (and ``b_simple``) to what they log, the
  callbacks move themselves ahead of them at ``on_train_begin`` (found by walking the call stack to the Trainer;
  where that fails, the values still go to ``state.log_history``). The final ``train_samples_per_second``, which
  the Trainer computes at the first stage's batch, is recomputed from the samples trained.
- **Resuming** (``trainer.train(resume_from_checkpoint=…)``) from a checkpoint in any stage is exact: the Trainer
  counts the micro-batches to skip at the first stage's accumulation, so the callback (given to
  ``Trainer(callbacks=[…])``, which lets it see the Trainer at ``on_init_end``) sets that count to the schedule's
  before the skip; the LR is rebuilt from the scheduler's ``base_lrs``. Where it could not (the callback added
  later), resuming in a later stage stops with one ``ScheduleError`` line. ``args.gradient_accumulation_steps`` is
  given back after ``train()``, so a second ``train()`` on the same Trainer starts as the first did.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from typing import TYPE_CHECKING

import torch
from torch.utils.hooks import RemovableHandle
from transformers import TrainerCallback

from cbs_ray.integrations.epoch_steps import EpochWalk, odd_steps_at_epoch_ends, trainer_position, warn_odd_steps
from cbs_ray.integrations.errors import ScheduleError
from cbs_ray.integrations.schedule import BatchSizeSchedule
from cbs_ray.integrations.torch_loop import SCHEDULE_MARK, NoiseScaleHook, scale_lambda_scheduler

if TYPE_CHECKING:
    from transformers import Trainer

__all__ = ["BatchSizeScheduleCallback", "NoiseScaleCallback", "training_arguments", "at_base_batch",
           "find_trainer", "move_ahead_of_reporters"]

logger = logging.getLogger(__name__)


def training_arguments(schedule: BatchSizeSchedule, per_device_train_batch_size: int, *, world_size: int = 1,
                       total_samples: int | None = None) -> dict:
    """``TrainingArguments`` keywords for ``schedule``: the micro-batch, the first stage's accumulation and
    ``max_steps`` (the optimizer steps over ``total_samples``, default the schedule's budget)."""
    schedule = schedule.for_trainers(warn=False)
    plan = schedule.accumulation_plan(per_device_train_batch_size, world_size)
    return {"per_device_train_batch_size": per_device_train_batch_size, "gradient_accumulation_steps": plan[0],
            "max_steps": schedule.optimizer_steps(total_samples)}


def find_trainer(callback):
    """The Trainer whose callback list holds ``callback``, found up the call stack (callbacks get no reference to
    it), or None."""
    frame = inspect.currentframe()
    while frame is not None:
        owner = frame.f_locals.get("self")
        callbacks = getattr(getattr(owner, "callback_handler", None), "callbacks", None)
        if isinstance(callbacks, list) and any(c is callback for c in callbacks):
            return owner
        frame = frame.f_back
    return None


def move_ahead_of_reporters(callback, trainer=None) -> bool:
    """Put ``callback`` first in its Trainer's callback list, so what its ``on_log`` adds reaches the reporting
    callbacks."""
    trainer = trainer or find_trainer(callback)
    if trainer is None:
        return False
    callbacks = trainer.callback_handler.callbacks  # moving k to 0 while the handler iterates keeps every turn
    callbacks.remove(callback)
    callbacks.insert(0, callback)
    return True


def at_base_batch(args, schedule: BatchSizeSchedule):
    """A function turning the Trainer's own LR factors, built for ``max_steps`` steps of the schedule, into the
    factors of a run over the same samples at the first stage's batch B0: a transformers factor (a
    ``functools.partial`` with ``num_training_steps``) gets the run's B0 steps as its horizon, and where the Trainer
    set its warmup from ``args``, ``args.get_warmup_steps`` of those steps (``warmup_steps`` ≥ 1 are read as B0
    steps, a ratio below 1 as a share of the samples). A factor of your own is left as written (for B0)."""
    base_steps = -(-schedule.samples_before_step(args.max_steps) // schedule.base_batch)
    trainer_warmup = args.get_warmup_steps(args.max_steps)

    def rebuild(factor):
        keywords = getattr(factor, "keywords", None)
        if not isinstance(factor, functools.partial) or not keywords or not (
                "num_training_steps" in keywords or "num_warmup_steps" in keywords):
            return factor
        changed = dict(keywords)
        if "num_training_steps" in changed:
            changed["num_training_steps"] = base_steps
        if changed.get("num_warmup_steps") == trainer_warmup:
            changed["num_warmup_steps"] = args.get_warmup_steps(base_steps)
        return functools.partial(factor.func, *factor.args, **changed)

    return rebuild


def _per_process_batches(trainer, args) -> int | None:
    """Micro-batches a process draws in one epoch (sequential or shuffled map-style data; None without a length)."""
    try:
        rows = len(trainer.train_dataset)
    except TypeError:
        return None
    per_process = -(-rows // args.world_size)
    return per_process // args.per_device_train_batch_size if args.dataloader_drop_last else \
        -(-per_process // args.per_device_train_batch_size)


class BatchSizeScheduleCallback(TrainerCallback):
    """Train ``schedule`` in an unmodified ``transformers.Trainer`` (module docstring: how, and its limits).
    ``TrainingArguments`` need ``max_steps`` > 0 (``training_arguments`` gives it)."""

    def __init__(self, schedule: BatchSizeSchedule):
        self.schedule = schedule.for_trainers()
        self.plan: list[int] = []
        self.samples_seen = 0
        self.resume_position: tuple[int, int] | None = None  # (epochs, micro-batches) the last resume skipped
        self._trainer: Trainer | None = None
        self._user_accumulation: int | None = None
        self._param_group_scaling = False
        self._walk: EpochWalk | None = None  # the run's steps under the Trainer's epoch rule

    def _accumulation_for(self, step: int) -> int:
        return self.plan[self.schedule.stage_index_at_step(step)]

    def _samples_before_step(self, step: int) -> int:
        """Samples the first ``step`` optimizer steps trained: the schedule's, less what an epoch's end cut off."""
        return self._walk.samples_before_step(self.schedule, step) if self._walk else \
            self.schedule.samples_before_step(step)

    def on_init_end(self, args, state, control, **kwargs):
        self._trainer = find_trainer(self)
        self._replace_trainer_method("_init_training_state", self._skip_to_the_schedules_position)
        self._replace_trainer_method("set_initial_training_values", self._run_enough_epochs)
        self._replace_trainer_method("get_batch_samples", self._pull_each_step_alone)

    def _replace_trainer_method(self, name: str, wrap) -> None:
        """Replace the Trainer's method ``name`` on its instance by ``wrap(original)``, once: a replacement is marked
        (``SCHEDULE_MARK``), so a second ``on_init_end`` leaves it; a Trainer without the method is left as it is."""
        trainer = self._trainer
        original = getattr(trainer, name, None)
        if trainer is None or original is None or getattr(original, SCHEDULE_MARK, None) is not None:
            return
        replacement = wrap(original)
        setattr(replacement, SCHEDULE_MARK, self.schedule)
        setattr(trainer, name, replacement)

    def _skip_to_the_schedules_position(self, original):
        """``_init_training_state`` resuming at the schedule's data position (``_resume_position``), not at
        ``global_step`` × the Trainer's current accumulation."""
        def init_training_state(*positional, **keywords):
            epochs, skipped = original(*positional, **keywords)
            trainer = self._trainer
            assert trainer is not None  # found at on_init_end, before its method was replaced
            if trainer.state.global_step == 0 or trainer.args.ignore_data_skip:
                return epochs, skipped
            self.resume_position = self._resume_position(trainer, trainer.state.global_step)
            return self.resume_position

        return init_training_state

    def _run_enough_epochs(self, original):
        """``set_initial_training_values`` having the Trainer loop over as many epochs as the schedule needs to reach
        ``max_steps``: it counts them at the first stage's accumulation and, where an epoch's end cuts steps, stops
        short (one stopped at step 18 of 20)."""
        def set_initial_training_values(args, dataloader, *positional, **keywords):
            values = list(original(args, dataloader, *positional, **keywords))
            self._walk = self._epoch_walk(args, dataloader)
            if self._walk is not None and values[0] < self._walk.epochs:
                values[0] = self._walk.epochs  # num_train_epochs; the loop stops at max_steps
            return tuple(values)

        return set_initial_training_values

    def _pull_each_step_alone(self, original):
        """``get_batch_samples`` prefetching a cut step's micro-batches only: the Trainer pulls
        ``gradient_accumulation_steps`` of them per step and divides the loss by how many it got, so a step that an
        epoch's end leaves starting off its accumulation's multiple (step 16 of 8 → 16 → 32 over 100-sample epochs:
        4 micro-batches, then step 17: 1) was pulled together with the next one and both were divided by their sum."""
        trainer = self._trainer
        assert trainer is not None  # found at on_init_end (_replace_trainer_method wraps only then)

        def get_batch_samples(epoch_iterator, num_batches, *positional, **keywords):
            cut = self._walk.samples_at(trainer.state.global_step) if self._walk else None
            if cut is not None:
                args = trainer.args
                num_batches = min(num_batches, cut // (args.per_device_train_batch_size * args.world_size))
            return original(epoch_iterator, num_batches, *positional, **keywords)

        return get_batch_samples

    def _epoch_walk(self, args, dataloader) -> EpochWalk | None:
        try:
            batches = len(dataloader)
        except TypeError:
            return None  # no length: one endless epoch
        if not batches or args.max_steps <= 0:
            return None
        return odd_steps_at_epoch_ends(self.schedule, micro_batch=args.per_device_train_batch_size,
                                       world_size=args.world_size, epoch_micro_batches=batches,
                                       max_steps=args.max_steps)

    def _resume_position(self, trainer, step: int) -> tuple[int, int]:
        """(epochs, micro-batches into the epoch) a process has drawn before optimizer step ``step``, the steps an
        epoch's end cut counted as they were drawn (``epoch_steps.trainer_position``)."""
        args = trainer.args
        per_epoch = _per_process_batches(trainer, args)
        if not per_epoch:
            return 0, self.schedule.samples_before_step(step) // (args.per_device_train_batch_size * args.world_size)
        return trainer_position(self.schedule, micro_batch=args.per_device_train_batch_size,
                                world_size=args.world_size, epoch_micro_batches=per_epoch, step=step)

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, train_dataloader=None,
                       **kwargs):
        plan = self.schedule.accumulation_plan(args.per_device_train_batch_size, args.world_size)
        if args.max_steps <= 0:
            raise ScheduleError("BatchSizeScheduleCallback needs TrainingArguments(max_steps=...): the trainer counts "
                                "epochs at the first batch; max_steps=schedule.optimizer_steps(total_samples)")
        if args.gradient_accumulation_steps != plan[0]:
            raise ScheduleError(f"gradient_accumulation_steps is {args.gradient_accumulation_steps}, the first stage "
                                f"needs {plan[0]} (training_arguments(schedule, ...) gives all three settings)")
        step = state.global_step
        if step and self.resume_position is None and self.schedule.stage_at_step(step).start_step > 0:
            raise ScheduleError(f"resuming at step {step}, in a later stage, needs the callback in "
                                "Trainer(callbacks=[...]) so it can set the data skip; the Trainer would skip the "
                                "first stage's count")
        self._user_accumulation, self.plan = args.gradient_accumulation_steps, plan
        args.gradient_accumulation_steps = self._accumulation_for(step)
        if self._walk is None and train_dataloader is not None:  # set_initial_training_values was not seen
            self._walk = self._epoch_walk(args, train_dataloader)
        self.samples_seen = self._samples_before_step(step)
        warn_odd_steps(self._walk.odd if self._walk else [], logger,
                       why="an epoch's end makes the Trainer cut steps short")
        self._param_group_scaling = not scale_lambda_scheduler(lr_scheduler, self.schedule,
                                                               at_base_batch=at_base_batch(args, self.schedule))
        if self._param_group_scaling:
            logger.warning("the LR scheduler is not a LambdaLR: the schedule's LR multiplier is applied around "
                           "optimizer.step() and the logged learning_rate is the unscaled one")
        move_ahead_of_reporters(self)
        logger.info("batch-size schedule, per_device_train_batch_size %d × %d process(es):\n%s",
                    args.per_device_train_batch_size, args.world_size,
                    self.schedule.describe(args.per_device_train_batch_size, args.world_size))

    def on_train_end(self, args, state, control, **kwargs):
        if self._user_accumulation is not None:  # a second train() on this Trainer starts as the first did
            args.gradient_accumulation_steps = self._user_accumulation
        self.resume_position = None

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
        self.samples_seen = self._samples_before_step(state.global_step)
        args.gradient_accumulation_steps = self._accumulation_for(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or not self.plan:
            return
        step = max(state.global_step - 1, 0)
        stage = self.schedule.stage_at_step(step)
        cut = self._walk.samples_at(step) if self._walk else None  # where an epoch's end made the step another size
        batch = stage.batch_size if cut is None else cut
        extra = {"effective_batch_size": batch, "samples_seen": self.samples_seen, "lr_multiplier": stage.lr_multiplier}
        if "train_runtime" in logs and logs["train_runtime"] > 0:
            extra["train_samples_per_second"] = round(self.samples_seen / logs["train_runtime"], 3)
        logs.update(extra)
        if state.log_history:
            state.log_history[-1].update(extra)


class NoiseScaleCallback(TrainerCallback):
    """B_simple during an HF Trainer run (McCandlish et al. 2018; ``torch_loop.NoiseScaleHook``): the first
    micro-batch's gradient against the whole step's, read before clipping (at the end of the step's last
    backward, after DDP's all-reduce), unscaled under fp16's GradScaler. Needs ``gradient_accumulation_steps`` ≥ 2;
    logs ``b_simple``, ``noise_grad_sq``, ``noise_trace_sigma`` with the trainer's logs, and says once, as a warning
    and as ``b_simple_above_batch`` = 1, when B_simple passes the current batch (after the averages hold about 50
    steps). ``decay``: the moving averages' (0.98, about 50 steps)."""

    def __init__(self, decay: float = 0.98):
        self.decay = decay
        self.hook: NoiseScaleHook | None = None
        self._micro = 0
        self._big = math.nan
        self._accumulation, self._batch = 1, 0
        self._said = False

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        trainer = find_trainer(self)
        scaler = getattr(getattr(trainer, "accelerator", None), "scaler", None)
        self.hook = NoiseScaleHook(list(model.parameters()), args.per_device_train_batch_size, self.decay,
                                   scaler=scaler)
        move_ahead_of_reporters(self, trainer)

    def on_step_begin(self, args, state, control, **kwargs):
        self._micro, self._big = 0, math.nan
        self._accumulation = args.gradient_accumulation_steps  # of this step (a schedule may change it at its end)
        self._batch = self._accumulation * args.per_device_train_batch_size * args.world_size

    def on_substep_end(self, args, state, control, **kwargs):
        # Runs after every micro-batch but the step's last: the first reads the small batch's gradient, the one
        # before the last arms the read of the whole step's (at accumulation 2 they are the same call).
        assert self.hook is not None  # made by on_train_begin
        if self._micro == 0:
            self.hook.read_small(self._accumulation)
        self._micro += 1
        if self._micro == self._accumulation - 1:
            self._arm_last_backward()

    def _arm_last_backward(self) -> None:
        """Read |G|² once the step's last backward has finished (clipping comes after it, and no callback runs
        in between): a one-shot hook on a parameter queues a callback on autograd's engine, which queues itself
        once more so it runs after DDP's own end-of-backward all-reduce."""
        assert self.hook is not None  # armed by on_step_begin once the hook is made
        hook = self.hook
        parameters = hook.parameters
        param = parameters[0]
        handle: RemovableHandle  # bound below, before the hook can run

        def read() -> None:
            self._big = hook.sqnorm()

        def on_grad(_):
            handle.remove()
            engine = torch.autograd.Variable._execution_engine
            engine.queue_callback(lambda: engine.queue_callback(read))

        handle = param.register_post_accumulate_grad_hook(on_grad)

    def on_step_end(self, args, state, control, **kwargs):
        if self._accumulation < 2 or not math.isfinite(self._big):
            return
        assert self.hook is not None  # made by on_train_begin
        batch = self._batch
        reading = self.hook.read_big(batch, state.global_step - 1, sqnorm=self._big)
        if reading and reading.above_batch and not self._said:
            self._said = True
            logger.warning("B_simple %.1f has passed the batch %d at step %d (an average over %d steps): a larger "
                           "batch would still use its samples well", reading.b_simple, batch, state.global_step,
                           reading.steps)

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
