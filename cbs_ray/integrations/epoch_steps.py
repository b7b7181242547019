"""Where an epoch's end makes an optimizer step another size than its stage's batch, found before training and
said once: HF Trainer, Lightning and the plain loop each call ``odd_steps_at_epoch_ends`` or
``short_micro_batch_steps`` and then ``warn_odd_steps``.

- **HF Trainer and Lightning** end a step at a micro-batch whose place in the epoch ``p`` has ``(p + 1) %
  accumulation == 0``, or at the epoch's last micro-batch: a step that would run past the epoch's end is cut there,
  and after a cut (or a stage start that is not a multiple of the new accumulation within the epoch) the next
  steps end early too. ``odd_steps_at_epoch_ends`` walks that rule over the run (one pass of arithmetic per
  optimizer step) and gives each step of another size, and the epochs the loop needs to reach ``max_steps``: the
  HF Trainer counts its epochs at the first stage's accumulation and would stop short (one stopped at step 18 of 20).
  ``trainer_position`` is where a resumed run must skip to, the cut steps counted as drawn. The callbacks use the
  walk to make each odd step a mean over its own samples (HF: prefetched alone; Lightning: its gradient rescaled
  and zeroed before it).
- **The plain loop** (``torch_loop.scheduled_steps``) draws micro-batches across epoch ends, so a step is never
  cut; but a loader that keeps a short last micro-batch (``drop_last=False`` with the epoch's samples not a
  multiple of the micro-batch) puts it into one step an epoch: ``short_micro_batch_steps`` names those steps.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
from dataclasses import dataclass
from typing import Iterator, Optional

from cbs_ray.integrations.schedule import BatchSizeSchedule

__all__ = ["OddStep", "EpochWalk", "odd_steps_at_epoch_ends", "trainer_position", "short_micro_batch_steps",
           "warn_odd_steps"]

MAX_NAMED = 3
"""Odd steps the warning names one by one (the rest are counted)."""


@dataclass(frozen=True)
class OddStep:
    """An optimizer step that trains another number of samples than its stage's batch."""

    step: int  # 0-based optimizer step
    samples: int  # samples it trains (all processes)
    batch_size: int  # its stage's batch

    def phrase(self) -> str:
        return f"step {self.step} trains {self.samples} samples, not its stage's {self.batch_size}"


@dataclass
class EpochWalk:
    """The steps of a run under a trainer's epoch rule: those of another size, and the epochs it takes."""

    odd: list[OddStep]
    epochs: int  # passes over the data to reach ``max_steps`` (the last one maybe partial)

    def samples_at(self, step: int) -> Optional[int]:
        """Samples step ``step`` trains where it is odd; None where it is its stage's batch."""
        return self._by_step.get(step)

    def samples_before_step(self, schedule: BatchSizeSchedule, step: int) -> int:
        """Samples the first ``step`` optimizer steps trained: the schedule's, less what the odd steps among them
        did not train (a run trained 264 of 320 and logged 320 as ``samples_seen``)."""
        return schedule.samples_before_step(step) - self._shortfall[bisect.bisect_left(self._steps, step)]

    @functools.cached_property
    def _by_step(self) -> dict[int, int]:
        return {o.step: o.samples for o in self.odd}

    @functools.cached_property
    def _steps(self) -> list[int]:
        return [o.step for o in self.odd]

    @functools.cached_property
    def _shortfall(self) -> list[int]:
        """``_shortfall[i]``: samples the first ``i`` odd steps trained short of their stages' batches."""
        return list(itertools.accumulate((o.batch_size - o.samples for o in self.odd), initial=0))


