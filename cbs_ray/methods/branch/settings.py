"""Branch mode's own settings (``search.method: branch``; Merrill et al. 2025, "Critical Batch Size Revisited",
arXiv 2505.23971): the spec's ``branch:`` section (``BranchSettings``, its fields' checks beside them and its rules
against the rest of the spec in ``section_rule``), and the section resolved against the budget: the trunk's batch and
LR schedule, the checkpoints, the window, the branch batches and alphas, all in samples (``ResolvedBranchSettings``).
Its registry entry names this module (``SETTINGS``); the spec holds the section (``SearchSpec.section``). Pure: what
one run trains is ``methods.branch.runs``; the settings as an experiment recorded them are ``recorded``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Optional

from cbs_ray.maths.batch_ramp import geometric_checkpoints
from cbs_ray.maths.lr_schedule import scaled_lr, warmup_steps
from cbs_ray.spec.checks import (
    MAX_REPEATS,
    a_count,
    at_least,
    batch_list,
    check,
    check_power_of_two,
    reads_section,
    within,
)
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.sections import spec_tolerances

if TYPE_CHECKING:  # the spec holds this section: the type only
    from cbs_ray.spec.schema import SearchSpec

__all__ = ["SETTINGS", "BranchSettings", "GEOMETRIC", "ResolvedBranchSettings", "branch_settings",
           "resolve_branch_settings", "check_point"]

SECTION = "branch"
"""The section's key in the spec (its registry entry's ``section``)."""


@dataclass
class BranchSettings:
    """The ``branch:`` section: branch mode (``search.method: branch``; see ``cbs_ray.methods.branch.runs``). Points are
    a fraction of the budget (a number in (0, 1)) or whole samples (tokens with ``training.budget_tokens``), rounded
    down to whole batches of the largest branch batch."""

    trunk_batch_size: Optional[int] = None
    """The trunk's (small) batch. Default: the smallest of ``search.batch_sizes``."""
    checkpoints: Any = field(default_factory=lambda: [0.125, 0.25, 0.5])
    """Where the trunk saves a checkpoint that branches start from; ``geometric``: 1/32, 1/16, …, 1/2 of the
    budget (``maths.batch_ramp.geometric_checkpoints``: as many points early, where CBS(t) moves fastest, as late)."""
    window: Any = None
    """How long each branch trains from its checkpoint; CBS(t) compares losses at its end. Default: 5 % of the
    budget, raised to ``window_min_steps`` optimizer steps at the largest branch batch where that is more. The
    paper's window is 0.33 % of its budget (2 B of 600 B tokens, about 60 steps at its largest batch) and it
    warns that longer windows read larger CBS; a tiny budget cannot be that local and still let the largest
    branch take enough steps to move, hence the floor."""
    window_min_steps: int = field(default=8, metadata=check(at_least(1)))
    """The fewest optimizer steps the largest branch batch takes in a window: fewer, and its loss after the
    window says more about its first steps at a new LR than about its batch (``--dry-run`` warns)."""
    batch_sizes: Optional[list] = None
    """The branches' batches, each larger than the trunk's. Default: ``search.batch_sizes`` above the trunk's.
    Powers of two: the multipliers k are 2, 4, 8, … (the paper's are linear, 1…8; CBS(t) is reported as the
    interval [k*·B, next·B] either way)."""
    alphas: Optional[list] = None
    """LR-scaling exponents each branch tries, its best counting. Default: [0.5] alone, the paper's √k·η with
    no sweep. More than one is a deviation (the report says so): the min over noisy runs and an LR search the
    trunk never gets both push CBS(t) up."""
    tolerance: Optional[float] = field(default=None, metadata=check(within(0, 1, ends="[)")))
    """ε: a branch recovers when its loss is at most each smaller batch's (the trunk's included) + ε. Default
    0.01 in loss units (nats), the paper's; with ``tolerance_relative`` a fraction of that loss instead. For a
    loss metric it is ``search.tolerance`` too, in ``search.tolerance_unit`` (one tolerance: ``spec.tolerance``)."""
    tolerance_relative: bool = False
    """Read ``tolerance`` as relative (loss ≤ reference × (1 + ε)), the pre-paper rule; default absolute (with a
    loss metric, ``search.tolerance_unit: relative`` says the same)."""
    repeats: int = field(default=1, metadata=check(a_count(MAX_REPEATS)))
    """Runs per (checkpoint, batch), each with another seed's data order from the checkpoint, the trunk's own
    continuation included (at its batch): each comparison then has a standard error, and the close-call rule
    uses it."""
    optimizer_state: Literal["keep", "reset"] = "keep"
    """What a branch takes of the trunk's Adam state: ``keep`` its moments and step count (the paper's), or
    ``reset`` them (fresh moments and bias correction). docs/branch-mode.md has the measurement."""
    loss: Literal["eval", "train_ema"] = "eval"
    """The loss compared: ``eval`` (the fixed eval set at exactly t + Δ) or ``train_ema`` (the paper's training
    loss smoothed by an EMA with α = 0.5 per optimizer step)."""
    schedule_rule: Literal["once_per_crossing", "while_safe", "fitted", "seesaw"] = "fitted"
    """How the recommended schedule grows (default ``fitted``, chosen by a development run:
    BENCHMARKS.md#branch-mode-and-the-schedule):
    ``once_per_crossing`` doubles the batch once at each checkpoint where
    CBS(t) reaches twice it (the paper's: 8 → 16 at the first such point, → 32 at a later one);
    ``while_safe`` (the earlier default) doubles again at the same checkpoint while the branch at the
    doubled batch itself passed, not a close call (8 → 32 at one checkpoint); ``fitted`` one batch below a power
    law in samples fitted through the resolvable points, switching where it crosses the next batch, never above
    the CBS measured at a checkpoint; ``seesaw`` a doubling wherever the trunk's LR decay would halve the LR
    (Meterez et al. 2025), capped by the measured CBS (docs/branch-mode.md)."""
    seesaw_start: Literal["cbs", "tuned", "trunk"] = "tuned"
    """Where ``schedule_rule: seesaw`` starts (Seesaw starts from the batch one would train at): ``cbs``,
    the CBS at the first resolvable checkpoint; ``tuned``, the best tuned fixed batch at the budget (the
    from-scratch search of ``controls_from``: its lowest loss; ``cbs`` where there is none); ``trunk``, the
    trunk's batch (the earlier rule). The default, ``tuned``, is Seesaw's own start (Meterez et al. start from
    the tuned critical batch) and the one the pre-registered validation (bench/schedule_validation_regime.py)
    runs; no development run compared the three starts."""
    seesaw_first_doubling: float = field(default=0.0, metadata=check(within(0, 1, ends="[)")))
    """``schedule_rule: seesaw``'s late switch: no doubling before this fraction of the budget (the halvings
    before it are taken there); 0: none."""
    validate_schedule: bool = False
    """After the branches: train the recommended batch-size schedule for the whole budget against fixed-batch
    controls (the small batch, the large one the schedule reaches, the iso-step batches), each on
    ``validation_seeds`` seeds, and read the fixed-batch frontier (``--validate-schedule`` sets it)."""
    validation_seeds: int = field(default=5, metadata=check(a_count(MAX_REPEATS)))
    """Seeds per run of the schedule's validation (the schedule and every control), held out from the trunk's
    (seed offsets 1…n): the paired tests read them seed by seed."""
    controls_from: str = "none"
    """Where the validation's fixed-batch controls take their configuration (alpha, warmup): ``none``, the trunk's
    (alpha 0.5 by default, the trunk's warmup and LR schedule); a from-scratch search's experiment (its path, or
    its folder's name in ``storage_path``) at the same budget: each control batch that search completed trains
    at its best configuration there, on its own LR schedule, the rest at the trunk's; ``scratch``: that
    from-scratch search run as a stage of this experiment, before the validation (``methods.branch.search``;
    resumed like every stage). A named
    experiment that is missing, is not a from-scratch search or ran another budget is an error before anything
    trains; without ``validate_schedule`` the value is unused, and the plan says so (a warning)."""
    frontier: Literal["grid", "dense"] = "grid"
    """The validation's fixed batches: ``grid``, the schedule's own (its first and largest batch, the powers of two
    around its iso-step batch, twice its largest); ``dense``, batches √2 apart around B* (the best tuned fixed batch,
    the trunk's batch without one) from the smaller of B*/2 and the trunk's batch to twice the larger of B* and
    the largest branch batch, with every branch batch, each rounded to a batch that divides
    ``training.eval_every_samples`` (a power-of-two
    cadence leaves batches 2× apart), the same for every rule; a batch the from-scratch search did not train takes
    the configuration interpolated in log B between its tuned neighbours. ``dense`` trains about twice the
    controls."""

    def section_rule(self, spec: SearchSpec) -> None:
        """The section's rules against the rest of the spec (``spec.rules.validate`` applies them last)."""
        for rule in (_branch_mode_stands_alone, _branch_batches_are_larger_than_the_trunks,
                     _branch_points_fit_the_budget):
            rule(spec)


