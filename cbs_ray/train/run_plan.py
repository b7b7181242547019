"""What one trial trains, in samples (``RunPlan``): its batch schedule, where it starts and stops, where it
reports, the LR of every step (``LrSchedule``) and what its method adds to the loop (``train.hooks.TrainingHooks``);
and each trial's name from its Tune config (``trial_name``).

A from-scratch trial's plan trains its one batch from 0 to the equal-sample budget, reports at every
``eval_every_samples`` milestone and adds nothing to the loop; its LR is the alpha rule's peak at its batch on its
own warmup-and-decay schedule, counted in its own optimizer steps.

A plan names no search method: what a method's runs do besides is their hooks (branch mode's trunk publishes its
state and a branch starts from it, ``methods.branch.hooks``; a ladder run averages its iterates,
``methods.ladder.hooks``), built by the method with the plans (``methods.branch.runs``, ``methods.ladder.search``).
A run whose LR is laid out in samples (``LrSchedule.in_samples``) follows one warmup-and-decay shape shared by runs
at other batches::

    lr(samples, B) = lr_peak · (B / lr_batch) ** alpha · lr_multiplier(samples // lr_batch, schedule)

so a run that starts from another's checkpoint continues that run's schedule where it was, and a run whose batch
grows steps its LR up with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from cbs_ray.maths.budget import milestones, optimizer_steps
from cbs_ray.maths.lr_schedule import lr_multiplier, scaled_lr, warmup_steps
from cbs_ray.records.trial_point import batch_of
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.hooks import TrainingHooks

__all__ = ["RunPlan", "LrSchedule", "report_points", "scratch_run_plan", "trial_name"]


@dataclass(frozen=True)
class LrSchedule:
    """The LR of a run's steps: a peak at ``batch`` scaled to the batch in use by the alpha rule, warmup then
    decay, in optimizer steps at ``batch``."""

    batch: int
    """The batch the schedule is counted in optimizer steps of, and the alpha rule scales the peak from: the
    trunk's in a branch search, the trial's own from scratch."""
    alpha: float = 1.0
    """The alpha rule's exponent: peak LR ∝ (batch / ``batch``) ** alpha."""
    peak: float = 0.0
    """The peak LR at ``batch``."""
    warmup_steps: int = 0
    """Warmup, in optimizer steps at ``batch``."""
    total_steps: int = 1
    """Length of the schedule (warmup, then decay to zero at its end), in optimizer steps at ``batch``: the
    budget's."""
    decay: str = "linear"
    """The decay after warmup (``training.lr_decay``: linear, cosine or constant)."""
    warmup_fraction: float = 0.0
    """The warmup fraction the trial reports (``warmup_fraction``): its own steps' from scratch, the trunk's
    schedule's in a branch search, the ladder's."""
    in_samples: bool = False
    """The LR of a step is ``RunPlan.lr_at`` of the samples it starts at and its batch: a schedule laid out in
    samples, shared with runs at other batches (module docstring); False: the warmup-and-decay multiplier of the
    run's own steps."""


