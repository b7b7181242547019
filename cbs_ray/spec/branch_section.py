"""Branch mode's ``branch:`` section resolved against the budget (``search.method: branch``; Merrill
et al. 2025, "Critical Batch Size Revisited", arXiv 2505.23971): the trunk's batch and LR schedule, the
checkpoints, the window, the branch batches and alphas, all in samples (``Branching``), and the check of one
branch point. Pure: what one run trains is ``methods.branch.runs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from cbs_ray.maths.batch_ramp import geometric_checkpoints
from cbs_ray.maths.lr_schedule import scaled_lr, warmup_steps
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.spec.tolerance import spec_tolerances

__all__ = ["GEOMETRIC", "Branching", "resolve_branching", "check_point"]

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


def _spec_error(message: str):
    return SpecError(message)


@dataclass(frozen=True)
class Branching:
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
    seesaw_start: str = "cbs"
    """Where ``seesaw`` starts: ``cbs``, ``tuned`` or ``trunk`` (``spec.schema.BranchSpec.seesaw_start``)."""
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
        raise _spec_error(f"{key}: expected a fraction in (0, 1) or a whole number of samples, got {value!r}")
    if isinstance(value, float) and not 0.0 < value < 1.0:
        raise _spec_error(f"{key}: a fraction of the budget must be in (0, 1), got {value}")
    if isinstance(value, int) and value < 1:
        raise _spec_error(f"{key}: must be a positive number of {whole}, got {value}")


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


def resolve_branching(spec: SearchSpec, budget_samples: int, tokens_per_sample: Optional[int] = None) -> Branching:
    """The spec's ``branch:`` section in samples against the resolved budget; a ``SpecError`` naming the key
    for a checkpoint that is no fraction in (0, 1) or whole number, two checkpoints on one sample, or a window
    longer than what remains after a checkpoint. The batches were checked when the spec was validated
    (``spec.rules._branch_batches_are_larger_than_the_trunks``)."""
    b, s, t = spec.branch, spec.search, spec.training
    trunk = b.trunk_batch_size or min(spec.batch_sizes)
    batches = tuple(sorted(b.batch_sizes)) if b.batch_sizes else tuple(x for x in spec.batch_sizes if x > trunk)
    unit = max(batches)
    given = geometric_checkpoints() if b.checkpoints == GEOMETRIC else b.checkpoints
    if not isinstance(given, list) or not given:
        raise _spec_error(f"branch.checkpoints: expected a non-empty list or {GEOMETRIC!r}, got {b.checkpoints!r}")
    points = [_point_in_samples(p, key="branch.checkpoints", budget=budget_samples, unit=unit,
                                tokens_per_sample=tokens_per_sample) for p in given]
    if len(set(points)) != len(points):
        raise _spec_error(f"branch.checkpoints: two checkpoints land on the same sample ({sorted(points)}, "
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
        raise _spec_error(f"branch.window: {window} samples from the checkpoint at {last} run past the budget "
                          f"({budget_samples}); only {budget_samples - last} remain")
    alphas = tuple(b.alphas) if b.alphas else DEFAULT_ALPHAS
    trunk_alpha = sum(s.alpha_range) / 2
    epsilon = spec_tolerances(spec)[1]  # a loss metric's turning-point tolerance too (issue 50)
    return Branching(trunk_batch=trunk, checkpoints=tuple(sorted(points)), window_samples=window,
                     branch_batches=batches, alphas=tuple(float(a) for a in alphas),
                     tolerance=epsilon.value, trunk_alpha=trunk_alpha,
                     warmup_fraction=sum(s.warmup_fraction_range) / 2,
                     trunk_peak_lr=scaled_lr(t.base_lr, trunk, t.base_batch, trunk_alpha),
                     budget_samples=budget_samples, tokens_per_sample=tokens_per_sample,
                     tolerance_relative=epsilon.relative, repeats=b.repeats, optimizer_state=b.optimizer_state,
                     loss=b.loss, validation_seeds=b.validation_seeds, window_min_steps=b.window_min_steps,
                     schedule_rule=b.schedule_rule, lr_decay=t.lr_decay, seesaw_start=b.seesaw_start,
                     seesaw_first_doubling=float(b.seesaw_first_doubling))
