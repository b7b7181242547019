"""A batch-size schedule as data: the stages a run trains at, the LR multiplier each stage takes (the alpha
rule, (B / B0)^alpha: √2 per doubling at alpha 0.5) and the accumulation plan at a fixed micro-batch.

Pure Python (no torch, no Ray): the HF Trainer and Lightning callbacks and the plain-loop helper all read
it, so they train the same steps.

**Where a stage starts.** A stage begins at the first optimizer-step boundary of the stage before it at or
after its nominal start: every optimizer step trains one whole batch of one stage. ``stage.start_samples`` is
that boundary and ``stage.start_step`` the optimizer step that trains it first (the same step numbers as the
report's Levanter snippet, ``methods.branch.reading_schedule.schedule_steps``).

**Accumulation.** At a micro-batch of ``m`` samples per process on ``w`` processes, a stage of batch ``B``
accumulates ``B / (m·w)`` micro-batches per optimizer step; ``B`` must be a multiple of ``m·w`` (a
``DistributedSampler`` then hands every process the same number of micro-batches each step). The loss of
each micro-batch is divided by the accumulation steps (a mean over equal micro-batches); for language
models with padding or masked labels the exact mean over tokens divides each micro-batch's summed loss by
the step's label-token count instead (HF Trainer's ``num_items_in_batch``; ``torch_loop.ScheduledStep``).
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

from cbs_ray.integrations.errors import ScheduleError
from cbs_ray.integrations.summary_file import real_number, schedule_arguments, whole_number
from cbs_ray.maths.lr_schedule import lr_multiplier

__all__ = ["BatchSizeSchedule", "Stage", "ScheduleError", "BOUNDARY_RULES", "SCHEDULE_MARK"]

logger = logging.getLogger(__name__)

SCHEDULE_MARK = "cbs_ray_schedule"
"""The attribute that marks an LR factor already laid out in samples (``lr_factor``, ``scale_lambda_scheduler``). It
lives on the factor *function*, and ``LambdaLR.state_dict`` saves no function's attributes, so a checkpoint never
claims a fresh scheduler is scaled."""

BOUNDARY_RULES = ("step", "batch")
"""Where a stage may start: ``step``, at a step boundary of the stage before (every step one whole batch; a plain
loop needs no more); ``batch``, there and at a multiple of its own batch too (HF Trainer and Lightning end a step
where the epoch's micro-batch count is a multiple of the accumulation, OLMo-core's rule of deferring a change to
the next boundary that fits)."""


@dataclass(frozen=True)
class Stage:
    """One stage of the schedule, in samples (sequences)."""

    start_samples: int  # the first sample it trains: an optimizer-step boundary of the stage before
    batch_size: int  # effective (global) batch, samples per optimizer step
    lr_multiplier: float  # (batch_size / first batch) ** alpha
    start_step: int  # the first optimizer step it trains (0-based)
    nominal_start: int  # the start as given (in samples)


def _first_multiple(start: int, step_batch: int, steps: int, batch: int) -> int:
    """The least k ≥ ``steps`` with start + k·step_batch a multiple of ``batch`` (``start`` is a multiple of
    ``step_batch``, so one exists within batch / gcd(step_batch, batch) steps)."""
    return next(k for k in range(steps, steps + batch + 1) if (start + k * step_batch) % batch == 0)


def _ramp_start(prev_start: int, prev_batch: int, nominal: int, batch: int, boundaries: str) -> int:
    """Where a ramp's stage of ``batch`` starts: the latest valid boundary (``BOUNDARY_RULES``) at or before its
    nominal start, at least one step of the stage before after that stage's start; the first valid one after it
    where there is none. Rounding down keeps the ramp within its ``over_samples``; deferring every start (the earlier
    rule) stretched 8 → 24 over 128 samples to 240."""
    def fits(k: int) -> bool:
        return boundaries != "batch" or (prev_start + k * prev_batch) % batch == 0

    latest = (nominal - prev_start) // prev_batch
    period = batch // math.gcd(prev_batch, batch) if boundaries == "batch" else 1  # valid k recur this often
    down = [k for k in range(latest, max(0, latest - period), -1) if fits(k)]
    if down:
        return prev_start + down[0] * prev_batch
    k = max(1, latest + 1)
    return prev_start + _first_multiple(prev_start, prev_batch, k, batch) * prev_batch if boundaries == "batch" \
        else prev_start + k * prev_batch


class BatchSizeSchedule:
    """Stages ``[(start, batch), …]`` in ``unit`` ("samples", or "tokens" with ``tokens_per_sample``: packed
    sequences of that many tokens, every sample a full sequence). The first stage starts at 0. ``alpha`` is the
    LR scaling exponent (0.5: √2 per doubling; 1: linear). ``budget_samples`` (optional) is the run's length:
    ``optimizer_steps()`` with no argument counts the steps over it. ``peak_lr`` (optional) is the first
    stage's peak LR, as cbs-ray measured it (``from_summary``); the integrations scale the trainer's own LR.
    ``warmup_samples`` (optional) is the LR warmup in samples and ``lr_decay`` the decay after it (linear,
    cosine or constant, to zero at the budget): ``lr_at`` reads this shape. ``boundaries``: where a stage may
    start (``BOUNDARY_RULES``); a stage whose nominal start is not such a boundary is deferred to the next one.
    A batch smaller than the one before is refused unless ``allow_decrease``."""

    def __init__(self, stages: Sequence[Sequence[int]], alpha: float = 0.5, *, unit: str = "samples",
                 tokens_per_sample: Optional[int] = None, budget_samples: Optional[int] = None,
                 peak_lr: Optional[float] = None, warmup_samples: Optional[int] = None, lr_decay: str = "linear",
                 boundaries: str = "step", allow_decrease: bool = False):
        if unit not in ("samples", "tokens"):
            raise ScheduleError(f"unit must be 'samples' or 'tokens', got {unit!r}")
        if boundaries not in BOUNDARY_RULES or lr_decay not in ("linear", "cosine", "constant"):
            raise ScheduleError(f"boundaries must be one of {BOUNDARY_RULES} and lr_decay linear, cosine or "
                                f"constant, got {boundaries!r}, {lr_decay!r}")
        if tokens_per_sample is not None:
            tokens_per_sample = whole_number(tokens_per_sample, "tokens_per_sample", minimum=1)
        if unit == "tokens" and not tokens_per_sample:
            raise ScheduleError("a schedule in tokens needs tokens_per_sample (the packed sequence length)")
        if isinstance(stages, (str, bytes, dict)) or not stages:
            raise ScheduleError("a schedule needs at least one stage, as a list of (start, batch) pairs")
        self.alpha = real_number(alpha, "alpha", high=4.0)
        per: int = tokens_per_sample if unit == "tokens" and tokens_per_sample else 1
        pairs = []
        for i, stage in enumerate(stages):
            if isinstance(stage, (str, bytes, dict)) or not hasattr(stage, "__len__") or len(stage) != 2:
                raise ScheduleError(f"stage {i} must be a (start, batch) pair, got {stage!r:.80}")
            start = whole_number(stage[0], f"stage {i} start")
            batch = whole_number(stage[1], f"stage {i} batch size", minimum=1)
            if unit == "tokens" and (start % per or batch % per):
                raise ScheduleError(f"stage {i}: start {start} and batch {batch} tokens must be whole sequences "
                                    f"of {per} tokens")
            pairs.append((start // per, batch // per))
        if pairs[0][0] != 0:
            raise ScheduleError(f"the first stage must start at 0, got {stages[0][0]}")
        for i, (start, batch) in enumerate(pairs[1:], 1):
            if start <= pairs[i - 1][0]:
                raise ScheduleError(f"stage {i}: starts must increase, got {stages[i - 1][0]} then {stages[i][0]}")
            if batch < pairs[i - 1][1] and not allow_decrease:
                raise ScheduleError(f"stage {i}: batch {batch} is smaller than the {pairs[i - 1][1]} before it "
                                    "(pass allow_decrease=True to train a decreasing schedule)")
        self.unit, self.tokens_per_sample, self.boundaries = unit, tokens_per_sample, boundaries
        self.allow_decrease, self.lr_decay, self._pairs = allow_decrease, lr_decay, pairs
        self.budget_samples = None if budget_samples is None else whole_number(budget_samples, "budget_samples",
                                                                                minimum=1)
        self.peak_lr = None if peak_lr is None else real_number(peak_lr, "peak_lr", high=1e3, low_open=True)
        self.warmup_samples = None if warmup_samples is None else whole_number(warmup_samples, "warmup_samples")
        self.stages = self._stages(pairs)
        self._warn_on_a_budget_inside_a_step()

    def _warn_on_a_budget_inside_a_step(self) -> None:
        """Say, as a warning, where ``budget_samples`` ends inside an optimizer step: ``optimizer_steps()`` counts that
        step whole (every step trains one whole batch), so the run trains past the budget (a ramp to 24
        over a 320-sample budget trained 336, silently)."""
        if self.budget_samples is None:
            return
        steps = self.optimizer_steps()
        trained = self.samples_before_step(steps)
        if trained > self.budget_samples:
            last = self.stage_at_step(steps - 1).batch_size
            warnings.warn(f"budget_samples {self.budget_samples} ends inside step {steps - 1} (batch {last}, samples "
                          f"{trained - last} to {trained}): every step trains a whole batch, so optimizer_steps() "
                          f"runs {trained} samples, {trained - self.budget_samples} past the budget; a budget on a "
                          f"step boundary ({trained - last} or {trained}) trains exactly it", UserWarning,
                          stacklevel=3)

    def _stages(self, pairs) -> tuple[Stage, ...]:
        first, out = pairs[0][1], [Stage(0, pairs[0][1], 1.0, 0, 0)]
        for nominal, batch in pairs[1:]:
            prev = out[-1]
            steps = -(-(nominal - prev.start_samples) // prev.batch_size)  # the next step boundary at or after
            if self.boundaries == "batch":  # ... that is a multiple of this stage's batch too
                steps = _first_multiple(prev.start_samples, prev.batch_size, steps, batch)
            samples, step = prev.start_samples + steps * prev.batch_size, prev.start_step + steps
            out.append(Stage(samples, batch, (batch / first) ** self.alpha, step, nominal))
        return tuple(out)

    def with_boundaries(self, boundaries: str) -> "BatchSizeSchedule":
        """The same schedule with stage starts deferred by ``boundaries`` (``BOUNDARY_RULES``)."""
        return BatchSizeSchedule(self._pairs, self.alpha, tokens_per_sample=self.tokens_per_sample,
                                 budget_samples=self.budget_samples, peak_lr=self.peak_lr,
                                 warmup_samples=self.warmup_samples, lr_decay=self.lr_decay, boundaries=boundaries,
                                 allow_decrease=self.allow_decrease)

    def for_trainers(self, *, warn: bool = True) -> "BatchSizeSchedule":
        """This schedule as HF Trainer and Lightning can train it (``boundaries="batch"``), the shift of every
        stage start that moves said once, as a warning."""
        deferred = self.with_boundaries("batch")
        shifts = [f"stage {i} (batch {new.batch_size}) from sample {old.start_samples} to {new.start_samples}"
                  for i, (old, new) in enumerate(zip(self.stages, deferred.stages)) if old != new]
        if shifts and warn:
            logger.warning("a trainer ends a step where the micro-batch count is a multiple of the accumulation, so "
                           "each stage starts at a multiple of its own batch: deferred %s", "; ".join(shifts))
        return deferred

    # ---- built from a cbs-ray answer ------------------------------------------------------------------------

    @classmethod
    def from_summary(cls, path, *, alpha: Optional[float] = None, allow_decrease: bool = False,
                     lr_decay: str = "linear") -> "BatchSizeSchedule":
        """The schedule of a cbs-ray ``summary.json`` (a path to it or to its report folder): branch mode's
        ``batch_size_schedule`` at its ``schedule_alpha`` with the trunk's peak LR and warmup; a from-scratch
        search's recommended batch as one stage at its alpha, peak LR and warmup; or the ladder's predicted batch
        (branch mode's schedule where the ladder carries one), with the budget the answer was measured at.
        ``alpha`` overrides. Anything malformed is one ``ScheduleError`` naming the file and the field
        (``summary_file``)."""
        arguments = schedule_arguments(path)
        stages = arguments.pop("stages")
        if alpha is not None:
            arguments["alpha"] = alpha
        try:
            return cls(stages, allow_decrease=allow_decrease, lr_decay=lr_decay, **arguments)
        except ScheduleError as e:
            raise ScheduleError(f"{path}: {e}") from None

    # ---- a ramp -----------------------------------------------------------------------------------------------

    @classmethod
    def ramp(cls, start: int, end: int, over_samples: int, *, kind: str = "linear", stages: Optional[int] = None,
             multiple_of: int = 1, boundaries: str = "batch", **options) -> "BatchSizeSchedule":
        """A batch that grows from ``start`` to ``end`` over the first ``over_samples`` samples: ``stages``
        batches (default: every multiple of ``multiple_of`` between them for ``kind="linear"``, every doubling
        for ``"geometric"``), evenly spaced in samples (stage i of n nominally from i·over_samples/(n−1)), each
        batch rounded to a multiple of ``multiple_of`` (micro-batch × processes) and each start moved to the latest
        valid boundary at or before its nominal start (``boundaries``, "batch" by default so HF Trainer and
        Lightning train it as built; the first one after where none is), so the ramp reaches ``end`` by
        ``over_samples``; where the boundaries allow no such start it is said as a warning. ``options`` go to the
        constructor (``alpha``, ``budget_samples``, …; a budget that ends inside a step is warned of there)."""
        start, end = whole_number(start, "start", minimum=1), whole_number(end, "end", minimum=1)
        over, unit = whole_number(over_samples, "over_samples", minimum=1), whole_number(multiple_of, "multiple_of",
                                                                                         minimum=1)
        if end < start or start % unit or end % unit or kind not in ("linear", "geometric"):
            raise ScheduleError(f"a ramp goes up from start to end, both multiples of multiple_of {unit}, kind "
                                f"linear or geometric; got {start} to {end}, {kind!r}")
        if stages is None:
            stages = ((end - start) // unit + 1 if kind == "linear"
                      else max(1, math.ceil(math.log2(end / start) - 1e-9)) + 1)
        n = whole_number(stages, "stages", minimum=1)
        if boundaries not in BOUNDARY_RULES:
            raise ScheduleError(f"boundaries must be one of {BOUNDARY_RULES}, got {boundaries!r}")
        batches: list[tuple[int, int]] = []
        for i in range(n):
            t = i / (n - 1) if n > 1 else 1.0
            raw = start + (end - start) * t if kind == "linear" else start * (end / start) ** t
            batch = min(end, max(start, unit * round(raw / unit)))
            if not batches:
                batches.append((0, batch))
            elif batch > batches[-1][1]:
                batches.append((_ramp_start(*batches[-1], round(over * t), batch, boundaries), batch))
        if batches[-1][0] > over:
            warnings.warn(f"ramp({start}, {end}, over_samples={over}): batch {end} starts at sample {batches[-1][0]}, "
                          f"not by {over}: each stage starts at a step boundary of the one before"
                          + (" that is a multiple of its own batch (boundaries='batch', as HF Trainer and Lightning "
                             "need)" if boundaries == "batch" else "")
                          + f"; a longer over_samples or fewer stages reach {end} in time", UserWarning, stacklevel=2)
        return cls(batches, boundaries=boundaries, **options)

    # ---- reading it ---------------------------------------------------------------------------------------

    def stage_at_samples(self, samples_seen: int) -> Stage:
        """The stage that trains the step starting after ``samples_seen`` samples."""
        return next(s for s in reversed(self.stages) if s.start_samples <= samples_seen)

    def stage_at_step(self, step: int) -> Stage:
        """The stage that trains optimizer step ``step`` (0-based)."""
        return next(s for s in reversed(self.stages) if s.start_step <= step)

    def stage_index_at_step(self, step: int) -> int:
        """The index in ``stages`` (and in an ``accumulation_plan``) of the stage that trains optimizer step
        ``step``."""
        return self.stages.index(self.stage_at_step(step))

    def samples_before_step(self, step: int) -> int:
        """Samples trained by the first ``step`` optimizer steps."""
        stage = self.stage_at_step(step)
        return stage.start_samples + (step - stage.start_step) * stage.batch_size

    # ---- the LR laid out in samples -----------------------------------------------------------------------

    @property
    def base_batch(self) -> int:
        """B0, the first stage's batch: the batch an LR schedule written in optimizer steps is read at."""
        return self.stages[0].batch_size

    @property
    def warmup_steps(self) -> int:
        """The warmup in optimizer steps of the base batch (``warmup_samples`` / B0, rounded up); 0 without one (a
        schedule built by hand, a summary that records none), so ``TrainingArguments(warmup_steps=...)`` always takes
        it (None raised a ``TypeError`` there)."""
        return 0 if self.warmup_samples is None else -(-self.warmup_samples // self.base_batch)

    def lr_shape(self, base_step: int) -> float:
        """The warmup-then-decay this schedule was measured with, at optimizer step ``base_step`` of the base
        batch: ``maths.lr_schedule.lr_multiplier`` with ``warmup_steps`` and a ``lr_decay`` to zero at
        ``budget_samples`` (branch mode's trunk, ``train.run_plan.RunPlan.lr_at``)."""
        if self.budget_samples is None:
            raise ScheduleError("the LR shape needs budget_samples (where the decay ends); pass a shape of your own "
                                "to lr_at / lr_factor instead")
        return lr_multiplier(base_step, self.warmup_steps, self.budget_samples // self.base_batch,
                             decay=self.lr_decay)

    def lr_at(self, samples: int, shape: Optional[Callable[[int], float]] = None) -> float:
        """The LR factor of the step that starts after ``samples`` samples: the LR shape read at the samples seen,
        counted in steps of the base batch (``samples // B0``, as branch mode lays out its trunk's LR), times the
        stage's multiplier. ``shape`` is your own factor per base-batch step (a ``LambdaLR`` lambda written for a
        run at B0 of budget / B0 steps); default ``lr_shape``. A schedule that grows the batch so keeps the LR
        its samples would have had at B0, where indexing the shape by optimizer step would run the warmup and
        decay ahead of the samples."""
        return (shape or self.lr_shape)(int(samples) // self.base_batch) * self.stage_at_samples(samples).lr_multiplier

    def lr_factor(self, shape: Optional[Callable[[int], float]] = None) -> Callable[[int], float]:
        """``lr_at`` as a factor of optimizer step k (what ``torch.optim.lr_scheduler.LambdaLR`` takes)."""
        def factor(step: int) -> float:
            return self.lr_at(self.samples_before_step(step), shape)
        setattr(factor, SCHEDULE_MARK, self)  # scale_lambda_scheduler leaves it as it is
        return factor

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
