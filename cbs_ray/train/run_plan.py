"""What one trial trains, in samples (``RunPlan``): its batch schedule, where it starts and stops, where it
reports and saves, and the LR of every step; and the Tune configs that name each run of a branch search.

A from-scratch trial's plan trains its one batch from 0 to the equal-sample budget, reports at every
``eval_every_samples`` milestone and saves nothing for other runs; its LR is the alpha rule's peak at its
batch on its own warmup-and-decay schedule, counted in its own optimizer steps.

A branch search's runs (``search.method: branch``; Merrill et al. 2025, arXiv 2505.23971) are the trunk, the
branches and the recommended schedule's run (``ROLES``). The LR of every one of them follows the trunk's
warmup-and-decay shape laid out in samples, at the level the alpha rule gives the batch in use::

    lr(samples, B) = trunk_peak_lr · (B / B_trunk) ** alpha · lr_multiplier(samples // B_trunk, trunk schedule)

so a branch from a checkpoint continues the trunk's schedule where the trunk was, and the schedule run's LR
steps up with its batch: with alpha 0.5 (the default) that is the paper's √k·η, and × √2 per doubling of the
schedule. A branch keeps the checkpoint's weights and, by default (``branch.optimizer_state: keep``, the
paper's), Adam's moments and step count. That is not because the moments are batch-free: Adam's second moment
estimates E[g²] = G² + σ²/B per coordinate, which falls with the batch, so a branch at k·B starts with a
preconditioner made for B (too large a v, so smaller steps) that β2 = 0.999 forgets over ~1 000 steps, more than
a window; a reset (``reset``) instead starts fresh moments with their bias correction, a transient of its own.
docs/branch-mode.md has what the two gave on the tiny causal LM. A branch at seed offset 0 continues the trunk's
data order from the checkpoint, so trunk and branches see the same examples in the window; another offset
(``branch.repeats``) reshuffles the epoch with its own seed from the same position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from cbs_ray.maths.budget import milestones, optimizer_steps
from cbs_ray.maths.lr_schedule import lr_multiplier, scaled_lr, warmup_steps
from cbs_ray.records.trial_point import BATCH_KEY, batch_of, encode_batch
from cbs_ray.spec.branch_section import Branching
from cbs_ray.spec.schema import SearchSpec

__all__ = ["RunPlan", "ROLES", "branch_run_plan", "scratch_plan", "trunk_config", "branch_configs", "schedule_config",
           "validation_configs", "validation_seed_offsets", "format_batch_schedule", "parse_batch_schedule",
           "trial_name"]

ROLES = ("trunk", "branch", "schedule")
"""The runs of a branch search: the trunk, the branches, and the schedule's validation runs (the schedule and
its fixed-batch controls, on seeds held out from the trunk's)."""


