"""A branch search's summary (``BranchSummary``, whose ``to_json`` is ``summary.json``) from its
history: CBS(t) at every checkpoint, its trend, the schedule and its validation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import pandas as pd

from cbs_ray.analysis.decision import DEFAULT_BASE, Decision, NextSearch
from cbs_ray.analysis.json_values import json_clean
from cbs_ray.maths.budget import scratch_grid_samples
from cbs_ray.maths.lr_schedule import lr_multiplier, warmup_steps
from cbs_ray.methods.branch.control_configurations import NONE, configurations_run
from cbs_ray.methods.branch.decision import TunedFixedBatch, decide_branch
from cbs_ray.methods.branch.reading_points import (
    CbsPoint,
    as_dict,
    critical_batch_over_training,
    diverged_runs,
    is_finite_number,
    loss_column,
    rows_of_role,
    run_key,
)
from cbs_ray.methods.branch.reading_schedule import (
    ScheduleValidation,
    last_report,
    recommend_schedule,
    samples_trained,
    schedule_in_tokens,
    validate_schedule,
)
from cbs_ray.methods.branch.reading_trend import Trend, b_simple_over_training, trend
from cbs_ray.methods.branch.recorded import RecordedBranchSettings, ScheduleDecided
from cbs_ray.methods.branch.summary import BranchRun, LossComparison, LossReading, TrunkRecord
from cbs_ray.records.columns import Column

__all__ = ["BranchSummary", "compare_losses", "schedule_alpha", "seesaw_start_batch", "summarize_branches",
           "trunk_lr_multiplier"]


# ---- the summary ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BranchSummary:
    """Branch mode's answer; ``summary.json`` is its ``to_json``, each attribute named as its key there."""

    critical_batch_over_training: tuple[CbsPoint, ...]
    batch_size_schedule: list[list[int]]
    """``[start_samples, batch_size]`` pairs (``recommend_schedule``)."""
    trend: Trend
    b_simple_over_training: list[list[float]]
    """The trunk's ``[samples_seen, b_simple]`` pairs."""
    schedule_validation: Optional[ScheduleValidation]
    trunk: TrunkRecord
    """``batch_size``, ``peak_lr``, ``final_eval_loss``, ``samples_seen``, ``steps`` (and its warmup)."""
    branches: list[BranchRun]
    """One record per branch run: ``start_samples``, ``batch_size``, ``alpha``, ``peak_lr``, ``eval_loss`` at
    the window's end (None if it never got there), ``diverged``, ``samples_seen``, ``steps``."""
    budget_samples: int
    window_samples: int
    checkpoints: list[int]
    branch_batches: list[int]
    tolerance: float
    total_samples: int
    """Samples trained by the whole branch search: trunk, branches and the validation run."""
    samples_by_role: dict[str, int]
    """Role (``trunk``, ``branch``, ``schedule``) → samples trained, in the order the history has them."""
    scratch_samples: Optional[int]
    """What a from-scratch search over the same batches and alphas trains: one full-budget run per (batch,
    alpha) for the branch batches, plus one at the trunk's batch (the budget × (batches × alphas + 1))."""
    cost_ratio: Optional[float]
    """(trunk + branches) samples / ``scratch_samples`` (the issue's cost target: ≤ 0.5; the validation run is
    not part of finding CBS(t) and is left out of the ratio, counted in ``total_samples``)."""
    metric: str = "eval_loss"
    method: str = "branch"
    tolerance_relative: bool = False
    """ε relative to the reference loss (``branch.tolerance_relative``); absolute in nats otherwise."""
    loss: str = "eval"
    """The loss compared (``branch.loss``: ``eval`` or ``train_ema``)."""
    schedule_rule: str = "fitted"
    """How the schedule grows (``branch.schedule_rule``: ``once_per_crossing``, ``while_safe``, ``fitted`` or
    ``seesaw``)."""
    repeats: int = 1
    alphas: list[float] = field(default_factory=list)
    deviations: list[str] = field(default_factory=list)
    """Where this search departs from the paper's method, one sentence each."""
    loss_comparison: Optional[list[LossComparison]] = None
    """CBS(t) per checkpoint read on both losses, the eval loss and the paper's EMA-smoothed training loss
    (``compare_losses``), the same runs and rule; None where the history lacks one of them."""
    schedule_alpha: Optional[float] = None
    """The alpha the schedule's LR follows (√2 per doubling at 0.5)."""
    tokens_per_sample: Optional[int] = field(default=None, metadata={"omit_if_none": True})
    budget_tokens: Optional[int] = field(default=None, metadata={"omit_if_none": True})
    batch_size_schedule_tokens: Optional[list[list[int]]] = field(default=None, metadata={"omit_if_none": True})
    """``[start_tokens, batch_size_tokens]`` pairs, with packed token budgets only."""
    name: Optional[str] = field(default=None, metadata={"omit_if_none": True})
    experiment_path: Optional[str] = field(default=None, metadata={"omit_if_none": True})
    controls_from: Optional[str] = field(default=None, metadata={"omit_if_none": True})
    """Where the validation's fixed-batch controls took their configuration (``branch.controls_from``): a
    from-scratch experiment's path, or ``none`` (the trunk's); absent without a validation."""
    control_configurations: Optional[list[dict[str, Any]]] = field(default=None, metadata={"omit_if_none": True})
    """Per control batch: ``batch_size``, ``alpha``, ``warmup_fraction``, ``source`` (the experiment, or
    ``trunk``): control_configurations.py."""
    decision: Optional[Decision] = field(default=None, metadata={"omit_if_none": True})
    """What to train the run at (``methods.branch.decision.decide_branch``: the schedule), after ``method``."""

    def to_dict(self) -> dict:
        record = as_dict(self)
        # method first: the key a reader checks to tell a branch summary from a from-scratch one
        decision = {"decision": record.pop("decision")} if "decision" in record else {}
        return {"method": record.pop("method"), **decision, **record}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)


