"""The ladder's settings, the spec's ``ladder:`` section (``search.method: ladder``): its fields (``LadderSettings``;
its registry entry names this module's ``SETTINGS``, the spec holds it: ``ladder_settings``), its rule against the rest
of the spec (``ladder_stands_alone``), and the section resolved against the budget: the batches, the seeds, the LR rule,
where each run stops and evaluates, all in samples (``Ladder``). Pure: what one run trains is
``methods.ladder.search.ladder_run_plan``; what the runs mean is ``methods.ladder.reading``.

Every run trains one batch at a **constant LR** after a warmup (the alpha rule's LR at its batch), evaluating at
D·first_rung and at every factor of √2 after it (each rounded to the nearest whole batch of the largest batch). The
smallest batch (the reference) trains to ``fraction`` of the full budget D; every other batch until it reaches the
reference's loss there (the last rung's target: a larger batch needs more samples, E(B) = E_min·(1 + B/B_crit)), or
``cap`` × the fraction, where the run stops: ``methods.ladder.search``'s stopper ends it,
``methods.ladder.reading_stop`` decides. The rungs are the evaluations from twice the warmup on (``rungs_from``): every
batch warms up over the same samples (a fraction of its steps to the fraction), and a rung inside that warmup would
measure the warmup, not the batch. The warmup is a fraction of the steps the batch takes to the fraction, whichever run
it is, so that a run that goes on (``ladder.validate``) is the ladder's run exactly up to the fraction: nothing a run
trains before the fraction depends on where it stops.

The validation measures B_crit at D: the reference batch's loss at D is the target, and a larger batch needs
more than D samples to reach it (E(B) = B·S(B) grows with B), so the validation's runs go on until each reaches it
or ``cap`` × D; a batch that has not reached the target by then is left out of that rung's fit (right-censored).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Optional

from cbs_ray.maths.lr_schedule import scaled_lr, warmup_steps
from cbs_ray.spec.checks import MAX_REPEATS, a_count, between, check, reads_section, within
from cbs_ray.spec.errors import SpecError

if TYPE_CHECKING:  # the spec holds this section: the type only
    from cbs_ray.spec.schema import SearchSpec

__all__ = ["SETTINGS", "LadderSettings", "MIN_LADDER_BATCHES", "MIN_RUNG_SPAN", "Ladder", "ladder_settings",
           "resolve_ladder", "ladder_stands_alone"]

SECTION = "ladder"
"""The section's key in the spec (its registry entry's ``section``)."""


@dataclass
class LadderSettings:
    """The ladder (``search.method: ladder``; ``cbs_ray.methods.ladder.reading``): predict the full run's
    critical batch from runs of a fraction of its budget."""

    fraction: float = field(default=0.25, metadata=check(within(0, 1, ends="()")))
    """How far each run trains, a fraction of the full budget (``training.budget_samples`` or ``budget_tokens``:
    the run you will train)."""
    seeds: int = field(default=2, metadata=check(a_count(MAX_REPEATS)))
    """Runs per batch, each with its own seed: the learning curves the rungs read are their means."""
    alpha: Optional[float] = field(default=None, metadata=check(within(0, 1, ends="[]")))
    """The alpha rule's exponent for every batch's LR (lr = base_lr · (B / base_batch) ** alpha). Default: the
    middle of ``search.alpha_range``."""
    min_steps: int = field(default=16, metadata=check(between(1, 10**6)))
    """The fewest optimizer steps the largest batch may take within the fraction: fewer, and its curve has too
    few evaluations after warmup to say when it reaches a rung's loss."""
    first_rung: float = field(default=1 / 64, metadata=check(within(0, 1, ends="()")))
    """The first evaluation, a fraction of the full budget; then one at every doubling up to the fraction."""
    validate: bool = False
    """Also train the same batches to the full budget under the same protocol and compare the prediction with
    B_crit measured there (``--validate-prediction`` sets it)."""
    curve: Literal["interpolate", "fit"] = "interpolate"
    """How a rung reads the samples each batch needs to reach the smallest batch's loss: ``interpolate`` between
    the seed-mean evaluations (log–log); ``fit`` from a curve L∞ + a·s^−p fitted to each batch's evaluations
    over its seeds (``maths.ladder.fit_loss_curve``: one noisy evaluation moves nothing by itself, but one
    power law cannot follow a curve with a plateau, such as an LM's unigram phase:
    docs/benchmarks-archive.md#issue-27-s2)."""
    reading: Literal["ewa", "raw"] = "ewa"
    """What the rungs read each run's loss from: ``ewa``, an average of its iterates (polynomial-decay averaging,
    ``maths.averaging``; at a constant LR the raw iterate sits on an LR-noise floor that grows with the LR, i.e.
    with the batch) evaluated beside the raw model at every evaluation; or ``raw``, the raw model's."""
    cap: float = field(default=4.0, metadata=check(between(1, 1000)))
    """How far a run may go, in multiples of where it is read: each batch trains until it reaches the last rung's
    target (the smallest batch's loss at the fraction) or ``cap`` × the fraction; with ``--validate-prediction``,
    until it reaches the smallest batch's loss at D or ``cap`` × D. The smallest batch itself stops at the fraction
    (at D when validating)."""
    min_warmup_steps: int = field(default=0, metadata=check(between(0, 10**6)))
    """Every batch warms up over at least this many optimizer steps (0: none beyond the warmup fraction's). The
    warmup is ``search.warmup_fraction_range``'s middle of the steps to the fraction, the same samples for every
    batch, which leaves the largest batches a step or two: on the markov language B=128 then took a loss spike at
    its peak LR and sat on a plateau for 10–20 steps, at random lengths across seeds, the noise that
    decided its rungs and its measurement. ``search_spaces/markov_lm.yaml`` sets 8. At most 10⁶ (more steps than
    any run here takes; 10⁹ was accepted)."""
    step_count: Literal["optimizer", "lr_weighted"] = "optimizer"
    """How a rung counts the steps S(B) a batch took to its target: ``optimizer``, every step as one; or
    ``lr_weighted``, each step by its LR relative to the peak (a linear warmup of W steps counts about W/2:
    ``maths.lr_schedule.lr_weighted_steps``), so that batches whose warmups differ in steps
    (``min_warmup_steps``) are compared on the same footing. The measurement at D counts them the same way."""
    predict: Literal["power_law", "loss"] = "power_law"
    """How the rungs are extrapolated to D: ``power_law``, the exponent of B_crit ∝ D^γ fitted over the rungs and
    weighed with a prior over exponents, from the last rung (``maths.prediction``; ``maths.ladder.fit_ladder``'s fit
    is reported beside it); or ``loss``, B_crit = c·L^k fitted over the rungs against their target loss, at
    the smallest batch's loss at D extrapolated by a power law in samples from its last octave before the fraction
    (``maths.ladder_loss``: on the markov language B_crit(D) bends beyond the rungs while following the loss).
    Either way the power law's exponent is reported."""

    def resolve(self, spec: SearchSpec, budget_samples: int, tokens_per_sample: Optional[int] = None) -> Ladder:
        """This section of ``spec`` against the resolved budget (``resolve_ladder``)."""
        return resolve_ladder(spec, budget_samples, tokens_per_sample)

    def section_rule(self, spec: SearchSpec) -> None:
        """The section's rule against the rest of the spec (``ladder_stands_alone``): ``spec.rules.validate`` applies
        every section's after the cross-field rules."""
        ladder_stands_alone(spec)


