"""Branch mode's batch-size schedule (the paper's batch-size warmup, Merrill et al. 2025 §4) and its
validation against fixed batches.

**The schedule** (``recommend_schedule``): start at the trunk's batch; at each resolvable checkpoint where
CBS(t) reaches twice the current batch, double it once (``branch.schedule_rule: once_per_crossing``, the
paper's, the default before ``fitted``: 8 → 16 at the first point where 16 passes, → 32 at a later one). The rule before
issue
37 (``branch.schedule_rule: while_safe``) doubles again at the same checkpoint while the measurements say each
further doubling is safe: CBS(t) reaches twice the batch again *and* the branch at the doubled batch itself
recovered, not a close call. Two further rules (``maths.batch_ramp``) follow CBS(t) without the
one-doubling lag: ``fitted`` (a power law in samples through the resolvable points, one batch below it, switching
where it crosses the next batch, never above the CBS measured at a checkpoint) and ``seesaw`` (Meterez et al. 2025:
a doubling wherever the trunk's LR decay would halve the LR, capped by the measured CBS). Never beyond the largest
branch batch, never down. The LR follows the alpha rule at the measured alpha, √2 per doubling at alpha 0.5: the
rule the branches were trained with.

**The validation** (``validate_schedule``): the schedule's run and fixed-batch controls over the same samples,
each on the same validation seeds, held out from the trunk's (seed offsets 1…n; seed s of every run shares its
initial weights and data order): ``small`` (the trunk's batch), ``large`` (the largest batch the schedule
reaches, from step 0) and ``iso_steps`` (the two powers of two bracketing the fixed batch that would take the
schedule's number of steps, where they are not ``small`` or ``large``) and ``above`` (twice the largest, so that
fixed batches bracket the schedule's final batch on both sides). The fixed batches' (steps, final
loss) are the **frontier**. The primary figure is **iso-loss steps** (``maths.iso_loss``): per seed, the steps
the frontier needs to reach the schedule's final loss, against the schedule's, a saved fraction with its 95 %
t-interval over seeds. The verdicts are ``methods.branch.reading_verdicts``'s paired tests, fixed before any run
(``criterion_text``, printed before the runs and stored in ``summary.json``): the schedule non-inferior to the
small batch at ε, below the frontier beyond the noise, and the steps it saves against the best fixed batch
non-inferior to the small batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd

from cbs_ray.maths.batch_ramp import fitted_ramp, seesaw_ramp
from cbs_ray.maths.iso_loss import PCHIP, censoring_bound, paired_saved_fraction
from cbs_ray.methods.branch.control_configurations import TRUNK
from cbs_ray.methods.branch.reading_points import CbsPoint, as_dict, diverged_runs, is_finite_number, rows_of_role
from cbs_ray.methods.branch.reading_verdicts import (
    BelowFrontier,
    FixedRun,
    NonInferiority,
    StepsSaved,
    below_frontier,
    criterion_text,
    frontier_band,
    non_inferiority,
    steps_saved,
    t_quantile,
)
from cbs_ray.records.columns import Column, require_columns

__all__ = ["SCHEDULE_RULES", "CONTROL_NAMES", "Control", "FrontierControls", "IsoLossSteps",
           "NonInferiorityVsTuned", "ScheduleValidation", "control_batches", "dense_controls", "iso_loss_reading",
           "non_inferiority_vs_tuned", "non_inferiority_vs_tuned_text", "iso_loss_text", "recommend_schedule",
           "samples_trained", "schedule_in_tokens", "schedule_steps", "schedule_total_steps", "t_quantile_975",
           "validate_schedule", "verdict_text"]

CONTROL_NAMES = ("schedule", "small", "large", "iso_steps", "above", "frontier")
"""The validation's run kinds: the schedule; the grid's fixed batches (``control_batches``); ``frontier``, a batch of
the dense frontier that is neither the schedule's first nor its largest (``dense_controls``)."""
SCHEDULE_RULES = ("once_per_crossing", "while_safe", "fitted", "seesaw")
"""``branch.schedule_rule``'s values (module docstring); the spec's default is ``fitted``."""