GEOMETRIC = "geometric"
"""``branch.checkpoints: geometric``: 1/32, 1/16, …, 1/2 of the budget (``maths.batch_ramp.geometric_checkpoints``)."""


DEFAULT_WINDOW_FRACTION = 0.05
"""The default window, a fraction of the budget (the paper's is 0.33 % of 600 B tokens: at small budgets the
floor below decides)."""
DEFAULT_WINDOW_MIN_STEPS = 8
"""The default floor of optimizer steps at the largest branch batch in one window (the paper's window is
about 60 steps at its largest batch; 8 is the fewest at which a tiny budget's largest branch has taken several
steps at its full LR, its first steps' transient not the whole window)."""
DEFAULT_ALPHAS = (0.5,)
"""The paper's branch LR: √k·η (alpha 0.5), no sweep."""


_SEESAW_START = {"cbs": "the CBS at the first resolvable checkpoint", "tuned": "the best tuned fixed batch",
                 "trunk": "the trunk's batch"}
"""``branch.seesaw_start`` in words."""


@dataclass(frozen=True)
class ResolvedBranchSettings:
    """The ``branch:`` section resolved against the budget: every value in samples."""

    trunk_batch: int
    checkpoints: tuple[int, ...]
    """Samples at which the trunk saves a checkpoint that branches start from (ascending)."""
    window_samples: int
    branch_batches: tuple[int, ...]
    alphas: tuple[float, ...]
    tolerance: float
    """ε, in loss units (nats) unless ``tolerance_relative``."""
    trunk_alpha: float
    """The trunk's alpha (the middle of ``search.alpha_range``; it sets the trunk's LR only where
    ``trunk_batch`` is not ``training.base_batch``)."""
    warmup_fraction: float
    """The trunk's warmup, a fraction of its steps (the middle of ``search.warmup_fraction_range``)."""
    trunk_peak_lr: float
    budget_samples: int
    tokens_per_sample: Optional[int] = None
    tolerance_relative: bool = False
    repeats: int = 1
    """Runs per (checkpoint, batch), seed offsets 0…repeats−1; offsets ≥ 1 also continue the trunk at its batch."""
    optimizer_state: str = "keep"
    loss: str = "eval"
    validation_seeds: int = 5
    schedule_rule: str = "fitted"
    """How the schedule doubles (``methods.branch.reading_schedule.SCHEDULE_RULES``)."""
    window_min_steps: int = DEFAULT_WINDOW_MIN_STEPS
    lr_decay: str = "linear"
    """The trunk's decay after warmup (``training.lr_decay``): the ``seesaw`` rule reads where it halves the LR."""
    seesaw_start: str = "tuned"
    """Where ``seesaw`` starts: ``cbs``, ``tuned`` or ``trunk`` (``BranchSettings.seesaw_start``)."""
    seesaw_first_doubling: float = 0.0
    """``seesaw``'s late switch, a fraction of the budget (0: none)."""
    train_examples: Optional[int] = None
    """The training set's size where known: no validation control trains a larger batch."""

    @property
    def trunk_total_steps(self) -> int:
        return self.budget_samples // self.trunk_batch

    @property
    def trunk_warmup_steps(self) -> int:
        return warmup_steps(self.warmup_fraction, self.trunk_total_steps)

    @property
    def largest_batch(self) -> int:
        return max(self.branch_batches)

    @property
    def window_steps_at_largest(self) -> int:
        """Optimizer steps the largest branch batch takes in one window."""
        return self.window_samples // self.largest_batch

    @property
    def seed_offsets(self) -> tuple[int, ...]:
        return tuple(range(self.repeats))

    def run_batches(self) -> tuple[int, ...]:
        """The batches a branch run trains at: the branch batches, and the trunk's own for its continuations
        with other seeds where ``repeats`` > 1 (the trunk is seed offset 0 of that batch)."""
        return ((self.trunk_batch,) if self.repeats > 1 else ()) + self.branch_batches

    def deviations(self) -> list[str]:
        """Where this run departs from the paper's method (Merrill et al. 2025), one phrase each."""
        out = []
        if self.alphas != (0.5,):
            out.append(f"branch LR alphas {list(self.alphas)}, the best per batch (the paper: √k·η, alpha 0.5 alone, "
                       f"no sweep; a best-of over noisy runs pushes CBS(t) up)")
        if self.tolerance_relative:
            out.append(f"tolerance relative ({self.tolerance:.3g} of the reference loss; the paper: 0.01 absolute)")
        if self.optimizer_state != "keep":
            out.append("Adam's state reset at each branch (the paper keeps the run's state)")
        rule = {"while_safe": "the schedule doubles more than once at a checkpoint where each doubling passed",
                "fitted": "the schedule follows a power law fitted to CBS(t), one batch below it, switching between "
                          "checkpoints",
                "seesaw": "the schedule doubles where the trunk's LR decay would halve the LR (Seesaw, Meterez et al. "
                          f"2025), from {_SEESAW_START[self.seesaw_start]}, capped by the measured CBS(t)"
                          + (f", no doubling before {self.seesaw_first_doubling:g} of the budget"
                             if self.seesaw_first_doubling else "")}.get(self.schedule_rule)
        if rule:
            out.append(f"{rule} (the paper: one doubling per crossing)")
        if self.loss != "train_ema":
            out.append("the eval loss at t + Δ on a fixed eval set (the paper: the training loss, EMA-smoothed)")
        return out

    def to_meta(self) -> dict:
        """What the experiment's metadata records (and the branch summary reads)."""
        return {"trunk_batch": self.trunk_batch, "checkpoints": list(self.checkpoints),
                "window_samples": self.window_samples, "branch_batches": list(self.branch_batches),
                "alphas": list(self.alphas), "tolerance": self.tolerance, "trunk_alpha": self.trunk_alpha,
                "warmup_fraction": self.warmup_fraction, "trunk_peak_lr": self.trunk_peak_lr,
                "budget_samples": self.budget_samples, "tokens_per_sample": self.tokens_per_sample,
                "tolerance_relative": self.tolerance_relative, "repeats": self.repeats,
                "optimizer_state": self.optimizer_state, "loss": self.loss,
                "validation_seeds": self.validation_seeds, "schedule_rule": self.schedule_rule,
                "window_min_steps": self.window_min_steps, "lr_decay": self.lr_decay,
                "seesaw_start": self.seesaw_start, "seesaw_first_doubling": self.seesaw_first_doubling,
                "deviations": self.deviations()}