MIN_RUNG_SPAN = 8
"""The rungs should span at least this factor in D (first to last): over less, the exponent's standard error is too
large for a prediction (over 2.5× it was about 0.5). The plan says so where they span less (the rungs
start at twice the warmup: a warmup fraction of 1/16 or less leaves 8×)."""

LADDER_METRICS = ("eval_loss", "excess_loss")
"""The losses the rungs can read (positive, lower is better): the ladder reads ``search.metric`` if it is one."""

MIN_LADDER_BATCHES = 4
"""The fewest batch sizes a ladder takes: each rung fits S(B) = S_min + E_min/B (``maths.tradeoff``) with a
bootstrap interval, and with 3 batch sizes too few resamples keep 3 distinct ones for that interval."""


MIN_RUNGS = 3
"""The fewest rungs a ladder plan may have: the exponent of B_crit ∝ D^γ is a line through the rungs' logs, and
two points leave nothing to judge the fit by (its p-value and interval)."""


@dataclass(frozen=True)
class Ladder:
    """The ``ladder:`` section against the budget, in samples."""

    batches: tuple[int, ...]
    seeds: int
    alpha: float
    warmup_fraction: float
    budget_samples: int
    """D: the full run's budget, the prediction's target."""
    stop_samples: int
    """Where the ladder's runs stop: the fraction of D, whole batches of the largest batch."""
    evaluations: tuple[int, ...]
    """Where every run evaluates, up to ``stop_samples`` (to D with ``validate``: the doublings go on)."""
    validate: bool
    base_lr: float
    base_batch: int
    min_steps: int
    tokens_per_sample: Optional[int] = None
    curve: str = "interpolate"
    """How the rungs read each batch's curve (``ladder.curve``, ``maths.ladder.CURVE_MODELS``)."""
    reading: str = "ewa"
    """``ladder.reading``: the average of the iterates (``ewa``) or the raw model (``raw``)."""
    cap: float = 4.0
    """``ladder.cap``: a run stops by ``cap`` × where it is read (the fraction; D when validating)."""
    min_warmup_steps: int = 0
    """``ladder.min_warmup_steps``: every batch warms up over at least this many optimizer steps."""
    step_count: str = "optimizer"
    """``ladder.step_count``: how a rung counts S(B) (``optimizer`` or ``lr_weighted``)."""
    predict: str = "power_law"
    """``ladder.predict``: extrapolate by the power law in D (``power_law``) or through the loss (``loss``: missed
    its pre-registered validation on the markov language, worse than the power law on 5 of 6 fresh seeds; kept to
    compare the two on a user's own runs, docs/benchmarks-archive.md#issue-36-s4b)."""
    metric: str = "eval_loss"
    """What the rungs read: ``search.metric`` where it is a loss the loop reports (``eval_loss``; the markov
    language's ``excess_loss``), else ``eval_loss``."""

    @property
    def warmup_samples(self) -> int:
        """The samples every batch's warmup spans: ``warmup_fraction`` of the fraction."""
        return int(self.warmup_fraction * self.stop_samples)

    @property
    def rungs_from(self) -> int:
        """The first evaluation a rung is read at: at or after twice the warmup."""
        return next((e for e in self.evaluations if e >= 2 * self.warmup_samples), self.stop_samples)

    @property
    def rung_evaluations(self) -> tuple[int, ...]:
        return tuple(e for e in self.evaluations if self.rungs_from <= e <= self.stop_samples)

    @property
    def reference_stop(self) -> int:
        """Where the smallest batch's runs stop: at D with ``validate`` (its loss there is the measurement's
        target), else at the fraction (its loss there is the last rung's target)."""
        return self.budget_samples if self.validate else self.stop_samples

    @property
    def ladder_cap(self) -> int:
        """The most a ladder run trains to reach the last rung's target: ``cap`` × the fraction."""
        return _whole(self.cap * self.stop_samples, self.batches[-1])

    @property
    def run_stop(self) -> int:
        """The most any run trains: ``cap`` × D with ``validate`` (the ladder reads each run up to where it reaches
        the last rung's target), else ``ladder_cap``; the stopper ends a run once it reaches its target."""
        return _whole(self.cap * self.budget_samples, self.batches[-1]) if self.validate else self.ladder_cap

    @property
    def reading_column(self) -> str:
        """The history's column the rungs read: ``ewa_<metric>`` or ``<metric>``."""
        return f"ewa_{self.metric}" if self.reading == "ewa" else self.metric

    @property
    def rung_span(self) -> float:
        """Last rung over first, in D."""
        rungs = self.rung_evaluations
        return rungs[-1] / rungs[0] if rungs else 0.0

    @property
    def run_evaluations(self) -> tuple[int, ...]:
        return tuple(e for e in self.evaluations if e <= self.run_stop)

    def peak_lr(self, batch: int) -> float:
        return scaled_lr(self.base_lr, batch, self.base_batch, self.alpha)

    def warmup_steps(self, batch: int) -> int:
        """Warmup steps at ``batch``: ``warmup_fraction`` of its steps to the fraction, at least
        ``min_warmup_steps`` (never more than those steps), the same whichever run stops where."""
        steps = self.stop_samples // batch
        return min(steps, max(warmup_steps(self.warmup_fraction, steps), self.min_warmup_steps))

    @property
    def ladder_samples_at_most(self) -> int:
        """The most the ladder trains: the smallest batch's seeds to the fraction, every other to the cap."""
        return self.seeds * (self.stop_samples + (len(self.batches) - 1) * self.ladder_cap)

    @property
    def full_samples(self) -> int:
        """What a from-scratch search at the full budget trains over the same batches and seeds: each to D."""
        return len(self.batches) * self.seeds * self.budget_samples

    def to_meta(self) -> dict:
        return {"ladder_batches": list(self.batches), "ladder_seeds": self.seeds, "ladder_alpha": self.alpha,
                "warmup_fraction": self.warmup_fraction, "budget_samples": self.budget_samples,
                "ladder_stop_samples": self.stop_samples, "ladder_evaluations": list(self.evaluations),
                "ladder_validate": self.validate, "tokens_per_sample": self.tokens_per_sample,
                "ladder_rungs_from": self.rungs_from, "ladder_curve": self.curve, "ladder_reading": self.reading,
                "ladder_cap": self.cap, "ladder_metric": self.metric, "ladder_step_count": self.step_count,
                "ladder_warmup_steps": {str(b): self.warmup_steps(b) for b in self.batches},
                "ladder_run_stop": self.run_stop,
                **({"ladder_predict": self.predict} if self.predict != "power_law" else {}),
                "base_lr": self.base_lr, "base_batch": self.base_batch}