def _branch_records(history: pd.DataFrame, window_samples: int) -> list[BranchRun]:
    branches = rows_of_role(history, "branch")
    if branches.empty:
        return []
    rows = []
    for _, run in branches.groupby(run_key(branches), sort=False):
        run = run.sort_values(Column.samples_seen, kind="stable")
        last, start = run.iloc[-1], int(run.iloc[-1][Column.start_samples])
        at_end = run[run[Column.samples_seen] == start + window_samples]
        end_row = at_end.iloc[-1] if not at_end.empty else None
        loss = None if end_row is None or diverged_runs(end_row) else float(end_row[Column.eval_loss])
        seed = last.get(Column.seed_offset)
        rows.append(BranchRun(
            start_samples=start, batch_size=int(last[Column.batch_size]), alpha=json_clean(last.get(Column.alpha)),
            peak_lr=json_clean(last.get(Column.peak_lr)), eval_loss=loss, diverged=bool(diverged_runs(last)),
            seed_offset=int(seed) if is_finite_number(seed) else 0, samples_seen=int(last[Column.samples_seen]),
            steps=json_clean(last.get(Column.steps)),
            trial_id=str(last[Column.trial_id]) if Column.trial_id in last else None))
    return sorted(rows, key=lambda r: (r.start_samples, r.batch_size, r.alpha or 0.0, r.seed_offset))


def _trunk_warmup(rec: RecordedBranchSettings) -> dict:
    """The trunk's LR warmup, in its optimizer steps and in samples (``integrations`` lays the LR out in samples)."""
    if rec.warmup_fraction is None:
        return {}
    steps = warmup_steps(rec.warmup_fraction, rec.total_steps)
    return {Column.warmup_steps: steps, "warmup_samples": steps * rec.trunk_batch}


