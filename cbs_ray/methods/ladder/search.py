"""The ladder on Ray (``search.method: ladder``): every (batch, seed) run as a trial of one Tune experiment
(``<name>-ladder-<date>-<time>``), a plain grid with no ASHA and no TPE (each run's whole curve is the
measurement), then the ladder's summary and report. The pure parts are ``methods.ladder.settings`` (the section and
its rule), ``methods.ladder.reading`` and ``methods.ladder.report`` (the report steps); this module holds what each run
trains (``ladder_run_plan``: a ``train.run_plan.RunPlan``, so that ``train`` knows no method's plan) and starts the
runs. Its ``METHOD`` is what its entry in ``records.method_registry`` names.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from cbs_ray.maths.budget import optimizer_steps
from cbs_ray.methods.ladder.hooks import AveragesIterates
from cbs_ray.methods.ladder.reading_stop import LadderStop
from cbs_ray.methods.ladder.settings import MIN_RUNG_SPAN, Ladder, resolve_ladder
from cbs_ray.records.meta import METHOD_RECORD, ExperimentMeta
from cbs_ray.records.trial_point import BATCH_KEY, batch_of, encode_batch
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.hooks import TrainingHooks
from cbs_ray.train.run_plan import LrSchedule, RunPlan
from cbs_ray.train.trial_plans import PresetPlans
from cbs_ray.tune.prepare import Prepared
from cbs_ray.tune.search_method import Launch, Stage, check_batches_fit
from cbs_ray.tune.time_estimate import PlannedRun, PlannedStage

if TYPE_CHECKING:  # the outline (a --dry-run) loads none of Ray's machinery, pandas nor matplotlib: imported where used
    from cbs_ray.tune.driver import ExperimentLauncher

__all__ = ["METHOD", "LadderMethod", "ladder_configs", "ladder_launch", "ladder_outline_lines", "ladder_plans",
           "ladder_run_plan", "resolved_ladder"]


def ladder_outline_lines(spec: SearchSpec, ld: Ladder) -> list[str]:
    """``--dry-run``: the rungs, the runs and what the ladder trains against a from-scratch search at the full
    budget over the same batches."""
    steps = ", ".join(f"B={b}: {ld.stop_samples // b}" for b in ld.batches)
    rungs = ld.rung_evaluations
    reading = ("the average of its iterates (ladder.reading ewa: polynomial-decay averaging, evaluated beside the raw "
               "model)" if ld.reading == "ewa" else "the raw model (ladder.reading raw)")
    lines = [
        f"{spec.name}: ladder, full budget D = {ld.budget_samples} samples; the smallest batch trains to "
        f"{ld.stop_samples} samples ({ld.stop_samples / ld.budget_samples:.0%} of D), every other until it reaches "
        f"the smallest batch's {ld.metric} there or {ld.ladder_cap} samples (ladder.cap {ld.cap:g}), at a constant "
        f"LR after warmup; each run's {ld.metric} read through {reading}",
        f"  batches {list(ld.batches)} x {ld.seeds} seeds = {len(ld.batches) * ld.seeds} trials; peak lr by alpha "
        f"{ld.alpha:g}: " + ", ".join(f"B={b}: {ld.peak_lr(b):.3g}" for b in ld.batches),
        f"  optimizer steps to the fraction: {steps} (floor ladder.min_steps={ld.min_steps})",
        *([f"  warmup steps (at least ladder.min_warmup_steps={ld.min_warmup_steps}): "
           + ", ".join(f"B={b}: {ld.warmup_steps(b)}" for b in ld.batches)] if ld.min_warmup_steps else []),
        *(["  S(B) counted in steps weighted by their LR (ladder.step_count lr_weighted: a warmup of W steps counts "
           "about W/2)"] if ld.step_count == "lr_weighted" else []),
        f"  rungs at {', '.join(map(str, rungs))} samples (from twice the warmup, {ld.warmup_samples} samples, "
        f"on; a span of {ld.rung_span:.3g}x in D); B_crit fitted at each, then "
        + ("the exponent of B_crit ∝ D^γ over the rungs, weighed with a prior (ladder.predict power_law; "
           "maths.prediction), from the last rung to " if ld.predict == "power_law"
           else "B_crit = c·L^k fitted against each rung's target loss L (ladder.predict loss), at the smallest "
           "batch's loss at D extrapolated by a power law in "
           "samples from its last octave before the fraction: the prediction at ") + f"{ld.budget_samples}",
        f"  samples trained: at most {ld.ladder_samples_at_most} = {ld.ladder_samples_at_most / ld.full_samples:.2f} "
        f"of one from-scratch search at the full budget over the same batches and seeds ({ld.full_samples})",
    ]
    if ld.rung_span < MIN_RUNG_SPAN:
        lines.append(f"  warning: the rungs span under {MIN_RUNG_SPAN}x in D, too short to read the exponent well; "
                     f"lower the warmup (search.warmup_fraction_range) or ladder.first_rung, or raise ladder.fraction")
    if ld.validate:
        lines.append(f"  then (--validate-prediction): the runs go on, the smallest batch to D, every other until it "
                     f"reaches the smallest batch's {ld.metric} at D or {ld.run_stop} samples (ladder.cap x D); the "
                     f"ladder reads each run only up to where it alone would have stopped")
    return lines


class LadderStopper:
    """Ends a ladder run once it has trained far enough (``methods.ladder.reading_stop.LadderStop`` decides). A Tune
    ``Stopper`` by its two calls (the runner combines it with its own in Tune's ``CombinedStopper``), not by its
    base class, so that the ladder's outline is read without importing Ray's Tune."""

    def __init__(self, ld: Ladder):
        self.rule = LadderStop(reference_batch=min(ld.batches), reference_stop=ld.reference_stop, seeds=ld.seeds)
        self.column = ld.reading_column

    def __call__(self, trial_id, result) -> bool:
        value = result.get(self.column)
        return self.rule.observe(int(result["batch_size"]), int(result.get("config", {}).get("seed_offset", 0)),
                                 int(result["samples_seen"]), math.nan if value is None else float(value))

    def stop_all(self) -> bool:
        return False


def ladder_run_plan(ladder: Ladder, batch: int, stop_samples: int, seed_offset: int = 0) -> RunPlan:
    """A ladder run's plan (a ``train.run_plan.RunPlan`` of ``methods.ladder.settings``'s ``Ladder``): ``batch`` from 0
    to ``stop_samples`` at the alpha rule's LR, constant after its warmup, evaluating at the ladder's geometric points
    up to the stop (the stopper may end it sooner: ``methods.ladder.reading_stop``), with the average of its iterates
    (``methods.ladder.hooks``) where ``ladder.reading`` is ``ewa``."""
    lr = LrSchedule(batch=batch, alpha=ladder.alpha, peak=ladder.peak_lr(batch),
                    warmup_steps=ladder.warmup_steps(batch), total_steps=optimizer_steps(stop_samples, batch),
                    decay="constant", warmup_fraction=ladder.warmup_fraction)
    return RunPlan(batch_schedule=((0, batch),), start_samples=0, stop_samples=stop_samples,
                   report_at=tuple(e for e in ladder.evaluations if e <= stop_samples), lr=lr, seed_offset=seed_offset,
                   hooks=AveragesIterates() if ladder.reading == "ewa" else TrainingHooks())


def ladder_configs(ladder: Ladder) -> list[dict]:
    """One Tune config per (batch, seed) of the ladder, each stopping at ``ladder.run_stop``."""
    return [{BATCH_KEY: encode_batch(batch), "alpha": ladder.alpha, "warmup_fraction": ladder.warmup_fraction,
             "seed_offset": seed, "ladder_stop_samples": ladder.run_stop}
            for batch in ladder.batches for seed in range(ladder.seeds)]


def ladder_plans(ld: Ladder) -> PresetPlans:
    """Every (batch, seed) run (``ladder_configs``) with its plan (``ladder_run_plan``)."""
    return PresetPlans.of(ladder_configs(ld), lambda point: ladder_run_plan(
        ld, batch_of(point), int(point["ladder_stop_samples"]), int(point["seed_offset"])))


def resolved_ladder(spec: SearchSpec, prepared: Prepared) -> Ladder:
    """The ``ladder:`` section against the prepared budget (in the prepared data's tokens where it is in tokens),
    every batch within the training set."""
    tokens = None if spec.training.budget_tokens is None else prepared.tokens_per_sample
    ld = resolve_ladder(spec, prepared.budget_samples, tokens)
    check_batches_fit("search.batch_sizes", max(ld.batches), prepared.train_examples)
    return ld


class LadderMethod:
    """``search.method: ladder`` (``tune.search_method.SearchMethod``)."""

    name = "ladder"

    def outline_lines(self, spec: SearchSpec, prepared: Prepared) -> list[str]:
        return ladder_outline_lines(spec, resolved_ladder(spec, prepared))

    def check(self, spec: SearchSpec, prepared: Prepared) -> None:
        resolved_ladder(spec, prepared)

    def milestone_samples(self, spec: SearchSpec, prepared: Prepared) -> list[int]:
        """The rungs, in samples: where ``--dry-run`` states the tokens per parameter beside D's."""
        return list(resolved_ladder(spec, prepared).rung_evaluations)

    def planned_stages(self, spec: SearchSpec, prepared: Prepared) -> list[PlannedStage]:
        """What the dry run's time estimate counts (``tune.time_estimate``): every (batch, seed) run as planned, the
        smallest batch's to where its stopper ends it, each larger one from there (the earliest it can reach the
        smallest's loss) to the most it trains (``ladder.cap``)."""
        ld = resolved_ladder(spec, prepared)
        smallest, runs = min(ld.batches), []
        for batch in ld.batches:
            stop = ld.reference_stop if batch == smallest else ld.run_stop
            for seed in range(ld.seeds):
                runs.append(PlannedRun.of(f"B={batch}", ladder_run_plan(ld, batch, stop, seed),
                                          None if batch == smallest else ld.reference_stop))
        return [PlannedStage("ladder", tuple(runs), f" (each larger batch until it reaches B={smallest}'s loss, "
                                                    f"at most ladder.cap {ld.cap:g}x)")]

    def stages(self, spec: SearchSpec, prepared: Prepared) -> list[Stage]:
        """Every (batch, seed) run as a trial of one Tune experiment."""
        ld = resolved_ladder(spec, prepared)
        return [Stage("search", lambda launcher, first: ladder_launch(spec, launcher, ld), _restore)]


def ladder_launch(spec: SearchSpec, launcher: ExperimentLauncher, ld: Ladder) -> Launch:
    """The ladder's one Tune experiment, its resolved section recorded first."""
    from cbs_ray.tune.runner import points_config

    plans = ladder_plans(ld)
    return Launch(lambda name, meta: launcher.tune(meta=meta, name=name, stopper=LadderStopper(ld), plans=plans,
                                                 **points_config(plans.points)),
                  {"method": "ladder", "metric": ld.metric, "mode": "min", "budget_samples": ld.budget_samples,
                   "tokens_per_sample": ld.tokens_per_sample,
                   METHOD_RECORD: {**ld.to_meta(), "max_seq_length": spec.data.max_seq_length}}, kind="ladder")


def _restore(launcher: ExperimentLauncher, path: str, meta: ExperimentMeta) -> None:
    """Its unfinished runs from their checkpoints."""
    launcher.tune(meta=meta, restore=path, plans=ladder_plans(resolved_ladder(launcher.spec, launcher.prepared)))


METHOD = LadderMethod()
"""What its entry in ``records.method_registry`` names."""