def _whole(samples: float, unit: int) -> int:
    return int(samples) // unit * unit


def resolve_ladder(spec: SearchSpec, budget_samples: int, tokens_per_sample: Optional[int] = None) -> Ladder:
    """The spec's ``ladder:`` section against the resolved budget; a ``SpecError`` (one line) for fewer than
    ``MIN_LADDER_BATCHES`` batch sizes, a fraction whose largest batch takes fewer than ``ladder.min_steps``
    optimizer steps, or a first rung under one batch of the largest."""
    lad, s, t = ladder_settings(spec), spec.search, spec.training
    batches = tuple(sorted(spec.batch_sizes))
    if len(batches) < MIN_LADDER_BATCHES:
        raise SpecError(f"search.batch_sizes: the ladder needs at least {MIN_LADDER_BATCHES} batch sizes (each rung "
                        f"fits S(B) = S_min + E_min/B with a bootstrap interval), got {list(batches)}")
    largest = batches[-1]
    stop = _whole(lad.fraction * budget_samples, largest)
    if stop // largest < lad.min_steps:
        raise SpecError(f"ladder.fraction: {lad.fraction:g} of the budget ({budget_samples} samples) gives the largest "
                        f"batch {largest} {stop // largest} optimizer steps, under ladder.min_steps={lad.min_steps}; "
                        f"raise the fraction or the budget, or drop the largest batch")
    first = _whole(lad.first_rung * budget_samples, largest)
    if first < largest:
        raise SpecError(f"ladder.first_rung: {lad.first_rung:g} of the budget is under one batch of {largest}; "
                        f"raise it")
    furthest = _whole(lad.cap * (budget_samples if lad.validate else stop), largest)
    points, k = {first, stop, budget_samples, furthest}, 1
    while first * 2 ** (k / 2) < furthest:
        points.add(max(largest, round(first * 2 ** (k / 2) / largest) * largest))
        k += 1
    evaluations = sorted(p for p in points if p <= furthest)
    alpha = lad.alpha if lad.alpha is not None else sum(s.alpha_range) / 2
    metric = s.metric if s.metric in LADDER_METRICS else "eval_loss"
    ladder = Ladder(batches=batches, seeds=lad.seeds, alpha=float(alpha),
                    warmup_fraction=sum(s.warmup_fraction_range) / 2, budget_samples=budget_samples, stop_samples=stop,
                    evaluations=tuple(evaluations), validate=lad.validate, base_lr=t.base_lr, base_batch=t.base_batch,
                    min_steps=lad.min_steps, tokens_per_sample=tokens_per_sample, curve=lad.curve,
                    reading=lad.reading, cap=float(lad.cap), metric=metric, min_warmup_steps=lad.min_warmup_steps,
                    step_count=lad.step_count, predict=lad.predict)
    rungs = ladder.rung_evaluations
    if len(rungs) < MIN_RUNGS:  # a plan that can never predict: refused before anything trains
        raise SpecError(f"ladder.first_rung: the plan has {len(rungs)} rung(s) ({', '.join(map(str, rungs)) or 'none'} "
                        f"samples, from {ladder.rungs_from} to {stop}); fitting B_crit against D needs at least "
                        f"{MIN_RUNGS}: lower ladder.first_rung or raise ladder.fraction")
    return ladder