# ---- the schedule ------------------------------------------------------------------------------------

def recommend_schedule(points: Sequence[CbsPoint], *, trunk_batch: int, largest_batch: int,
                       rule: str = "once_per_crossing", budget_samples: Optional[int] = None,
                       lr_multiplier_at: Optional[Callable[[int], float]] = None, unit: int = 1,
                       start_batch: Optional[int] = None, first_doubling_samples: int = 0) -> list[list[int]]:
    """The batch-size warmup as ``[start_samples, batch_size]`` pairs under ``rule`` (``SCHEDULE_RULES``; module
    docstring). Points that are not resolvable, or whose trunk loss is missing, change nothing. ``fitted`` and
    ``seesaw`` need ``budget_samples``; ``seesaw`` the trunk's LR multiplier per optimizer step
    (``lr_multiplier_at``); ``unit``: the samples a switch between checkpoints is rounded up to (the largest branch
    batch, as the checkpoints are). ``seesaw`` only: ``start_batch`` (default the trunk's) and the late switch
    ``first_doubling_samples`` (``maths.batch_ramp.seesaw_ramp``)."""
    if rule not in SCHEDULE_RULES:
        raise ValueError(f"unknown schedule rule {rule!r} (known: {', '.join(SCHEDULE_RULES)})")
    usable = sorted((p for p in points if p.trunk_loss is not None and p.resolvable), key=lambda p: p.samples_seen)
    if rule in ("fitted", "seesaw"):
        if budget_samples is None or (rule == "seesaw" and lr_multiplier_at is None):
            raise ValueError(f"schedule rule {rule!r} needs the budget" + (" and the trunk's LR multiplier"
                                                                         if rule == "seesaw" else ""))
        measured = [(int(p.samples_seen), int(p.batch_size)) for p in usable]
        if rule == "fitted":
            return fitted_ramp(measured, trunk_batch=trunk_batch, largest_batch=largest_batch,
                               budget_samples=budget_samples, unit=unit)
        assert lr_multiplier_at is not None  # checked above, for seesaw
        return seesaw_ramp(lr_multiplier_at, measured=measured, trunk_batch=trunk_batch,
                           largest_batch=largest_batch, budget_samples=budget_samples, unit=unit,
                           start_batch=start_batch, first_doubling_samples=first_doubling_samples)
    schedule, batch = [[0, int(trunk_batch)]], int(trunk_batch)
    for p in usable:
        grown = batch
        if grown * 2 <= min(p.batch_size, largest_batch):
            grown *= 2
            while rule == "while_safe" and grown * 2 <= min(p.batch_size, largest_batch):
                o = p.outcome(grown * 2)
                if o is None or not o.recovers or o.close:
                    break
                grown *= 2
        if grown != batch:
            batch = grown
            if schedule[-1][0] == p.samples_seen:
                schedule[-1][1] = batch
            else:
                schedule.append([int(p.samples_seen), batch])
    return schedule


def schedule_in_tokens(schedule: Sequence[Sequence[int]], tokens_per_sample: int) -> list[list[int]]:
    """The schedule in tokens: ``[start_tokens, batch_size_tokens]`` pairs (packed sequences of
    ``tokens_per_sample`` tokens each: every sample is a full sequence)."""
    return [[int(s) * tokens_per_sample, int(b) * tokens_per_sample] for s, b in schedule]