def check_point(value, *, key: str, whole: str = "samples") -> None:
    """A checkpoint or window as the spec may give it: a float in (0, 1) (a fraction of the budget) or a whole
    number ≥ 1 of ``whole`` (samples, or tokens with a token budget); else a ``SpecError`` naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{key}: expected a fraction in (0, 1) or a whole number of samples, got {value!r}")
    if isinstance(value, float) and not 0.0 < value < 1.0:
        raise SpecError(f"{key}: a fraction of the budget must be in (0, 1), got {value}")
    if isinstance(value, int) and value < 1:
        raise SpecError(f"{key}: must be a positive number of {whole}, got {value}")


def _point_in_samples(value, *, key: str, budget: int, unit: int, tokens_per_sample: Optional[int]) -> int:
    """A checkpoint or window (``check_point``) as samples: a fraction of the budget, or samples (tokens with
    a token budget); rounded down to a whole number of ``unit`` samples (the largest branch batch, so that
    every batch lands on it exactly), and at least one ``unit``."""
    check_point(value, key=key, whole="tokens" if tokens_per_sample else "samples")
    if isinstance(value, float):
        samples = int(value * budget)
    else:
        samples = value // tokens_per_sample if tokens_per_sample else value
    return max(unit, samples // unit * unit)


def resolve_branch_settings(spec: SearchSpec, budget_samples: int,
                            tokens_per_sample: Optional[int] = None) -> ResolvedBranchSettings:
    """The spec's ``branch:`` section in samples against the resolved budget; a ``SpecError`` naming the key
    for a checkpoint that is no fraction in (0, 1) or whole number, two checkpoints on one sample, or a window
    longer than what remains after a checkpoint. The batches were checked when the spec was validated
    (``_branch_batches_are_larger_than_the_trunks``)."""
    b, s, t = branch_settings(spec), spec.search, spec.training
    trunk = b.trunk_batch_size or min(spec.batch_sizes)
    batches = tuple(sorted(b.batch_sizes)) if b.batch_sizes else tuple(x for x in spec.batch_sizes if x > trunk)
    unit = max(batches)
    given = geometric_checkpoints() if b.checkpoints == GEOMETRIC else b.checkpoints
    if not isinstance(given, list) or not given:
        raise SpecError(f"branch.checkpoints: expected a non-empty list or {GEOMETRIC!r}, got {b.checkpoints!r}")
    points = [_point_in_samples(p, key="branch.checkpoints", budget=budget_samples, unit=unit,
                                tokens_per_sample=tokens_per_sample) for p in given]
    if len(set(points)) != len(points):
        raise SpecError(f"branch.checkpoints: two checkpoints land on the same sample ({sorted(points)}, "
                          f"whole batches of {unit})")
    if b.window is None:  # 5 % of the budget, at least the floor of steps at the largest batch
        floor = b.window_min_steps * unit
        window = max(floor, _point_in_samples(DEFAULT_WINDOW_FRACTION, key="branch.window", budget=budget_samples,
                                              unit=unit, tokens_per_sample=tokens_per_sample))
    else:
        window = _point_in_samples(b.window, key="branch.window", budget=budget_samples, unit=unit,
                                   tokens_per_sample=tokens_per_sample)
    last = max(points)
    if last + window > budget_samples:
        raise SpecError(f"branch.window: {window} samples from the checkpoint at {last} run past the budget "
                          f"({budget_samples}); only {budget_samples - last} remain")
    alphas = tuple(b.alphas) if b.alphas else DEFAULT_ALPHAS
    trunk_alpha = sum(s.alpha_range) / 2
    epsilon = spec_tolerances(spec)[1]  # a loss metric's turning-point tolerance too
    return ResolvedBranchSettings(trunk_batch=trunk, checkpoints=tuple(sorted(points)), window_samples=window,
                     branch_batches=batches, alphas=tuple(float(a) for a in alphas),
                     tolerance=epsilon.value, trunk_alpha=trunk_alpha,
                     warmup_fraction=sum(s.warmup_fraction_range) / 2,
                     trunk_peak_lr=scaled_lr(t.base_lr, trunk, t.base_batch, trunk_alpha),
                     budget_samples=budget_samples, tokens_per_sample=tokens_per_sample,
                     tolerance_relative=epsilon.relative, repeats=b.repeats, optimizer_state=b.optimizer_state,
                     loss=b.loss, validation_seeds=b.validation_seeds, window_min_steps=b.window_min_steps,
                     schedule_rule=b.schedule_rule, lr_decay=t.lr_decay, seesaw_start=b.seesaw_start,
                     seesaw_first_doubling=float(b.seesaw_first_doubling))


def _branch_mode_stands_alone(spec: SearchSpec) -> None:
    """What branch mode cannot combine with beyond what its registry entry says (no probe-chosen grid, no Optuna
    study: ``spec.rules``' shared rule): a storage URI (the trunk's checkpoints go to a shared directory).
    ``search.repeats``, ``num_trials``, ``strategy`` and the
    ``asha`` section are a from-scratch search's and are ignored; the schedule switch needs branch mode."""
    if not reads_section(spec, branch_settings(spec)):
        if branch_settings(spec).validate_schedule:
            raise SpecError("branch.validate_schedule: validates the schedule a branch search recommends; "
                            "set search.method=branch (--validate-schedule)")
        return
    if "://" in spec.storage_path:
        raise SpecError(f"storage_path: search.method branch writes the trunk's checkpoints to a directory every "
                        f"trial reads (a local or shared filesystem), not a URI; got {spec.storage_path}")