@dataclass(frozen=True)
class RunPlan:
    """What one trial trains, in samples: a from-scratch trial's, or one run's of a branch search (module
    docstring). The loop asks the plan, never the role, what the trial does."""

    role: Optional[str]
    """``trunk``, ``branch`` or ``schedule`` (``ROLES``) in a branch search; None for a from-scratch trial
    (what the report's ``role`` column says of it)."""
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

    # ---- what the run does -------------------------------------------------------------------------
    def evaluation_limit(self, samples: int) -> Optional[int]:
        """How many of the evaluation set's examples the report at ``samples`` evaluates (None: all of them):
        ``eval_subset`` before the run's last report, all of them at it."""
        return None if samples >= self.stop_samples else self.eval_subset

    @property
    def publishes_checkpoints(self) -> bool:
        """The trunk: it publishes its state at each of ``save_at`` for the branches (``checkpoint_path``) and
        marks its end in ``checkpoint_dir`` (``train.checkpoint.TRUNK_DONE``), so a branch never waits forever."""
        return self.role == "trunk"

    @property
    def starts_from_trunk(self) -> bool:
        """A branch: a fresh start (not a restart from its own checkpoint) takes the trunk's weights, optimizer
        state and data position at ``start_samples``."""
        return self.role == "branch"

    @property
    def measures_noise_scale(self) -> bool:
        """Whether the run measures the gradient noise scale (with ``training.noise_scale``): a from-scratch
        trial and the trunk, whose B_simple is what the branch summary plots beside CBS(t)."""
        return self.role in (None, "trunk")

    @property
    def noise_scale_note(self) -> str:
        """What the reports of a run that does not measure the noise scale say instead; "" for one that does."""
        if self.measures_noise_scale:
            return ""
        return f"not measured on a branch-mode {self.role} run (the trunk's is plotted)"

    @property
    def fixes_micro_batch(self) -> bool:
        """A branch search's run: its micro-batch is fixed for the run, planned for the smallest batch of its
        schedule, and a larger batch accumulates more of them. False from scratch: the trial's one batch is
        split as the micro-batch cap allows (``maths.budget.plan_batch``)."""
        return self.role is not None

    @property
    def noise_micro_batch(self) -> Optional[int]:
        """The micro-batch cap of a branch search's run at the trunk's batch on one worker with the noise scale
        on: half the trunk's batch, so the trunk's B_simple is measured (the probe needs accumulation ≥ 2) and
        the schedule run trains exactly as the trunk while their batches agree. None for any other run."""
        if self.role is None or self.batch_schedule[0][1] != self.lr_batch or self.lr_batch < 2:
            return None
        return self.lr_batch // 2

    @property
    def title(self) -> str:
        """What the trial's first line says of the run: its role, samples and batches in a branch search; ""
        from scratch (its one batch is in the batch plan the line shows)."""
        if self.role is None:
            return ""
        return (f"{self.role}, samples {self.start_samples} to {self.stop_samples}, batches "
                f"{[b for _, b in self.batch_schedule]}")

    @property
    def report_columns(self) -> dict:
        """The report's ``role`` and ``start_samples``: the run's in a branch search, None from scratch (the
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
        """The LR of the step that starts at ``samples`` in a branch search (module docstring)."""
        batch = self.batch_at(samples) if batch is None else batch
        multiplier = lr_multiplier(samples // self.lr_batch, self.lr_warmup_steps, self.lr_total_steps,
                                   decay=self.lr_decay)
        return self.peak_lr(batch) * multiplier

    def lr_factors(self) -> Callable[[int], float]:
        """The LR of this run's k-th optimizer step as a factor of the LR the optimizer is built at (``peak_lr``
        of the first batch), so layer-wise LR decay's groups keep their ratios: what ``LambdaLR`` takes. Counted
        in steps taken, so a restart's scheduler state is the step it resumes at. From scratch the warmup-and-
        decay multiplier of step k; in a branch search ``lr_at`` of the samples step k starts at and its batch,
        over that peak."""
        if self.role is None:
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


def _reports(start: int, stop: int, every: int, extra: Sequence[int] = ()) -> tuple[int, ...]:
    regular = range(every * (start // every + 1), stop + 1, every)  # the milestones after start, up to stop
    return tuple(sorted({*regular, *(x for x in extra if start < x <= stop), stop}))


def branch_run_plan(spec: SearchSpec, br: Branching, point: dict) -> RunPlan:
    """The plan of one run of a branch search, built on the driver from its point (made by ``trunk_config``,
    ``branch_configs`` or ``schedule_config``: its ``role``, ``log2_batch``, ``alpha``, ``checkpoint_dir``, a
    branch's ``start_samples``, a schedule run's ``batch_schedule`` and ``control``) and the spec's ``branch:``
    section resolved against the budget (``br``). Every trial gets the plans of its experiment's runs
    (``train.trial_plans.PresetPlans``), never a config to interpret."""
    role, every, budget_samples = point["role"], spec.training.eval_every_samples, br.budget_samples
    common = dict(lr_batch=br.trunk_batch, checkpoint_dir=point.get("checkpoint_dir", ""),
                  alpha=float(point["alpha"]), lr_peak=br.trunk_peak_lr, lr_warmup_steps=br.trunk_warmup_steps,
                  lr_total_steps=br.trunk_total_steps, lr_decay=spec.training.lr_decay,
                  largest_batch=br.largest_batch, seed_offset=int(point.get("seed_offset", 0)),
                  warmup_fraction=float(point["warmup_fraction"]))
    if role == "trunk":
        ends = [c + br.window_samples for c in br.checkpoints]
        return RunPlan(role=role, batch_schedule=((0, br.trunk_batch),), start_samples=0,
                       stop_samples=budget_samples, report_at=_reports(0, budget_samples, every,
                                                                       [*br.checkpoints, *ends]),
                       save_at=br.checkpoints, **common)
    if role == "branch":
        start, batch = int(point["start_samples"]), batch_of(point)
        stop = start + br.window_samples
        return RunPlan(role=role, batch_schedule=((start, batch),), start_samples=start, stop_samples=stop,
                       report_at=_reports(start, stop, every), resets_optimizer=br.optimizer_state == "reset",
                       **common)
    if role == "schedule":
        schedule = parse_batch_schedule(point["batch_schedule"])
        if point.get("lr_from") == TUNED:  # a fair control: its own LR schedule, as the from-scratch search ran it
            common.update(_tuned_lr(spec, schedule[0][1], common, budget_samples))
        return RunPlan(role=role, batch_schedule=schedule, start_samples=0, stop_samples=budget_samples,
                       report_at=_reports(0, budget_samples, every), control=point.get("control", "schedule"),
                       **common)
    raise ValueError(f"unknown branch-mode role {role!r} (known: {', '.join(ROLES)})")


TUNED = "tuned"
"""A validation control's ``lr_from``: its batch's best configuration from a from-scratch search at the same
budget (``branch.controls_from``, ``analysis.control_configs``); ``trunk`` (or none): the trunk's LR schedule."""