def schedule_steps(schedule: Sequence[Sequence[int]]) -> list[list[int]]:
    """``[start_step, batch_size]`` pairs: the optimizer step at which each batch starts (what Levanter's
    ``train_batch_size`` schedule takes). A switch point that is not a whole number of the previous batch
    starts at the step after (a partial batch counts as a step)."""
    steps, step = [], 0
    for i, (start, batch) in enumerate(schedule):
        if i:
            prev_start, prev_batch = schedule[i - 1]
            step += -(-(int(start) - int(prev_start)) // int(prev_batch))
        steps.append([step, int(batch)])
    return steps


def schedule_total_steps(schedule: Sequence[Sequence[int]], budget_samples: int) -> int:
    """Optimizer steps the schedule takes over ``budget_samples`` (a partial last batch counts as a step)."""
    (last_start, last_batch), start_step = schedule[-1], schedule_steps(schedule)[-1][0]
    return start_step + -(-(int(budget_samples) - int(last_start)) // int(last_batch))


def control_batches(schedule: Sequence[Sequence[int]], budget_samples: int, *,
                    largest_allowed: Optional[int] = None) -> list[tuple[str, int]]:
    """The fixed-batch controls of ``schedule``'s validation, ``(name, batch)``: ``small`` (its first batch),
    ``large`` (its largest), ``iso_steps`` (the powers of two at and around budget ÷ the schedule's steps, those
    not already small or large) and ``above`` (twice the largest: the frontier then brackets the schedule's final
    batch on both sides), left out where it exceeds ``largest_allowed`` (the training set) or leaves the budget
    under one step."""
    small, large = int(schedule[0][1]), max(int(b) for _, b in schedule)
    iso = budget_samples / schedule_total_steps(schedule, budget_samples)
    low = 2 ** int(math.floor(math.log2(iso)))
    bracket = sorted({low, low * 2 if low < iso else low})
    above = 2 * large
    fits = above <= budget_samples and (largest_allowed is None or above <= largest_allowed)
    return [("small", small), ("large", large),
            *(("iso_steps", b) for b in bracket if b not in (small, large) and small < b < large),
            *((("above", above),) if fits else ())]


def dense_controls(schedule: Sequence[Sequence[int]], batches: Sequence[int]) -> list[tuple[str, int]]:
    """The dense frontier's controls (``branch.frontier: dense``; the batches: ``maths.frontier_batches``), named
    for the reading: ``small`` the schedule's first batch, ``large`` its largest, ``frontier`` every other, ascending.
    The batches are the same for every rule of a setting; the schedule's first and largest batch are among them by
    construction (``methods.branch.fair_controls.frontier_batches``), and added where not (the set then differs)."""
    small, large = int(schedule[0][1]), max(int(b) for _, b in schedule)
    names = {int(b): "frontier" for b in batches}
    names.update({large: "large"})
    names.update({small: "small"})
    return [(names[b], b) for b in sorted(names)]


# ---- the schedule's validation ---------------------------------------------------------------------------

def t_quantile_975(df: int) -> float:
    """Student's t 97.5 % quantile at ``df`` ≥ 1 degrees of freedom (a two-sided 95 % interval)."""
    return t_quantile(0.975, df)


@dataclass(frozen=True)
class Control:
    """One kind of run of the validation (``summary.json`` → ``schedule_validation.controls``)."""

    name: str
    """``schedule`` or a fixed batch's kind (``CONTROL_NAMES``)."""
    batch_size: Optional[int]
    """The fixed batch (None for the schedule)."""
    steps: Optional[int]
    """Optimizer steps over the budget."""
    seeds: int
    """Runs that finished the budget without diverging."""
    final_loss_mean: Optional[float]
    final_loss_ci95: Optional[list]
    """``[low, high]``: mean ± t(0.975, seeds − 1) · standard error; None with fewer than two seeds."""
    final_losses: dict
    """Each finished seed's final eval loss, ``{seed offset: loss}``: the pairs the tests read."""
    diverged: int = 0

    def to_dict(self) -> dict:
        return as_dict(self)

    def as_fixed_run(self) -> FixedRun:
        assert self.batch_size is not None and self.steps is not None  # a fixed batch's control that finished
        return FixedRun(int(self.batch_size), int(self.steps), {int(s): v for s, v in self.final_losses.items()})


@dataclass(frozen=True)
class IsoLossSteps:
    """``summary.json`` → ``schedule_validation.iso_loss_steps``: the steps the fixed-batch frontier needs to
    reach the schedule's final loss, per seed, against the schedule's (``maths.iso_loss``)."""

    saved_fraction: Optional[float]
    """Mean over seeds of 1 − schedule steps / iso-loss steps (positive: the schedule needs fewer)."""
    interval_95: Optional[list]
    """Two-sided 95 % Student-t interval over seeds; None with fewer than two."""
    seeds: int
    frontier_batches: list
    """The fixed batches the frontier is made of."""
    schedule_steps: Optional[int]
    per_seed: dict
    """``{seed: saved fraction}``."""
    censored: dict
    """``{seed: "above" | "below"}``: the schedule's loss fell outside the frontier's range on that seed; its
    fraction is then a bound (``above``: at least it; ``below``: at most it)."""
    interpolation: str = PCHIP
    """How the frontier is read between fixed batches (``maths.iso_loss``: ``pchip``, the monotone cubic in
    log(steps), or ``chord``)."""
    bound: Optional[str] = None
    """What ``saved_fraction`` is where seeds were censored (``maths.iso_loss.censoring_bound``): ``lower bound``
    (the schedule beat every fixed batch there), ``upper bound``, ``mixed bounds``; None: an estimate."""

    def to_dict(self) -> dict:
        return as_dict(self)


def iso_loss_reading(schedule: Control, fixed: Sequence[FixedRun], *, interpolation: str = PCHIP) -> IsoLossSteps:
    """Iso-loss steps of ``schedule``'s runs against the fixed runs' frontier, paired by seed."""
    if schedule.steps is None:
        raise ValueError("iso-loss steps need the schedule's steps (its runs finished)")
    runs = [r for r in fixed if r.steps]
    out = paired_saved_fraction(schedule.steps, {int(k): v for k, v in schedule.final_losses.items()},
                                [(r.steps, r.losses) for r in runs], interpolation=interpolation)
    return IsoLossSteps(out.saved_fraction, out.interval_95, out.seeds, sorted(r.batch_size for r in runs),
                        schedule.steps, out.per_seed, out.censored, interpolation, censoring_bound(out.censored))


@dataclass(frozen=True)
class FrontierControls:
    """``summary.json`` → ``schedule_validation.frontier_controls``: what the frontier is made of."""

    batches: list
    """The fixed batches on it, ascending."""
    configurations: Optional[list]
    """Per batch ``batch_size``, ``alpha``, ``warmup_fraction``, ``source`` (control_configurations.py: a
    from-scratch experiment's best, or ``trunk``); None where not known."""
    interpolation: str
    """``pchip`` (the monotone cubic in log(steps)) or ``chord`` (``maths.iso_loss``)."""

    def to_dict(self) -> dict:
        return as_dict(self)


@dataclass(frozen=True)
class NonInferiorityVsTuned:
    """``summary.json`` → ``schedule_validation.non_inferiority_vs_tuned`` (the primary test): the schedule
    against the best fixed batch of the frontier, the one with the lowest mean final loss over the seeds at the
    budget (at its tuned configuration where ``tuned``), paired by seed, one-sided 95 % bound below ε. Choosing the
    best on the same seeds favours the control (its noise helps it win): the test errs against the schedule."""

    best_fixed_batch: Optional[int]
    difference: Optional[float]
    """Mean over seeds of schedule − best fixed batch final loss (positive: the schedule is worse)."""
    bound: Optional[float]
    """Its one-sided 95 % upper confidence bound."""
    holds: Optional[bool]
    """``bound < margin``; None with fewer than two paired seeds."""
    margin: float
    seeds: int
    tuned: bool
    """Every fixed batch trained at a from-scratch search's best configuration (``branch.controls_from``);
    False: some at the trunk's, and the "best" is the best untuned batch."""

    def to_dict(self) -> dict:
        return as_dict(self)


def non_inferiority_vs_tuned(schedule: Control, fixed: Sequence[FixedRun], *, margin: float,
                             configurations: Optional[Sequence[dict]] = None) -> NonInferiorityVsTuned:
    """The schedule against the fixed run of lowest mean final loss (a tie: the smaller batch) at ``margin``
    nats (``NonInferiorityVsTuned``); ``configurations`` tell whether every control was tuned."""
    means = [(mean, r) for r in fixed for mean in (r.mean_se()[0],) if mean is not None]
    ranked = sorted(((mean, r.batch_size, r) for mean, r in means),
                    key=lambda t: (round(t[0], 12), t[1]))  # equal means (to rounding): the smaller batch
    sources = {int(c[Column.batch_size]): c.get("source") for c in configurations or []}
    tuned = bool(fixed) and all(sources.get(r.batch_size) not in (None, TRUNK) for r in fixed)
    if not ranked:
        return NonInferiorityVsTuned(None, None, None, None, float(margin), 0, tuned)
    best = ranked[0][2]
    ni = non_inferiority(schedule.final_losses, best.losses, margin=margin)
    return NonInferiorityVsTuned(best.batch_size, ni.difference_mean, ni.upper_95, ni.holds, ni.margin, ni.seeds,
                                 tuned)


def non_inferiority_vs_tuned_text(vs: NonInferiorityVsTuned) -> str:
    """The primary test in words (the report's first sentence on the validation)."""
    kind = "best tuned fixed batch" if vs.tuned else "best fixed batch (not every control tuned: " \
                                                      "branch.controls_from)"
    if vs.best_fixed_batch is None:
        return f"Non-inferior to the {kind}: not read (no fixed batch finished)"
    word = {True: "yes", False: "no", None: "not shown (fewer than two paired seeds)"}[vs.holds]
    return (f"Non-inferior to the {kind}, B={vs.best_fixed_batch}: {word} — paired difference "
            f"{_signed(vs.difference)} nats, one-sided 95 % upper bound {_signed(vs.bound)} against ε = "
            f"{vs.margin:.4g} over {vs.seeds} seeds")


@dataclass(frozen=True)
class ScheduleValidation:
    """The schedule's runs against the fixed-batch controls over the same samples and seeds, read by the
    pre-registered paired tests of ``methods.branch.reading_verdicts``."""

    controls: tuple[Control, ...]
    frontier: list
    """The fixed batches' ``[steps, final_loss_mean]`` pairs, fewest steps first."""
    frontier_band: list
    """The frontier interpolated in log-steps with its 95 % band (``FrontierPoint`` records: ``steps``, ``loss``,
    ``standard_error``, ``low``, ``high``), the schedule's steps among them."""
    below_frontier: BelowFrontier
    non_inferiority: Optional[NonInferiority]
    steps_saved: StepsSaved
    steps_saved_vs_small: Optional[float]
    """1 − schedule steps / small-batch steps (the paper's comparison: 43 % on OLMo 1B)."""
    criterion: str
    text: str
    held_out: bool = True
    """The validation seeds are disjoint from the trunk's (False: an experiment whose small batch's seed 0 was
    the trunk itself)."""
    iso_loss_steps: Optional[IsoLossSteps] = None
    """Iso-loss steps saved (the schedule's primary figure); None where the schedule's runs did not finish."""
    frontier_controls: Optional[FrontierControls] = None
    """The fixed batches the frontier is made of, their configurations and the interpolation."""
    non_inferiority_vs_tuned: Optional[NonInferiorityVsTuned] = None
    """The primary test: the schedule against the best (tuned) fixed batch; the report leads with it.
    None where the schedule's runs did not finish."""

    def control(self, name: str) -> Optional[Control]:
        return next((c for c in self.controls if c.name == name), None)

    def to_dict(self) -> dict:
        return as_dict(self)


def last_report(frame: pd.DataFrame):
    return frame.sort_values(Column.samples_seen, kind="stable").iloc[-1] if not frame.empty else None


def _control_of(row) -> str:
    value = row.get(Column.control)
    return str(value) if isinstance(value, str) and value else "schedule"


def _seed(row) -> int:
    given = Column.seed_offset in row and is_finite_number(row[Column.seed_offset])
    return int(row[Column.seed_offset]) if given else 0


Final = tuple[str, Optional[int], int, Optional[float], int]
"""(control, fixed batch or None, seed, final loss or None (diverged), steps)."""


def _finals(history: pd.DataFrame, budget: int) -> tuple[list[Final], bool]:
    """(control, fixed batch or None, seed, final loss or None (diverged), steps) per run that reached the budget
    or diverged; and whether the seeds are held out. An experiment whose schedule ran on seed offset 0 (the
    trunk's: before validation seeds were held out) counted the trunk as the small batch's seed 0, and still does."""
    out: list[Final] = []
    runs = rows_of_role(history, "schedule")
    if runs.empty:
        return out, True
    key = [Column.trial_id] if Column.trial_id in runs else [c for c in (Column.control, Column.batch_size,
                                                                          Column.seed_offset) if c in runs]
    for _, run in runs.groupby(key, sort=False, dropna=False):
        last = last_report(run)
        if int(last[Column.samples_seen]) != budget and not diverged_runs(last):
            continue  # unfinished
        name = _control_of(last)
        out.append((name, None if name == "schedule" else int(last[Column.batch_size]), _seed(last),
                    None if diverged_runs(last) else float(last[Column.eval_loss]), int(last[Column.steps])))
    held_out = not any(seed == 0 for _, _, seed, _, _ in out)
    trunk = last_report(rows_of_role(history, "trunk"))
    if not held_out and trunk is not None and (int(trunk[Column.samples_seen]) == budget or diverged_runs(trunk)):
        out.append(("small", int(trunk[Column.batch_size]), 0, None if diverged_runs(trunk) else
                    float(trunk[Column.eval_loss]), int(trunk[Column.steps])))
    return out, held_out


def _summarise(name: str, batch: Optional[int], runs: list) -> Control:
    losses = {seed: loss for _, _, seed, loss, _ in sorted(runs, key=lambda r: r[2]) if loss is not None}
    values = list(losses.values())
    mean = float(np.mean(values)) if values else None
    ci = None
    if mean is not None and len(values) > 1:
        half = t_quantile_975(len(values) - 1) * float(np.std(values, ddof=1)) / math.sqrt(len(values))
        ci = [mean - half, mean + half]
    steps = max((r[4] for r in runs if r[3] is not None), default=None)
    return Control(name, batch, steps, len(values), mean, ci, losses, len(runs) - len(values))


def _controls(finals: list) -> tuple[Control, ...]:
    groups: dict = {}
    for r in finals:
        groups.setdefault((r[0], r[1]), []).append(r)
    order = {n: i for i, n in enumerate(CONTROL_NAMES)}
    return tuple(_summarise(n, b, rs) for (n, b), rs in sorted(groups.items(),
                                                               key=lambda kv: (order.get(kv[0][0], 9), kv[0][1] or 0)))


def _fixed_runs(controls: Sequence[Control]) -> list[FixedRun]:
    """One fixed run per batch (a batch both ``large`` and ``iso_steps`` counts once, its first)."""
    runs: dict = {}
    for c in controls:
        if c.name != "schedule" and c.final_loss_mean is not None and c.batch_size not in runs:
            runs[c.batch_size] = c.as_fixed_run()
    return list(runs.values())


def validate_schedule(history: pd.DataFrame, *, budget_samples: Optional[int] = None, margin: float = 0.01,
                      relative: bool = False, configurations: Optional[list] = None,
                      interpolation: str = PCHIP) -> Optional[ScheduleValidation]:
    """The validation's reading (module docstring; the tests: ``methods.branch.reading_verdicts``) from the
    ``role == "schedule"`` runs (``control``, ``seed_offset``); None when no schedule run reported. Runs that did
    not reach ``budget_samples`` (default: the trunk's last ``samples_seen``) are left out. ``margin``: ε in
    nats, or with ``relative`` a fraction of the small batch's mean final loss. ``configurations``: what each
    control trained at (control_configurations.py's ``configurations_run``); ``interpolation``: how iso-loss
    steps read the frontier (``maths.iso_loss``)."""
    runs = rows_of_role(history, "schedule")
    if runs.empty:
        return None
    require_columns(history, [Column.steps, Column.eval_loss], where="validate_schedule")
    if budget_samples is None:
        budget_samples = int(history[Column.samples_seen].max())
    finals, held_out = _finals(history, budget_samples)
    controls = _controls(finals)
    schedule, small = next((c for c in controls if c.name == "schedule"), None), next(
        (c for c in controls if c.name == "small"), None)
    fixed = _fixed_runs(controls)
    frontier = [[r.steps, r.mean_se()[0]] for r in sorted(fixed, key=lambda r: r.steps)]
    on_it = sorted(r.batch_size for r in fixed if r.steps)
    front = FrontierControls(on_it, [c for c in configurations if int(c[Column.batch_size]) in on_it]
                             if configurations is not None else None, interpolation)
    criterion = criterion_text(margin, relative=relative)
    if schedule is None or schedule.final_loss_mean is None or schedule.steps is None or small is None \
            or small.final_loss_mean is None or small.batch_size is None:
        return ScheduleValidation(controls, frontier, [p.to_dict() for p in frontier_band(fixed)],
                                  BelowFrontier(0, None, None, None, None, None, 0, {}), None,
                                  StepsSaved(None, None, None, None, []), None, criterion,
                                  "the schedule's or the small batch's runs did not finish (or every one diverged): "
                                  "nothing to read", held_out, frontier_controls=front)
    nats = margin * small.final_loss_mean if relative else margin
    ni = non_inferiority(schedule.final_losses, small.final_losses, margin=nats)
    below = below_frontier(schedule.final_losses, schedule.steps, fixed)
    saved = steps_saved(schedule.steps, fixed, small_batch=small.batch_size, margin=nats)
    vs_small = 1.0 - schedule.steps / small.steps if small.steps else None
    band = [p.to_dict() for p in frontier_band(fixed, extra_steps=[schedule.steps])]
    iso = iso_loss_reading(schedule, fixed, interpolation=interpolation)
    vs_tuned = non_inferiority_vs_tuned(schedule, fixed, margin=nats, configurations=front.configurations)
    text = verdict_text(controls, ni, below, saved, vs_small, held_out, iso=iso, vs_tuned=vs_tuned)
    return ScheduleValidation(controls, frontier, band, below, ni, saved, vs_small, criterion, text, held_out, iso,
                              front, vs_tuned)


def _signed(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:+.4f}"


def iso_loss_text(iso: IsoLossSteps) -> str:
    """Iso-loss steps in words (the report's first sentence on the validation)."""
    if iso.saved_fraction is None:
        return "Iso-loss steps: not read (no seed with the schedule and every fixed batch finished)"
    interval = "" if iso.interval_95 is None else \
        f", 95 % interval over seeds {iso.interval_95[0]:+.0%} to {iso.interval_95[1]:+.0%}"
    word = "fewer" if iso.saved_fraction >= 0 else "more"
    bounds = {d: sum(1 for c in iso.censored.values() if c == d) for d in ("above", "below")}
    caveat = "".join(f"; on {n} seed(s) the schedule's loss was {where} of the frontier, the figure there a "
                     f"bound ({kind})" for n, where, kind in ((bounds["above"], "below the lowest", "at least"),
                                                              (bounds["below"], "above the highest", "at most")) if n)
    caveat += f"; the mean is a {iso.bound}" if iso.bound else ""
    how = "through a monotone cubic (PCHIP)" if iso.interpolation == PCHIP else "by chords"
    return (f"Iso-loss steps: the schedule reaches its final loss in {iso.schedule_steps} optimizer steps, "
            f"{abs(iso.saved_fraction):.0%} {word} than the fixed-batch frontier (B in {iso.frontier_batches}, "
            f"read {how} in log-steps, seed by seed) needs to reach it (saved {iso.saved_fraction:+.0%}{interval}; "
            f"{iso.seeds} seeds){caveat}")


def verdict_text(controls: Sequence[Control], ni: NonInferiority, below: BelowFrontier, saved: StepsSaved,
                 vs_small: Optional[float], held_out: bool = True, *, iso: Optional[IsoLossSteps] = None,
                 vs_tuned: Optional[NonInferiorityVsTuned] = None) -> str:
    """Non-inferiority to the best (tuned) fixed batch, iso-loss steps, then the three verdicts in words with their
    figures (the report's and the terminal's)."""
    def ci(c: Control) -> str:
        return f" [{c.final_loss_ci95[0]:.4f}, {c.final_loss_ci95[1]:.4f}]" if c.final_loss_ci95 else ""

    rows = "; ".join(f"{c.name}{'' if c.batch_size is None else f' B={c.batch_size}'}: {c.steps} steps, loss "
                     f"{c.final_loss_mean:.4f}{ci(c)} ({c.seeds} seeds)"
                     for c in controls if c.final_loss_mean is not None)
    word = {True: "yes", False: "no", None: "not shown (fewer than two paired seeds)"}
    parts = ([non_inferiority_vs_tuned_text(vs_tuned)] if vs_tuned is not None else []) + (
             [iso_loss_text(iso)] if iso is not None else []) + [
             rows + ("" if held_out else " (the small batch's seed 0 is the trunk: not held out)"),
             f"Non-inferior to the small batch: {word[ni.holds]} — paired difference "
             f"{_signed(ni.difference_mean)} nats, one-sided 95 % upper bound {_signed(ni.upper_95)} against ε = "
             f"{ni.margin:.4g} over {ni.seeds} seeds"]
    if below.frontier_loss is None:
        parts.append("Below the frontier: not read (the fixed batches do not bracket the schedule's steps)")
    else:
        assert below.between is not None  # read with the frontier's loss
        verdict = "yes" if below.holds else "no" if below.holds is False else "not shown"
        parts.append(f"Below the fixed-batch frontier: {verdict}"
                     f" — at its {below.steps} steps the frontier (B={below.between[0]}–{below.between[1]}, "
                     f"interpolated in log-steps) is at {below.frontier_loss:.4f}; paired difference "
                     f"{_signed(below.difference_mean)}, one-sided 95 % upper bound {_signed(below.upper_95)} "
                     f"(below only under 0)")
    if saved.fraction is not None:
        assert saved.interval is not None  # read with the fraction
        low = "–" if saved.interval[0] is None else f"{saved.interval[0]:.0%}"
        parts.append(f"Secondary, thresholded: steps saved against B={saved.against_batch} ({saved.against_steps} "
                     f"steps, the fixed batch "
                     f"with the fewest steps non-inferior to the small batch): {saved.fraction:.0%}, interval "
                     f"[{low}, {saved.fraction:.0%}]" + ("" if vs_small is None else
                                                          f"; {vs_small:.0%} against the small batch itself"))
    return ". ".join(parts)


# ---- cost ----------------------------------------------------------------------------------------------

BRANCH_RUN = [Column.start_samples, Column.batch_size, Column.alpha]  # a branch run without its trial_id


def samples_trained(history: pd.DataFrame) -> dict[str, int]:
    """Samples each role trained, from the history: per run, its last ``samples_seen`` minus its
    ``start_samples`` (a branch from 2048 that reports at 3072 trained 1024), summed per role."""
    if history.empty:
        return {}
    require_columns(history, [Column.samples_seen], where="samples_trained")
    if Column.trial_id in history:
        runs = history[Column.trial_id].astype(str)
    else:  # one trunk and one schedule run; a branch is its checkpoint, batch and alpha
        runs = history.apply(lambda r: (r.get(Column.role),) + (tuple(r.get(c) for c in BRANCH_RUN)
                                                                if r.get(Column.role) == "branch" else ()),
                             axis=1).astype(str)
    out: dict[str, int] = {}
    for _, run in history.groupby(runs, sort=False):
        last = run.sort_values(Column.samples_seen, kind="stable").iloc[-1]
        start = last.get(Column.start_samples)
        start = int(start) if is_finite_number(start) else 0
        role = str(last.get(Column.role, "trunk"))
        out[role] = out.get(role, 0) + int(last[Column.samples_seen]) - start
    return out