def _branch_batches_are_larger_than_the_trunks(spec: SearchSpec) -> None:
    """The trunk's batch and the branches' are powers of two that split over the workers, every branch
    batch is larger than the trunk's, and every report lands on whole batches of the largest."""
    b, workers = branch_settings(spec), spec.resources.workers_per_trial
    if not reads_section(spec, b):
        return
    if b.trunk_batch_size is not None:
        check_power_of_two(b.trunk_batch_size, "branch.trunk_batch_size")
    trunk = b.trunk_batch_size or spec.batch_sizes[0]
    branches = batch_list(b.batch_sizes, "branch.batch_sizes") if b.batch_sizes is not None else \
        [x for x in spec.batch_sizes if x > trunk]
    if not branches:
        raise SpecError(f"branch.batch_sizes: no batch size larger than the trunk's ({trunk}) to branch at; "
                        f"list some in search.batch_sizes or branch.batch_sizes")
    if branches[0] <= trunk:
        raise SpecError(f"branch.batch_sizes: a branch's batch must be larger than the trunk's "
                        f"(branch.trunk_batch_size {trunk}), got {branches[0]}")
    for key, x in (("branch.trunk_batch_size", trunk), *(("branch.batch_sizes", x) for x in branches)):
        if x % workers:
            raise SpecError(f"{key}: {x} does not split over resources.workers_per_trial={workers} workers")
    every = spec.training.eval_every_samples
    if every % branches[-1]:
        raise SpecError(f"training.eval_every_samples: must be a multiple of the largest branch batch "
                        f"{branches[-1]}, got {every}")
    alphas = b.alphas
    if alphas is not None and (not alphas or any(isinstance(a, bool) or not isinstance(a, (int, float))
                                                  or not math.isfinite(a) for a in alphas)):
        raise SpecError(f"branch.alphas: expected a non-empty list of numbers, got {alphas!r}")
    if alphas is not None and not all(0.0 <= a <= 1.0 for a in alphas):  # as search.alpha_range
        raise SpecError(f"branch.alphas: each must be in [0, 1] (0.5 the sqrt rule, 1.0 the linear rule), "
                        f"got {alphas!r}")
    if alphas is not None and len(set(alphas)) < len(alphas):  # a duplicate would train its branches twice
        raise SpecError(f"branch.alphas: {alphas!r} lists an alpha twice")