@dataclass(frozen=True)
class RunPlan:
    """What one trial trains, in samples: a from-scratch trial's, or one run's of a search of several kinds of
    runs (module docstring). The loop asks the plan, never a method, what the trial does."""

    batch_schedule: tuple[tuple[int, int], ...]
    """``(from_samples, batch)`` pairs, ascending; the first starts at ``start_samples``."""
    start_samples: int
    """0, or the trunk checkpoint a branch starts from."""
    stop_samples: int
    """The budget, or a branch's checkpoint + window."""
    report_at: tuple[int, ...]
    """Absolute samples at which the run evaluates and reports (ascending; the last is ``stop_samples``)."""
    lr: LrSchedule
    """The LR of its steps."""
    seed_offset: int = 0
    """The run's seed offset (a repeat's; branch mode: 0, the trunk's seed, or a validation seed)."""
    eval_subset: Optional[int] = None
    """A from-scratch trial's reports before its last evaluate only the evaluation set's first ``eval_subset``
    examples (``training.eval_subset_examples``); the last report, where the answer is read, evaluates all of
    them. None: every report evaluates all of them."""
    largest_batch: int = 0
    """The search's largest batch (trunk's and branches'). Every run of the search trains on a whole number of
    these from the training set (0: all of it, from scratch), so that every run, whatever its micro-batch, has
    the same epoch boundaries: a branch continues the trunk's data order exactly, and so does a restart of
    either."""
    fixes_micro_batch: bool = False
    """Its micro-batch is fixed for the run, planned for the smallest batch of its schedule, and a larger batch
    accumulates more of them (``noise_micro_batch``); False: the trial's one batch is split as the micro-batch cap
    allows (``maths.budget.plan_batch``)."""
    noise_scale_off: str = ""
    """Why the run leaves the gradient noise scale unmeasured, which its reports say in its place
    (``noise_scale_note``); "": it measures it (with ``training.noise_scale``)."""
    hooks: TrainingHooks = TrainingHooks()
    """What its method adds to the loop (``train.hooks``); nothing from scratch."""

    def __setstate__(self, state: dict) -> None:
        """A plan as pickled, or as a plan of the earlier flat form pickled it (a restored experiment's callbacks
        hold their plans): that one's schedule, span and LR, with no hooks. The driver only reads those of a
        restored callback's plans; every trial trains a plan built afresh."""
        self.__dict__.update(state if "lr" in state else _from_flat_form(state))

    # ---- what the run does -------------------------------------------------------------------------
    def evaluation_limit(self, samples: int) -> Optional[int]:
        """How many of the evaluation set's examples the report at ``samples`` evaluates (None: all of them):
        ``eval_subset`` before the run's last report, all of them at it."""
        return None if samples >= self.stop_samples else self.eval_subset

    @property
    def noise_micro_batch(self) -> Optional[int]:
        """The micro-batch cap of a run with a fixed micro-batch (``fixes_micro_batch``) at ``lr.batch`` on one
        worker with the noise scale on: half that batch, so the trunk's B_simple is measured (the probe needs
        accumulation ≥ 2) and branch mode's schedule run trains exactly as the trunk while their batches agree.
        None for any other run."""
        if not self.fixes_micro_batch or self.batch_schedule[0][1] != self.lr.batch or self.lr.batch < 2:
            return None
        return self.lr.batch // 2

    @property
    def title(self) -> str:
        """What the trial's first line says of the run (its hooks': ``TrainingHooks.title``)."""
        return self.hooks.title(self)

    # ---- batches, steps and LR ---------------------------------------------------------------------
    def batch_at(self, samples: int) -> int:
        """The batch of the step that starts at ``samples``."""
        batch = self.batch_schedule[0][1]
        for start, b in self.batch_schedule:
            if samples >= start:
                batch = b
        return batch

    def peak_lr(self, batch: int) -> float:
        """The alpha rule's peak LR at ``batch``: ``lr.peak`` scaled from ``lr.batch``."""
        return self.lr.peak * (batch / self.lr.batch) ** self.lr.alpha

    def lr_at(self, samples: int, batch: Optional[int] = None) -> float:
        """The LR of the step that starts at ``samples`` on a schedule laid out in samples (module docstring)."""
        batch = self.batch_at(samples) if batch is None else batch
        multiplier = lr_multiplier(samples // self.lr.batch, self.lr.warmup_steps, self.lr.total_steps,
                                   decay=self.lr.decay)
        return self.peak_lr(batch) * multiplier

    def lr_factors(self) -> Callable[[int], float]:
        """The LR of this run's k-th optimizer step as a factor of the LR the optimizer is built at (``peak_lr``
        of the first batch), so layer-wise LR decay's groups keep their ratios: what ``LambdaLR`` takes. Counted
        in steps taken, so a restart's scheduler state is the step it resumes at. From scratch the warmup-and-
        decay multiplier of step k; laid out in samples (``lr.in_samples``) ``lr_at`` of the samples step k starts
        at and its batch, over that peak."""
        if not self.lr.in_samples:
            warmup, total, decay = self.lr.warmup_steps, self.lr.total_steps, self.lr.decay
            return lambda step: lr_multiplier(step, warmup, total, decay=decay)
        steps, reference = self.steps(), self.peak_lr(self.batch_schedule[0][1])

        def factor(step: int) -> float:
            return self.lr_at(*steps[min(step, len(steps) - 1)]) / reference

        return factor

    def steps(self) -> tuple[tuple[int, int], ...]:
        """``(samples at its start, batch)`` of every optimizer step this run takes, from ``start_samples`` to
        ``stop_samples``. A ``ValueError`` where the steps would not land exactly on the stop or a report point (a
        point inside a step would be silently skipped)."""
        steps, samples = [], self.start_samples
        while samples < self.stop_samples:
            batch = self.batch_at(samples)
            steps.append((samples, batch))
            samples += batch
        landed = {start for start, _ in steps[1:]} | {samples}
        missed = [p for p in (self.stop_samples, *self.report_at) if p not in landed]
        if missed:
            raise ValueError(f"{self.title or 'a from-scratch run'}: its steps (batches {self.batch_schedule} from "
                             f"{self.start_samples}) do not land on sample {missed[0]}")
        return tuple(steps)

    @property
    def total_steps(self) -> int:
        """Optimizer steps of this run, from its start to its stop."""
        return len(self.steps())

    def samples_after(self, step: int) -> int:
        """Samples seen (absolute) after ``step`` optimizer steps of this run."""
        steps = self.steps()
        return self.stop_samples if step >= len(steps) else steps[step][0]