def _best_tuned(history: pd.DataFrame, validation: Optional[ScheduleValidation], configs: Optional[list],
                budget: int) -> Optional[TunedFixedBatch]:
    """The validation's best fixed batch where every control was tuned (``non_inferiority_vs_tuned``), with the
    peak LR its runs reported and the warmup its configuration gives; None where the controls were not tuned."""
    vs = validation.non_inferiority_vs_tuned if validation is not None else None
    if vs is None or not vs.tuned or vs.best_fixed_batch is None:
        return None
    batch = int(vs.best_fixed_batch)
    columns = (Column.role, Column.control, Column.batch_size)
    runs = (history[(history[Column.role] == "schedule") & (history[Column.control] != "schedule")
                    & (history[Column.batch_size] == batch)]
            if all(c in history for c in columns) else history.iloc[:0])
    lrs = runs[Column.peak_lr].dropna() if Column.peak_lr in runs else pd.Series(dtype=float)
    config: dict = next((c for c in configs or [] if int(c[Column.batch_size]) == batch), {})
    fraction = config.get(Column.warmup_fraction)
    warmup = None if fraction is None else warmup_steps(float(fraction), max(1, budget // batch)) * batch
    return TunedFixedBatch(batch, json_clean(float(lrs.iloc[-1])) if len(lrs) else None, warmup, vs.holds)


def _recorded(meta: Union[Mapping[str, Any], RecordedBranchSettings]) -> RecordedBranchSettings:
    return meta if isinstance(meta, RecordedBranchSettings) else RecordedBranchSettings.from_json(meta)


def summarize_branches(history: pd.DataFrame, meta: Union[Mapping[str, Any], RecordedBranchSettings], *,
                       next_search: NextSearch = DEFAULT_BASE) -> BranchSummary:
    """Everything branch mode reports, from the history and ``meta``: the experiment's metadata
    (``ExperimentMeta.recorded()``, the keys ``ResolvedBranchSettings.to_meta`` writes beside ``name`` and
    ``experiment_path``) or its settings read once (``methods.branch.recorded.RecordedBranchSettings``).
    ``next_search``: what the decision's next step keeps of this search (``analysis.decision.next_search_base``)."""
    rec = _recorded(meta)
    if rec.metric != Column.eval_loss:
        raise ValueError(f"branch mode reads eval_loss (the loss a branch must recover), not {rec.metric!r}")
    trunk_batch, window, tokens, budget = rec.trunk_batch, rec.window_samples, rec.tokens_per_sample, rec.budget_samples
    batches, tolerance, relative, loss = list(rec.branch_batches), rec.tolerance, rec.tolerance_relative, rec.loss
    points = critical_batch_over_training(history, trunk_batch=trunk_batch, window_samples=window, tolerance=tolerance,
                                          tokens_per_sample=tokens, relative=relative, loss=loss)
    schedule = recommend_schedule(points, trunk_batch=trunk_batch, largest_batch=max(batches), rule=rec.schedule_rule,
                                  budget_samples=budget, lr_multiplier_at=trunk_lr_multiplier(rec), unit=max(batches),
                                  start_batch=seesaw_start_batch(rec, points),
                                  first_doubling_samples=int(rec.seesaw_first_doubling * budget))
    final = last_report(rows_of_role(history, "trunk"))
    final_lr = final.get(Column.peak_lr) if final is not None else None
    trunk = TrunkRecord(
        batch_size=trunk_batch, peak_lr=json_clean(rec.trunk_peak_lr if rec.trunk_peak_lr is not None else final_lr),
        final_eval_loss=None if final is None or diverged_runs(final) else float(final[Column.eval_loss]),
        samples_seen=None if final is None else int(final[Column.samples_seen]),
        steps=None if final is None else json_clean(final.get(Column.steps)), **_trunk_warmup(rec))
    by_role = samples_trained(history)
    alphas = list(rec.alphas) or sorted(rows_of_role(history, "branch")[Column.alpha].dropna().unique().tolist()
                                        if Column.alpha in history else [])
    scratch = scratch_grid_samples(budget, batches, alphas) if alphas else None
    searched = by_role.get("trunk", 0) + by_role.get("branch", 0)
    decided = rec.schedule or ScheduleDecided()
    ran = configurations_run(history, decided.control_configurations, trunk_warmup=rec.warmup_fraction)
    validation = validate_schedule(history, budget_samples=budget, margin=rec.margin, relative=relative,
                                   configurations=ran)
    configs = ran if validation else None
    the_trend, alpha = trend(points, tokens_per_sample=tokens), schedule_alpha(points, alphas, fallback=rec.trunk_alpha)
    decision = decide_branch(
        schedule if points else [], trunk_batch=trunk_batch, trunk_lr=trunk.peak_lr,
        trunk_warmup_samples=trunk.warmup_samples, budget_samples=budget, alpha=alpha,
        validated=validation is not None,
        non_inferior=validation.non_inferiority.holds if validation and validation.non_inferiority else None,
        below_frontier=validation.below_frontier.holds if validation else None, trend_holds=the_trend.holds,
        trend_text=the_trend.text, base=next_search, best_tuned=_best_tuned(history, validation, configs, budget))
    return BranchSummary(
        critical_batch_over_training=tuple(points), batch_size_schedule=schedule,
        trend=the_trend, b_simple_over_training=b_simple_over_training(history),
        schedule_validation=validation,
        trunk=trunk,
        branches=_branch_records(history, window), budget_samples=budget, window_samples=window,
        checkpoints=list(rec.checkpoints), branch_batches=batches, tolerance=tolerance,
        total_samples=sum(by_role.values()), samples_by_role=by_role, scratch_samples=scratch,
        cost_ratio=searched / scratch if scratch else None, metric=rec.metric, tokens_per_sample=tokens,
        budget_tokens=budget * tokens if tokens else None,
        batch_size_schedule_tokens=schedule_in_tokens(schedule, tokens) if tokens else None,
        name=rec.name, experiment_path=rec.experiment_path, tolerance_relative=relative, loss=loss,
        schedule_rule=rec.schedule_rule, repeats=rec.repeats, alphas=[float(a) for a in alphas],
        deviations=list(rec.deviations),
        schedule_alpha=alpha,
        loss_comparison=compare_losses(history, points, loss=loss, trunk_batch=trunk_batch, window_samples=window,
                                       tolerance=tolerance, tokens_per_sample=tokens, relative=relative),
        controls_from=str(decided.controls_from or NONE) if configs else None, control_configurations=configs,
        decision=decision)


def seesaw_start_batch(meta: Union[Mapping[str, Any], RecordedBranchSettings], points) -> int:
    """Where ``seesaw`` starts (``branch.seesaw_start``): ``tuned``, the best tuned fixed batch recorded
    when the validation was decided (``ScheduleDecided.start_batch``); ``cbs`` (and ``tuned`` without a record),
    the CBS at the first resolvable checkpoint (its interval's lower end, k*·B; the trunk's batch where no
    checkpoint is resolvable); ``trunk``, the trunk's batch."""
    rec = _recorded(meta)
    if rec.seesaw_start == "trunk":
        return rec.trunk_batch
    recorded = rec.schedule.start_batch if rec.schedule else None
    if rec.seesaw_start == "tuned" and recorded is not None:
        return int(recorded)
    first = next((p for p in sorted(points, key=lambda p: p.samples_seen)
                  if p.resolvable and p.trunk_loss is not None), None)
    return max(rec.trunk_batch, int(first.batch_size)) if first is not None else rec.trunk_batch


def trunk_lr_multiplier(meta: Union[Mapping[str, Any], RecordedBranchSettings]):
    """The trunk's LR multiplier per optimizer step from the experiment's recorded settings (its warmup fraction,
    budget, batch and ``lr_decay``)."""
    rec = _recorded(meta)
    total = rec.total_steps
    warmup = warmup_steps(rec.warmup_fraction or 0.0, total)
    return lambda step: lr_multiplier(step, warmup, total, decay=rec.lr_decay)


def schedule_alpha(points, alphas, *, fallback: float) -> float:
    """The alpha the schedule's LR follows: the one alpha tried (0.5 by default: √2 per doubling), or, where
    ``branch.alphas`` tried several, the alpha of most passing branches (the smaller on a tie, the gentler LR;
    ``fallback``, the trunk's, when none passed)."""
    alphas = [float(a) for a in alphas]
    if len(alphas) == 1:
        return alphas[0]
    wins: dict = {}
    for p in points:
        for o in p.branches:
            if o.status == "recovers" and o.alpha is not None:
                wins[o.alpha] = wins.get(o.alpha, 0) + 1
    return min(wins, key=lambda a: (-wins[a], a)) if wins else fallback


def _reading(p: CbsPoint) -> LossReading:
    return LossReading(p.batch_size, p.bound, p.interval, p.resolvable, json_clean(p.trunk_improvement))


def compare_losses(history: pd.DataFrame, points, *, loss: str, **rule) -> Optional[list[LossComparison]]:
    """CBS(t) at every checkpoint on the eval loss and on the EMA-smoothed training loss (the paper's reading,
    Merrill et al. 2025 App. A), ``points`` being the reading on ``loss``: one record per checkpoint
    (``samples_seen``, ``eval``, ``train_ema``: each ``batch_size``, ``bound``, ``interval``, ``resolvable``,
    ``trunk_improvement``; ``agree``: the same CBS(t) and the same resolvability). None where the history has
    no finite value of the other loss (an experiment that did not record it)."""
    other = "train_ema" if loss == "eval" else "eval"
    column = loss_column(other)
    branches = rows_of_role(history, "branch")
    if branches.empty or column not in history or not branches[column].map(is_finite_number).any():
        return None
    read = {loss: points, other: critical_batch_over_training(history, loss=other, **rule)}
    by_samples = {name: {p.samples_seen: p for p in pts} for name, pts in read.items()}
    out = []
    for samples in sorted(by_samples[loss]):
        a, b = by_samples["eval"].get(samples), by_samples["train_ema"].get(samples)
        if a is None or b is None:
            continue
        out.append(LossComparison(int(samples), _reading(a), _reading(b),
                                  a.batch_size == b.batch_size and a.bound == b.bound and a.resolvable == b.resolvable))
    return out