def _trainer_steps(schedule: BatchSizeSchedule, micro_batch: int, world_size: int, epoch_micro_batches: int,
                   steps: int) -> Iterator[tuple[int, int, int, int, int]]:
    """``(step, epoch, place, drawn, accumulation)`` for each of the first ``steps`` optimizer steps under the
    trainers' rule: the 0-based epoch and the place in it of the step's first micro-batch, how many it draws."""
    if epoch_micro_batches < 1:
        raise ValueError(f"an epoch needs at least one micro-batch, got {epoch_micro_batches}")
    plan = schedule.accumulation_plan(micro_batch, world_size)
    epoch, place = 0, 0
    for step in range(steps):
        accumulation = plan[schedule.stage_index_at_step(step)]
        last = min((place // accumulation + 1) * accumulation, epoch_micro_batches) - 1
        yield step, epoch, place, last - place + 1, accumulation
        place = last + 1
        if place == epoch_micro_batches:
            epoch, place = epoch + 1, 0


def odd_steps_at_epoch_ends(schedule: BatchSizeSchedule, *, micro_batch: int, world_size: int,
                            epoch_micro_batches: int, max_steps: int) -> EpochWalk:
    """The steps of ``max_steps`` that HF Trainer or Lightning (module docstring: the rule) train at another size
    than their stage's, with ``epoch_micro_batches`` micro-batches of ``micro_batch`` samples an epoch on each of
    ``world_size`` processes, and the epochs they need. Every micro-batch is taken as full (a short last one of
    the epoch is the loader's business: ``short_micro_batch_steps``)."""
    odd, epochs = [], 0
    for step, epoch, _, drawn, accumulation in _trainer_steps(schedule, micro_batch, world_size,
                                                              epoch_micro_batches, max_steps):
        epochs = epoch + 1
        if drawn != accumulation:
            odd.append(OddStep(step, drawn * micro_batch * world_size, schedule.stage_at_step(step).batch_size))
    return EpochWalk(odd, max(epochs, 1))


def trainer_position(schedule: BatchSizeSchedule, *, micro_batch: int, world_size: int, epoch_micro_batches: int,
                     step: int) -> tuple[int, int]:
    """(epochs done, micro-batches into the epoch) a process has drawn before optimizer step ``step`` under the
    trainers' rule, cut steps counted as drawn: where a resumed HF Trainer must skip to."""
    epoch, place = 0, 0
    for _, epoch, place, drawn, _ in _trainer_steps(schedule, micro_batch, world_size, epoch_micro_batches, step):
        place += drawn
    if place == epoch_micro_batches:
        epoch, place = epoch + 1, 0
    return epoch, place


def short_micro_batch_steps(schedule: BatchSizeSchedule, *, micro_batch: int, world_size: int,
                            epoch_samples: int, steps: int) -> list[OddStep]:
    """The plain loop's steps among the first ``steps`` that hold an epoch's short last micro-batch: each process
    draws ``epoch_samples`` samples an epoch (``len(sampler)``) in micro-batches of ``micro_batch``, the last one
    short where they do not divide (a loader with ``drop_last=False``)."""
    short = epoch_samples % micro_batch
    if not short or steps < 1:
        return []
    per_epoch, per_pass = -(-epoch_samples // micro_batch), micro_batch * world_size
    odd, index = [], per_epoch - 1  # index: the next short micro-batch's place in the run's draw
    for step in range(steps):
        batch = schedule.stage_at_step(step).batch_size
        end = schedule.samples_before_step(step) // per_pass + batch // per_pass  # past the step's micro-batches
        shorts = 0
        while index < end:
            shorts, index = shorts + 1, index + per_epoch
        if shorts:
            odd.append(OddStep(step, batch - shorts * (micro_batch - short) * world_size, batch))
    return odd


def warn_odd_steps(odd: list[OddStep], logger: logging.Logger, *, why: str) -> None:
    """One warning naming the odd steps (the first ``MAX_NAMED``, then how many more); nothing where there are
    none."""
    if not odd:
        return
    more = f" (and {len(odd) - MAX_NAMED} more)" if len(odd) > MAX_NAMED else ""
    logger.warning("%s: %s%s; an epoch whose samples are a multiple of every batch trains none", why,
                   "; ".join(o.phrase() for o in odd[:MAX_NAMED]), more)