def ladder_stands_alone(spec: SearchSpec) -> None:
    """The ladder's rule among the spec's (``LadderSettings.section_rule``, which ``spec.rules.validate`` applies after
    the cross-field rules): its validation needs
    ``search.method: ladder``; it trains a fixed grid of batches × seeds at one alpha (``ladder.alpha``), so an
    alpha grid is refused (a probe-chosen grid and an Optuna study: its registry entry's flags, ``spec.rules``' shared
    rule); with the budget known here, the fraction and
    the batches are checked (``resolve_ladder``)."""
    s = spec.search
    if not reads_section(spec, ladder_settings(spec)):
        if ladder_settings(spec).validate:
            raise SpecError("ladder.validate: validates the ladder's prediction; set search.method=ladder "
                            "(--validate-prediction)")
        return
    if s.strategy == "grid" and s.grid_points > 1:
        raise SpecError(f"search.strategy: grid with search.grid_points={s.grid_points} asks for an alpha grid, which "
                        f"would multiply the ladder's cost by {s.grid_points}: the ladder trains one alpha per batch "
                        f"(ladder.alpha); set it, or search.grid_points=1")
    if spec.training.budget_samples is not None:
        resolve_ladder(spec, spec.training.budget_samples)


def ladder_settings(spec: SearchSpec) -> LadderSettings:
    """The spec's ``ladder:`` section."""
    return spec.section(SECTION)


SETTINGS = LadderSettings
"""The section's dataclass, which the registry entry's ``settings_module`` names (``spec.sections``)."""
