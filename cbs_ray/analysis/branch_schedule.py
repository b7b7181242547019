"""Branch mode's batch-size schedule (the paper's batch-size warmup, Merrill et al. 2025 §4) and its
validation against fixed batches.

**The schedule** (``recommend_schedule``): start at the trunk's batch; at each resolvable checkpoint where
CBS(t) reaches twice the current batch, double it once (the paper's rule); double again at the same
checkpoint only while the measurements say each further doubling is safe: CBS(t) reaches twice the batch
again *and* the branch at the doubled batch itself recovered, not a close call. Never beyond the largest
branch batch, never down. The LR follows the alpha rule at the measured alpha, √2 per doubling at alpha 0.5:
the rule the branches were trained with.

**The validation** (``validate_schedule``): the schedule's run and fixed-batch controls over the same samples,
each on the same seeds (seed s of every run shares its initial weights and data order): ``small`` (the
trunk's batch), ``large`` (the largest batch the schedule reaches, from step 0) and ``iso_steps`` (the two
powers of two bracketing the fixed batch that would take the schedule's number of steps, where they are not
``small`` or ``large``). The fixed batches' (steps, mean final loss) pairs are the **frontier**; the schedule
lies **below** it when it takes fewer optimizer steps than every fixed batch whose mean final loss is at most
the schedule's (``CRITERION``, fixed before any validation runs and printed with it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from cbs_ray.analysis.branch_points import CbsPoint, as_dict, diverged_runs, is_finite_number, rows_of_role
from cbs_ray.records.columns import Column, require_columns

__all__ = ["CRITERION", "CONTROL_NAMES", "Control", "ScheduleValidation", "control_batches", "recommend_schedule",
           "samples_trained", "schedule_in_tokens", "schedule_steps", "schedule_total_steps", "t_quantile_975",
           "validate_schedule"]

CONTROL_NAMES = ("schedule", "small", "large", "iso_steps")
CRITERION = ("the schedule is below the fixed-batch frontier when it takes fewer optimizer steps than every fixed "
             "batch whose mean final eval loss is at most the schedule's; its loss holds when its mean final eval "
             "loss is at most the upper end of the small batch's 95 % CI")
"""The validation's success criterion, fixed here before any run (and printed before the runs start)."""


# ---- the schedule ------------------------------------------------------------------------------------

def recommend_schedule(points: Sequence[CbsPoint], *, trunk_batch: int, largest_batch: int) -> list[list[int]]:
    """The batch-size warmup as ``[start_samples, batch_size]`` pairs (module docstring). Points that are not
    resolvable, or whose trunk loss is missing, change nothing."""
    schedule, batch = [[0, int(trunk_batch)]], int(trunk_batch)
    for p in sorted(points, key=lambda p: p.samples_seen):
        if p.trunk_loss is None or not p.resolvable:
            continue
        grown = batch
        if grown * 2 <= min(p.batch_size, largest_batch):
            grown *= 2
            while grown * 2 <= min(p.batch_size, largest_batch):
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


def control_batches(schedule: Sequence[Sequence[int]], budget_samples: int) -> list[tuple[str, int]]:
    """The fixed-batch controls of ``schedule``'s validation, ``(name, batch)``: ``small`` (its first batch),
    ``large`` (its largest) and ``iso_steps`` (the powers of two at and around budget ÷ the schedule's steps,
    those not already small or large)."""
    small, large = int(schedule[0][1]), max(int(b) for _, b in schedule)
    iso = budget_samples / schedule_total_steps(schedule, budget_samples)
    low = 2 ** int(math.floor(math.log2(iso)))
    bracket = sorted({low, low * 2 if low < iso else low})
    return [("small", small), ("large", large),
            *(("iso_steps", b) for b in bracket if b not in (small, large) and small < b < large)]


# ---- the schedule's validation ---------------------------------------------------------------------------

_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t_quantile_975(df: int) -> float:
    """Student's t 97.5 % quantile at ``df`` degrees of freedom (the table's nearest lower entry; 1.96 past 30)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    return _T975[max(k for k in _T975 if k <= df)] if df <= 30 else 1.96


@dataclass(frozen=True)
class Control:
    """One kind of run of the validation (``summary.json`` → ``schedule_validation.controls``)."""

    name: str
    """``schedule``, ``small``, ``large`` or ``iso_steps``."""
    batch_size: Optional[int]
    """The fixed batch (None for the schedule)."""
    steps: Optional[int]
    """Optimizer steps over the budget."""
    seeds: int
    """Runs that finished the budget without diverging."""
    final_loss_mean: Optional[float]
    final_loss_ci95: Optional[list]
    """``[low, high]``: mean ± t(0.975, seeds − 1) · standard error; None with fewer than two seeds."""
    final_losses: list
    """Each finished seed's final eval loss, by seed offset."""
    diverged: int = 0

    def to_dict(self) -> dict:
        return as_dict(self)


@dataclass(frozen=True)
class ScheduleValidation:
    """The schedule's runs against the fixed-batch controls over the same samples and seeds."""

    controls: tuple[Control, ...]
    frontier: list
    """The fixed batches' ``[steps, final_loss_mean]`` pairs, fewest steps first."""
    below_frontier: Optional[bool]
    """Fewer steps than every fixed batch whose mean final loss is at most the schedule's (None: not readable)."""
    loss_holds: Optional[bool]
    """The schedule's mean final loss is at most the upper end of the small batch's 95 % CI (or its mean, with
    one seed)."""
    steps_saved_vs_small: Optional[float]
    """1 − schedule steps / small-batch steps."""
    criterion: str
    text: str

    def control(self, name: str) -> Optional[Control]:
        return next((c for c in self.controls if c.name == name), None)

    def to_dict(self) -> dict:
        return as_dict(self)


