"""What one trial trains, in samples (``RunPlan``): its batch schedule, where it starts and stops, where it
reports and saves, and the LR of every step; and each trial's name from its Tune config (``trial_name``).

A from-scratch trial's plan trains its one batch from 0 to the equal-sample budget, reports at every
``eval_every_samples`` milestone and saves nothing for other runs; its LR is the alpha rule's peak at its
batch on its own warmup-and-decay schedule, counted in its own optimizer steps.

A plan names no search method (issue 46): what a method's runs need of the training loop is a typed option of
the plan (``publishes_checkpoints``, ``starts_from_checkpoint``, ``lr_in_samples``, ``fixes_micro_batch``,
``measures_noise_scale``, ``reports_train_loss_ema``), set by the method that builds it (branch mode's trunk,
branches and schedule runs: ``methods.branch.runs``); ``role`` is only the label its reports carry. A run whose
LR is laid out in samples follows one warmup-and-decay shape shared by runs at other batches::

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

__all__ = ["RunPlan", "report_points", "scratch_run_plan", "trial_name"]


@dataclass(frozen=True)
class RunPlan:
    """What one trial trains, in samples: a from-scratch trial's, or one run's of a search of several kinds of
    runs (module docstring). The loop asks the plan's options, never its role, what the trial does."""

    role: Optional[str]
    """The run's kind as its reports label it (the report's ``role`` column, the trial's first line): the method
    that builds the plan names it (branch mode: ``methods.branch.runs.ROLES``); None for a from-scratch trial.
    Nothing in training compares it."""
    lr_batch: int
    """The batch the LR schedule is counted in optimizer steps of, and the alpha rule scales the peak from: the
    trunk's in a branch search, the trial's own from scratch."""
    batch_schedule: tuple[tuple[int, int], ...]
    """``(from_samples, batch)`` pairs, ascending; the first starts at ``start_samples``."""
    start_samples: int
    """0, or the trunk checkpoint a branch starts from."""
    stop_samples: int
    """The budget, or a branch's checkpoint + window."""
    report_at: tuple[int, ...]
    """Absolute samples at which the run evaluates and reports (ascending; the last is ``stop_samples``)."""
    save_at: tuple[int, ...] = ()
    """The trunk's branch checkpoints (absolute samples), saved under ``checkpoint_path``."""
    checkpoint_dir: str = ""
    """Where a branch search's trunk publishes its branch checkpoints and marks its end; "" from scratch."""
    alpha: float = 1.0
    """The alpha rule's exponent: peak LR ∝ (batch / ``lr_batch``) ** alpha."""
    lr_peak: float = 0.0
    """The peak LR at ``lr_batch``: the trunk's in a branch search, the trial's own from scratch."""
    lr_warmup_steps: int = 0
    """Warmup of the LR schedule, in optimizer steps at ``lr_batch``."""
    lr_total_steps: int = 1
    """Length of the LR schedule (warmup, then decay to zero at its end), in optimizer steps at ``lr_batch``:
    the budget's."""
    lr_decay: str = "linear"
    """The decay after warmup (``training.lr_decay``: linear, cosine or constant)."""
    seed_offset: int = 0
    """The run's seed offset (branch mode: 0, the trunk's seed; a repeat or a validation seed otherwise)."""
    control: Optional[str] = None
    """The schedule validation's run kind (``schedule``, ``small``, ``large``, ``iso_steps``); None otherwise."""
    resets_optimizer: bool = False
    """A branch that starts with fresh optimizer state (``branch.optimizer_state: reset``)."""
    eval_subset: Optional[int] = None
    """A from-scratch trial's reports before its last evaluate only the evaluation set's first ``eval_subset``
    examples (``training.eval_subset_examples``); the last report, where the answer is read, evaluates all of
    them. None: every report evaluates all of them."""
    largest_batch: int = 0
    """The search's largest batch (trunk's and branches'). Every run of the search trains on a whole number of
    these from the training set (0: all of it, from scratch), so that every run, whatever its micro-batch, has
    the same epoch boundaries: a branch continues the trunk's data order exactly, and so does a restart of
    either."""
    warmup_fraction: float = 0.0
    """The warmup fraction the trial reports (``warmup_fraction``): its own steps' from scratch, the trunk's
    schedule's in a branch search, the ladder's."""
    averages_iterates: bool = False
    """A ladder run read through the average of its iterates (``ladder.reading: ewa``): the loop keeps one
    (``train.averaging``) and evaluates it beside the raw model at every evaluation (``ewa_*`` metrics)."""
    publishes_checkpoints: bool = False
    """It publishes its state at each of ``save_at`` for other runs (``checkpoint_path``) and marks its end in
    ``checkpoint_dir`` (``train.checkpoint.TRUNK_DONE``), so a run waiting on it never waits forever (the trunk)."""
    starts_from_checkpoint: bool = False
    """A fresh start (not a restart from its own checkpoint) takes the weights, optimizer state and data position
    another run published at ``start_samples`` (``checkpoint_path``; a branch)."""
    lr_in_samples: bool = False
    """Its LR is ``lr_at`` of the samples each step starts at and its batch: a schedule laid out in samples, shared
    with runs at other batches (module docstring); False: the warmup-and-decay multiplier of its own steps."""
    fixes_micro_batch: bool = False
    """Its micro-batch is fixed for the run, planned for the smallest batch of its schedule, and a larger batch
    accumulates more of them (``noise_micro_batch``); False: the trial's one batch is split as the micro-batch cap
    allows (``maths.budget.plan_batch``)."""
    measures_noise_scale: bool = True
    """Whether it measures the gradient noise scale (with ``training.noise_scale``): a from-scratch trial and the
    trunk, whose B_simple is what the branch summary plots beside CBS(t)."""
    noise_scale_note: str = ""
    """What the reports of a run that does not measure the noise scale say instead; "" for one that does."""
    reports_train_loss_ema: bool = False
    """Its reports carry the EMA of its training loss (``train_loss_ema``: what branch mode's ``loss: train_ema``
    reads); False: None."""

    # ---- what the run does -------------------------------------------------------------------------
    def evaluation_limit(self, samples: int) -> Optional[int]:
        """How many of the evaluation set's examples the report at ``samples`` evaluates (None: all of them):
        ``eval_subset`` before the run's last report, all of them at it."""
        return None if samples >= self.stop_samples else self.eval_subset

    @property
    def noise_micro_batch(self) -> Optional[int]:
        """The micro-batch cap of a run with a fixed micro-batch (``fixes_micro_batch``) at ``lr_batch`` on one
        worker with the noise scale on: half that batch, so the trunk's B_simple is measured (the probe needs
        accumulation ≥ 2) and branch mode's schedule run trains exactly as the trunk while their batches agree.
        None for any other run."""
        if not self.fixes_micro_batch or self.batch_schedule[0][1] != self.lr_batch or self.lr_batch < 2:
            return None
        return self.lr_batch // 2

    @property
    def title(self) -> str:
        """What the trial's first line says of the run: its role, samples and batches where it has a role; ""
        from scratch (its one batch is in the batch plan the line shows)."""
        if self.role is None:
            return ""
        return (f"{self.role}, samples {self.start_samples} to {self.stop_samples}, batches "
                f"{[b for _, b in self.batch_schedule]}")

    @property
    def report_columns(self) -> dict:
        """The report's ``role`` and ``start_samples``: the run's where it has a role, None from scratch (the
        history's columns the branch analysis reads)."""
        if self.role is None:
            return {"role": None, "start_samples": None}
        return {"role": self.role, "start_samples": self.start_samples, "seed_offset": self.seed_offset,
                "control": self.control}

    # ---- batches, steps and LR ---------------------------------------------------------------------
    def batch_at(self, samples: int) -> int:
        """The batch of the step that starts at ``samples``."""
        batch = self.batch_schedule[0][1]
        for start, b in self.batch_schedule:
            if samples >= start:
                batch = b
        return batch

    def peak_lr(self, batch: int) -> float:
        """The alpha rule's peak LR at ``batch``: ``lr_peak`` scaled from ``lr_batch``."""
        return self.lr_peak * (batch / self.lr_batch) ** self.alpha

    def lr_at(self, samples: int, batch: Optional[int] = None) -> float:
        """The LR of the step that starts at ``samples`` on a schedule laid out in samples (module docstring)."""
        batch = self.batch_at(samples) if batch is None else batch
        multiplier = lr_multiplier(samples // self.lr_batch, self.lr_warmup_steps, self.lr_total_steps,
                                   decay=self.lr_decay)
        return self.peak_lr(batch) * multiplier

    def lr_factors(self) -> Callable[[int], float]:
        """The LR of this run's k-th optimizer step as a factor of the LR the optimizer is built at (``peak_lr``
        of the first batch), so layer-wise LR decay's groups keep their ratios: what ``LambdaLR`` takes. Counted
        in steps taken, so a restart's scheduler state is the step it resumes at. From scratch the warmup-and-
        decay multiplier of step k; laid out in samples (``lr_in_samples``) ``lr_at`` of the samples step k starts
        at and its batch, over that peak."""
        if not self.lr_in_samples:
            warmup, total, decay = self.lr_warmup_steps, self.lr_total_steps, self.lr_decay
            return lambda step: lr_multiplier(step, warmup, total, decay=decay)
        steps, reference = self.steps(), self.peak_lr(self.batch_schedule[0][1])

        def factor(step: int) -> float:
            return self.lr_at(*steps[min(step, len(steps) - 1)]) / reference

        return factor

    def steps(self) -> tuple[tuple[int, int], ...]:
        """``(samples at its start, batch)`` of every optimizer step this run takes, from ``start_samples`` to
        ``stop_samples``. A ``ValueError`` where the steps would not land exactly on the stop, a report point
        or a save point (a point inside a step would be silently skipped)."""
        steps, samples = [], self.start_samples
        while samples < self.stop_samples:
            batch = self.batch_at(samples)
            steps.append((samples, batch))
            samples += batch
        landed = {start for start, _ in steps[1:]} | {samples}
        missed = [p for p in (self.stop_samples, *self.report_at, *self.save_at) if p not in landed]
        if missed:
            raise ValueError(f"{self.role or 'from-scratch'} run: its steps (batches {self.batch_schedule} from "
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

    def checkpoint_path(self, samples: int) -> str:
        """Where the trunk's checkpoint at ``samples`` is written and branches read it: a directory holding
        ``train.checkpoint.STATE_FILE``."""
        from cbs_ray.train.checkpoint import trunk_checkpoint_path  # (torch: a plan is read without it)

        return trunk_checkpoint_path(self.checkpoint_dir, samples)


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
    return RunPlan(role=None, lr_batch=batch, batch_schedule=((0, batch),), start_samples=0,
                   stop_samples=budget_samples, report_at=tuple(milestones(budget_samples, t.eval_every_samples)),
                   alpha=alpha, lr_peak=scaled_lr(t.base_lr, batch, t.base_batch, alpha),
                   lr_warmup_steps=warmup_steps(warmup_fraction, steps), lr_total_steps=steps, lr_decay=t.lr_decay,
                   eval_subset=t.eval_subset_examples, seed_offset=seed_offset, warmup_fraction=warmup_fraction)


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