def _tuned_lr(spec: SearchSpec, batch: int, common: dict, budget_samples: int) -> dict:
    """A fixed-batch control's LR as a from-scratch trial at its (alpha, warmup) has it (``scratch_plan``): peak
    the alpha rule's from ``training.base_lr`` at ``base_batch``, warmup its fraction of the control's own steps."""
    t, steps = spec.training, optimizer_steps(budget_samples, batch)
    return dict(lr_batch=batch, lr_peak=scaled_lr(t.base_lr, batch, t.base_batch, common["alpha"]),
                lr_warmup_steps=warmup_steps(common["warmup_fraction"], steps), lr_total_steps=steps)


def scratch_plan(spec: SearchSpec, batch: int, alpha: float, warmup_fraction: float, budget_samples: int, *,
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
    """A trial's name (and its directory's) from its Tune config: its batch; in a branch search its role, and a
    branch's checkpoint, alpha and seed, a validation run's kind and seed."""
    role, batch = config.get("role"), batch_of(config)
    seed = int(config.get("seed_offset", 0) or 0)
    seeded = f"_s{seed}" if seed else ""
    if role == "branch":  # branch mode: which checkpoint, batch, alpha and seed
        return f"branch_B{batch}_from{config['start_samples']}_a{config['alpha']:g}{seeded}_{trial_id}"
    if role == "schedule":  # the validation: which run kind and seed
        return f"{config.get('control') or 'schedule'}_B{batch}{seeded}_{trial_id}"
    if role:
        return f"{role}_B{batch}_{trial_id}"
    return f"B{batch}_{trial_id}"


def trunk_config(br: Branching, checkpoint_dir: str) -> dict:
    """The trunk's Tune config."""
    return {"role": "trunk", BATCH_KEY: encode_batch(br.trunk_batch), "alpha": br.trunk_alpha,
            "warmup_fraction": br.warmup_fraction, "start_samples": 0, "checkpoint_dir": checkpoint_dir,
            "seed_offset": 0}


def branch_configs(br: Branching, checkpoint_dir: str) -> list[dict]:
    """One Tune config per (checkpoint, branch batch, alpha, seed offset): the branches, earliest checkpoint
    first; with ``branch.repeats`` > 1 also the trunk's continuations at its own batch with the other seeds
    (one alpha: at the trunk's batch every alpha gives the trunk's LR). Every config names its ``seed_offset``:
    Tune fills a key a preset point lacks from the space, at random."""
    configs = []
    for start in br.checkpoints:
        for batch in br.run_batches():
            alphas = br.alphas[:1] if batch == br.trunk_batch else br.alphas
            for alpha in alphas:
                for seed in br.seed_offsets:
                    if batch == br.trunk_batch and seed == 0:
                        continue  # that is the trunk itself
                    configs.append({"role": "branch", BATCH_KEY: encode_batch(batch), "alpha": alpha,
                                    "warmup_fraction": br.warmup_fraction, "start_samples": start,
                                    "checkpoint_dir": checkpoint_dir, "seed_offset": seed})
    return configs


def schedule_config(br: Branching, schedule: Sequence[Sequence[int]], alpha: float, *, control: str = "schedule",
                    seed_offset: int = 0, tuned: Optional[tuple[float, float]] = None) -> dict:
    """A run of the schedule's validation: the batch following ``schedule`` (``[start_samples, batch]`` pairs;
    a fixed-batch control is one pair), the LR following the alpha rule at ``alpha`` on the trunk's schedule
    laid out in samples, seed ``seed_offset`` (0: the trunk's seed and data order). ``tuned``: a control's
    (alpha, warmup fraction) from a from-scratch search, trained on its own LR schedule (``lr_from: tuned``)."""
    alpha, warmup = tuned if tuned is not None else (alpha, br.warmup_fraction)
    return {"role": "schedule", BATCH_KEY: encode_batch(int(schedule[0][1])), "alpha": alpha,
            "warmup_fraction": warmup, "start_samples": 0,
            "batch_schedule": format_batch_schedule(schedule), "checkpoint_dir": "",
            "control": control, "seed_offset": int(seed_offset), "lr_from": "trunk" if tuned is None else TUNED}


def format_batch_schedule(schedule: Sequence[Sequence[int]]) -> str:
    """A schedule as the Tune config holds it, ``"0:8 1024:32"``: a string, since Tune checks a preset point's
    list value against its space item by item (and fails on the pairs)."""
    return " ".join(f"{int(s)}:{int(b)}" for s, b in schedule)


def parse_batch_schedule(value) -> tuple[tuple[int, int], ...]:
    """``format_batch_schedule``'s string back as ``(start, batch)`` pairs; a list of pairs as an experiment
    written before it holds them."""
    if isinstance(value, str):
        return tuple((int(s), int(b)) for s, b in (pair.split(":") for pair in value.split()))
    return tuple((int(s), int(b)) for s, b in value)


def validation_configs(br: Branching, schedule: Sequence[Sequence[int]], alpha: float,
                       controls: Sequence[tuple[str, int]],
                       tuned: Optional[dict[int, tuple[float, float]]] = None) -> list[dict]:
    """Every run of the schedule's validation: the schedule and each fixed-batch control (``(name, batch)``)
    on ``br.validation_seeds`` seeds, seed by seed (seed s of every kind shares its initial weights and data
    order). The seeds are held out from the trunk's (offsets 1…n; the trunk is offset 0): the run the schedule
    was read from is not one of its controls. ``tuned``: batch → (alpha, warmup fraction) of the controls that
    train at a from-scratch search's best configuration (``branch.controls_from``); the rest at the trunk's."""
    configs = []
    for seed in validation_seed_offsets(br):
        configs.append(schedule_config(br, schedule, alpha, seed_offset=seed))
        for name, batch in controls:
            configs.append(schedule_config(br, [[0, int(batch)]], alpha, control=name, seed_offset=seed,
                                           tuned=(tuned or {}).get(int(batch))))
    return configs


def validation_seed_offsets(br: Branching) -> range:
    """The validation's seed offsets, disjoint from the trunk's 0: 1…``validation_seeds``."""
    return range(1, br.validation_seeds + 1)