def _branch_points_fit_the_budget(spec: SearchSpec) -> None:
    """Checkpoints and the window are fractions in (0, 1) of the budget or whole samples (tokens with a
    token budget); with the budget known here (``training.budget_samples``), the window fits after the last
    checkpoint. Otherwise ``resolve_branch_settings`` checks the same once the budget is resolved, before Ray."""
    b = branch_settings(spec)
    if not reads_section(spec, b):
        return
    if b.checkpoints == GEOMETRIC:
        points = []
    elif not isinstance(b.checkpoints, list) or not b.checkpoints:
        raise SpecError(f"branch.checkpoints: expected a non-empty list of fractions in (0, 1) or whole samples, "
                        f"or {GEOMETRIC!r}, got {b.checkpoints!r}")
    else:
        points = b.checkpoints

    whole = "tokens" if spec.training.budget_tokens is not None else "samples"
    windows = [("branch.window", b.window)] if b.window is not None else []  # None: the default window
    for key, value in [*(("branch.checkpoints", p) for p in points), *windows]:
        check_point(value, key=key, whole=whole)
    if spec.training.budget_samples is not None:
        resolve_branch_settings(spec, spec.training.budget_samples)


def branch_settings(spec: SearchSpec) -> BranchSettings:
    """The spec's ``branch:`` section."""
    return spec.section(SECTION)


SETTINGS = BranchSettings
"""The section's dataclass, which the registry entry's ``settings_module`` names (``spec.sections``)."""
