"""A batch-size schedule as data: the stages a run trains at, the LR multiplier each stage takes (the alpha
rule, (B / B0)^alpha: √2 per doubling at alpha 0.5) and the accumulation plan at a fixed micro-batch.

Pure Python (no torch, no Ray): the HF Trainer and Lightning callbacks and the plain-loop helper all read
it, so they train the same steps.

**Where a stage starts.** A stage begins at the first optimizer-step boundary of the stage before it at or
after its nominal start: every optimizer step trains one whole batch of one stage. ``stage.start_samples`` is
that boundary and ``stage.start_step`` the optimizer step that trains it first (the same step numbers as the
report's Levanter snippet, ``analysis.branch_schedule.schedule_steps``).

**Accumulation.** At a micro-batch of ``m`` samples per process on ``w`` processes, a stage of batch ``B``
accumulates ``B / (m·w)`` micro-batches per optimizer step; ``B`` must be a multiple of ``m·w`` (a
``DistributedSampler`` then hands every process the same number of micro-batches each step). The loss of
each micro-batch is divided by the accumulation steps (a mean over equal micro-batches); for language
models with padding or masked labels the exact mean over tokens divides each micro-batch's summed loss by
the step's label-token count instead (HF Trainer's ``num_items_in_batch``; ``torch_loop.ScheduledStep``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

__all__ = ["BatchSizeSchedule", "Stage", "ScheduleError"]


class ScheduleError(ValueError):
    """A schedule that cannot be trained as given (the message says which stage and why)."""


@dataclass(frozen=True)
class Stage:
    """One stage of the schedule, in samples (sequences)."""

    start_samples: int  # the first sample it trains: an optimizer-step boundary of the stage before
    batch_size: int  # effective (global) batch, samples per optimizer step
    lr_multiplier: float  # (batch_size / first batch) ** alpha
    start_step: int  # the first optimizer step it trains (0-based)
    nominal_start: int  # the start as given (in samples)


class BatchSizeSchedule:
    """Stages ``[(start, batch), …]`` in ``unit`` ("samples", or "tokens" with ``tokens_per_sample``: packed
    sequences of that many tokens, every sample a full sequence). The first stage starts at 0. ``alpha`` is the
    LR scaling exponent (0.5: √2 per doubling; 1: linear). ``budget_samples`` (optional) is the run's length:
    ``optimizer_steps()`` with no argument counts the steps over it. ``peak_lr`` (optional) is the first
    stage's peak LR, as cbs-ray measured it (``from_summary``); the integrations scale the trainer's own LR."""

    def __init__(self, stages: Sequence[Sequence[int]], alpha: float = 0.5, *, unit: str = "samples",
                 tokens_per_sample: Optional[int] = None, budget_samples: Optional[int] = None,
                 peak_lr: Optional[float] = None):
        if unit not in ("samples", "tokens"):
            raise ScheduleError(f"unit must be 'samples' or 'tokens', got {unit!r}")
        if unit == "tokens" and not (tokens_per_sample and tokens_per_sample > 0):
            raise ScheduleError("a schedule in tokens needs tokens_per_sample (the packed sequence length)")
        if not stages:
            raise ScheduleError("a schedule needs at least one stage")
        if not (math.isfinite(alpha) and alpha >= 0):
            raise ScheduleError(f"alpha must be a finite number >= 0, got {alpha}")
        per = tokens_per_sample if unit == "tokens" and tokens_per_sample else 1
        pairs = []
        for i, (start, batch) in enumerate(stages):
            if unit == "tokens" and (start % per or batch % per):
                raise ScheduleError(f"stage {i}: start {start} and batch {batch} tokens must be whole sequences "
                                    f"of {per} tokens")
            pairs.append((int(start) // per, int(batch) // per))
        if pairs[0][0] != 0:
            raise ScheduleError(f"the first stage must start at 0, got {stages[0][0]}")
        for i, (start, batch) in enumerate(pairs):
            if batch < 1:
                raise ScheduleError(f"stage {i}: batch size must be at least one sample, got {stages[i][1]}")
            if i and start <= pairs[i - 1][0]:
                raise ScheduleError(f"stage {i}: starts must increase, got {stages[i - 1][0]} then {stages[i][0]}")
        self.alpha, self.unit, self.tokens_per_sample = float(alpha), unit, tokens_per_sample
        self.budget_samples, self.peak_lr = budget_samples, peak_lr
        self.stages = self._stages(pairs)

    def _stages(self, pairs: list[tuple[int, int]]) -> tuple[Stage, ...]:
        out: list[Stage] = []
        first, samples, step = pairs[0][1], 0, 0
        for i, (nominal, batch) in enumerate(pairs):
            if i:  # round up to the previous stage's next step boundary
                prev = out[-1]
                steps = -(-(nominal - prev.start_samples) // prev.batch_size)
                samples, step = prev.start_samples + steps * prev.batch_size, prev.start_step + steps
            out.append(Stage(samples, batch, (batch / first) ** self.alpha, step, nominal))
        return tuple(out)

    # ---- built from a cbs-ray answer ------------------------------------------------------------------------

    @classmethod
    def from_summary(cls, path, *, alpha: Optional[float] = None) -> "BatchSizeSchedule":
        """The schedule of a cbs-ray ``summary.json`` (a path to it or to its report folder): branch mode's
        ``batch_size_schedule`` at its ``schedule_alpha``, or a from-scratch search's recommended batch as one
        stage at its alpha, with the budget and peak LR the answer was measured at. ``alpha`` overrides."""
        path = Path(path)
        if path.is_dir():
            path = path / "summary.json"
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ScheduleError(f"cannot read a summary.json at {path}: {e}") from None
        tokens = summary.get("tokens_per_sample")
        if summary.get("batch_size_schedule"):
            trunk = summary.get("trunk") or {}
            return cls(summary["batch_size_schedule"], alpha if alpha is not None else
                       float(summary.get("schedule_alpha") or 0.5), tokens_per_sample=tokens,
                       budget_samples=summary.get("budget_samples"), peak_lr=trunk.get("peak_lr"))
        rec = summary.get("recommendation")
        if not rec:
            raise ScheduleError(f"{path} holds neither a batch_size_schedule (branch mode) nor a recommendation")
        return cls([(0, int(rec["batch_size"]))], alpha if alpha is not None else float(rec.get("alpha", 0.5)),
                   tokens_per_sample=tokens, budget_samples=rec.get("budget_samples") or summary.get("budget_samples"),
                   peak_lr=rec.get("peak_lr"))

    # ---- reading it ---------------------------------------------------------------------------------------

    def stage_at_samples(self, samples_seen: int) -> Stage:
        """The stage that trains the step starting after ``samples_seen`` samples."""
        return next(s for s in reversed(self.stages) if s.start_samples <= samples_seen)

    def stage_at_step(self, step: int) -> Stage:
        """The stage that trains optimizer step ``step`` (0-based)."""
        return next(s for s in reversed(self.stages) if s.start_step <= step)

    def samples_before_step(self, step: int) -> int:
        """Samples trained by the first ``step`` optimizer steps."""
        stage = self.stage_at_step(step)
        return stage.start_samples + (step - stage.start_step) * stage.batch_size

    def optimizer_steps(self, total_samples: Optional[int] = None) -> int:
        """Optimizer steps to train ``total_samples`` (default the budget): HF Trainer's ``max_steps``. A partial
        last batch counts as a step (the helpers train it whole: round the budget to a step boundary)."""
        total = self.budget_samples if total_samples is None else total_samples
        if total is None:
            raise ScheduleError("optimizer_steps needs total_samples: this schedule has no budget_samples")
        stage = self.stage_at_samples(max(int(total) - 1, 0))
        return stage.start_step + -(-(int(total) - stage.start_samples) // stage.batch_size)

    def accumulation_steps(self, batch_size: int, micro_batch: int, world_size: int = 1) -> int:
        """Micro-batches each process accumulates for one optimizer step of ``batch_size`` samples."""
        per_pass = micro_batch * world_size
        if micro_batch < 1 or world_size < 1 or batch_size % per_pass:
            raise ScheduleError(f"batch {batch_size} is not a whole number of micro-batches: micro-batch "
                                f"{micro_batch} × {world_size} process(es) = {per_pass} samples a pass")
        return batch_size // per_pass

    def accumulation_plan(self, micro_batch: int, world_size: int = 1) -> list[int]:
        """Accumulation steps per stage at ``micro_batch`` samples per process on ``world_size`` processes
        (checked for every stage at once, so a plan that cannot run fails before training)."""
        return [self.accumulation_steps(s.batch_size, micro_batch, world_size) for s in self.stages]

    def steps(self, total_samples: Optional[int] = None) -> Iterator[tuple[int, Stage]]:
        """``(step, stage)`` for every optimizer step over ``total_samples`` (default the budget)."""
        for step in range(self.optimizer_steps(total_samples)):
            yield step, self.stage_at_step(step)

    def describe(self, micro_batch: Optional[int] = None, world_size: int = 1) -> str:
        """One line per stage: where it starts, its batch, LR multiplier (and accumulation at a micro-batch)."""
        lines = []
        for s in self.stages:
            acc = (f", {self.accumulation_steps(s.batch_size, micro_batch, world_size)} × {micro_batch} × "
                   f"{world_size}" if micro_batch else "")
            lines.append(f"from sample {s.start_samples} (step {s.start_step}): batch {s.batch_size}{acc}, "
                         f"LR × {s.lr_multiplier:.4g}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        pairs = [(s.start_samples, s.batch_size) for s in self.stages]
        return f"BatchSizeSchedule({pairs}, alpha={self.alpha})"