def _from_flat_form(state: dict) -> dict:
    """A plan's fields from the earlier flat form's (``lr_batch``, ``lr_peak``, …, ``measures_noise_scale``, the
    methods' flags): its LR grouped, its noise-scale note kept, no hooks."""
    lr = LrSchedule(batch=state["lr_batch"], alpha=state.get("alpha", 1.0), peak=state.get("lr_peak", 0.0),
                    warmup_steps=state.get("lr_warmup_steps", 0), total_steps=state.get("lr_total_steps", 1),
                    decay=state.get("lr_decay", "linear"), warmup_fraction=state.get("warmup_fraction", 0.0),
                    in_samples=state.get("lr_in_samples", False))
    return {"batch_schedule": state["batch_schedule"], "start_samples": state["start_samples"],
            "stop_samples": state["stop_samples"], "report_at": state["report_at"], "lr": lr,
            "seed_offset": state.get("seed_offset", 0), "eval_subset": state.get("eval_subset"),
            "largest_batch": state.get("largest_batch", 0), "fixes_micro_batch": state.get("fixes_micro_batch", False),
            "noise_scale_off": "" if state.get("measures_noise_scale", True) else state.get("noise_scale_note", ""),
            "hooks": TrainingHooks()}


def report_points(start: int, stop: int, every: int, extra: Sequence[int] = ()) -> tuple[int, ...]:
    """Where a run from ``start`` to ``stop`` reports: every ``every`` milestone after its start, each of ``extra``
    inside the run, and its stop."""
    regular = range(every * (start // every + 1), stop + 1, every)  # the milestones after start, up to stop
    return tuple(sorted({*regular, *(x for x in extra if start < x <= stop), stop}))


def scratch_run_plan(spec: SearchSpec, batch: int, alpha: float, warmup_fraction: float, budget_samples: int, *,
                 seed_offset: int = 0) -> RunPlan:
    """A from-scratch trial's plan: ``batch`` from 0 to the budget, reporting at every ``eval_every_samples``
    milestone, saving nothing for other runs; its peak LR the alpha rule's from ``training.base_lr`` at
    ``base_batch``, its warmup ``warmup_fraction`` of its own optimizer steps, then ``training.lr_decay``;
    ``seed_offset``: a repeat's."""
    t = spec.training
    steps = optimizer_steps(budget_samples, batch)
    lr = LrSchedule(batch=batch, alpha=alpha, peak=scaled_lr(t.base_lr, batch, t.base_batch, alpha),
                    warmup_steps=warmup_steps(warmup_fraction, steps), total_steps=steps, decay=t.lr_decay,
                    warmup_fraction=warmup_fraction)
    return RunPlan(batch_schedule=((0, batch),), start_samples=0, stop_samples=budget_samples,
                   report_at=tuple(milestones(budget_samples, t.eval_every_samples)), lr=lr,
                   eval_subset=t.eval_subset_examples, seed_offset=seed_offset)


def trial_name(config: dict, trial_id: str) -> str:
    """A trial's name (and its directory's) from its Tune config: its batch; with a ``role`` (branch mode's runs) the
    role, or a validation run's kind (``control``), a run that starts from a checkpoint its start and alpha, and
    a seed offset other than 0."""
    role, batch = config.get("role"), batch_of(config)
    if not role:
        return f"B{batch}_{trial_id}"
    seed = int(config.get("seed_offset", 0) or 0)
    seeded = f"_s{seed}" if seed else ""
    start = f"_from{config['start_samples']}_a{config['alpha']:g}" if config.get("start_samples") else ""
    return f"{config.get('control') or role}_B{batch}{start}{seeded}_{trial_id}"