def last_report(frame: pd.DataFrame):
    return frame.sort_values(Column.samples_seen, kind="stable").iloc[-1] if not frame.empty else None


def _control_of(row) -> str:
    value = row.get(Column.control)
    return str(value) if isinstance(value, str) and value else "schedule"


def _finals(history: pd.DataFrame, budget: int) -> list[tuple[str, Optional[int], int, Optional[float], int]]:
    """(control, fixed batch or None, seed, final loss or None (diverged), steps) per run that reached the budget
    or diverged; the trunk counts as ``small`` seed 0."""
    out = []
    trunk = last_report(rows_of_role(history, "trunk"))
    if trunk is not None and (int(trunk[Column.samples_seen]) == budget or diverged_runs(trunk)):
        out.append(("small", int(trunk[Column.batch_size]), 0, None if diverged_runs(trunk) else
                    float(trunk[Column.eval_loss]), int(trunk[Column.steps])))
    runs = rows_of_role(history, "schedule")
    if runs.empty:
        return out
    key = [Column.trial_id] if Column.trial_id in runs else [c for c in (Column.control, Column.batch_size,
                                                                          Column.seed_offset) if c in runs]
    for _, run in runs.groupby(key, sort=False, dropna=False):
        last = last_report(run)
        if int(last[Column.samples_seen]) != budget and not diverged_runs(last):
            continue  # unfinished
        name = _control_of(last)
        seed = int(last[Column.seed_offset]) if Column.seed_offset in last and is_finite_number(last[Column.seed_offset]) else 0
        out.append((name, None if name == "schedule" else int(last[Column.batch_size]), seed,
                    None if diverged_runs(last) else float(last[Column.eval_loss]), int(last[Column.steps])))
    return out


def _summarise(name: str, batch: Optional[int], runs: list) -> Control:
    losses = [(seed, loss) for _, _, seed, loss, _ in sorted(runs, key=lambda r: r[2]) if loss is not None]
    values = [v for _, v in losses]
    mean = float(np.mean(values)) if values else None
    ci = None
    if len(values) > 1:
        half = t_quantile_975(len(values) - 1) * float(np.std(values, ddof=1)) / math.sqrt(len(values))
        ci = [mean - half, mean + half]
    steps = max((r[4] for r in runs if r[3] is not None), default=None)
    return Control(name, batch, steps, len(values), mean, ci, values, len(runs) - len(values))


def validate_schedule(history: pd.DataFrame, *, budget_samples: Optional[int] = None) -> Optional[ScheduleValidation]:
    """The validation's reading (module docstring) from the ``role == "schedule"`` runs (``control``,
    ``seed_offset``) and the trunk (``small`` at seed 0); None when no schedule run reported. Runs that did not
    reach ``budget_samples`` (default: the trunk's last ``samples_seen``) are left out."""
    runs = rows_of_role(history, "schedule")
    if runs.empty:
        return None
    require_columns(history, [Column.steps, Column.eval_loss], where="validate_schedule")
    if budget_samples is None:
        budget_samples = int(history[Column.samples_seen].max())
    finals = _finals(history, budget_samples)
    groups: dict = {}
    for r in finals:
        groups.setdefault((r[0], r[1]), []).append(r)
    order = {n: i for i, n in enumerate(CONTROL_NAMES)}
    controls = tuple(_summarise(n, b, rs) for (n, b), rs in sorted(groups.items(),
                                                                   key=lambda kv: (order.get(kv[0][0], 9), kv[0][1] or 0)))
    schedule = next((c for c in controls if c.name == "schedule"), None)
    fixed = [c for c in controls if c.name != "schedule" and c.final_loss_mean is not None]
    frontier = sorted([[c.steps, c.final_loss_mean] for c in fixed], key=lambda x: x[0])
    small = next((c for c in controls if c.name == "small"), None)
    if schedule is None or schedule.final_loss_mean is None:
        return ScheduleValidation(controls, frontier, None, None, None, CRITERION,
                                  "the schedule's runs did not finish (or every one diverged): nothing to read")
    reaching = [c for c in fixed if c.final_loss_mean <= schedule.final_loss_mean]
    below = all(schedule.steps < c.steps for c in reaching)
    loss_holds = None
    if small is not None and small.final_loss_mean is not None:
        line = small.final_loss_ci95[1] if small.final_loss_ci95 else small.final_loss_mean
        loss_holds = schedule.final_loss_mean <= line + 1e-12
    saved = 1.0 - schedule.steps / small.steps if small is not None and small.steps else None

    def ci(c: Control) -> str:
        return f" [{c.final_loss_ci95[0]:.4g}, {c.final_loss_ci95[1]:.4g}]" if c.final_loss_ci95 else ""

    rows = "; ".join(f"{c.name}{'' if c.batch_size is None else f' B={c.batch_size}'}: {c.steps} steps, loss "
                     f"{c.final_loss_mean:.4g}{ci(c)} ({c.seeds} seeds)" for c in controls if c.final_loss_mean is not None)
    verdict = ("below the fixed-batch frontier" if below else "not below the fixed-batch frontier: "
               + ", ".join(f"B={c.batch_size} reaches its loss in {c.steps} steps" for c in reaching
                           if c.steps <= schedule.steps))
    text = (f"{rows}. The schedule is {verdict}" + ("" if reaching or not below else
                                                     " (no fixed batch reaches its loss)")
            + ("" if loss_holds is None else f"; its loss {'is' if loss_holds else 'is not'} within the small "
               f"batch's 95 % CI or below it") + (f"; {saved:.0%} fewer steps than the small batch" if saved is not None
                                                  else ""))
    return ScheduleValidation(controls, frontier, below, loss_holds, saved, CRITERION, text)


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
