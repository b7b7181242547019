"""Branch mode's batch-size schedule (the paper's batch-size warmup): start at the trunk's batch; from
each checkpoint on, the batch doubles as long as CBS(t) reaches the doubled batch, never beyond the largest
branch batch and never down (``recommend_schedule``); the schedule in tokens and steps; ``validate_schedule``
compares its run with the trunk (the fixed small batch: same seed, same data order, same samples).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pandas as pd

from cbs_ray.analysis.branch_points import LOSS_TARGET, STEPS_TARGET, CbsPoint, _as_dict, _diverged, _finite, _role
from cbs_ray.records.columns import Column, require_columns

__all__ = ["ScheduleValidation", "recommend_schedule", "schedule_in_tokens", "schedule_steps", "schedule_total_steps", "validate_schedule", "samples_trained"]


# ---- the schedule ------------------------------------------------------------------------------------

def recommend_schedule(points: Sequence[CbsPoint], *, trunk_batch: int, largest_batch: int) -> list[list[int]]:
    """The batch-size warmup as ``[start_samples, batch_size]`` pairs: the trunk's batch from 0; at each
    checkpoint the batch doubles while CBS(t) reaches the doubled batch (several doublings at once where
    CBS(t) jumps), never beyond ``largest_batch``, never down (a later, lower CBS(t) keeps the batch: ``trend``
    reports the decrease). A point whose trunk loss is missing changes nothing."""
    schedule, batch = [[0, int(trunk_batch)]], int(trunk_batch)
    for p in sorted(points, key=lambda p: p.samples_seen):
        if p.trunk_loss is None:
            continue
        grown = batch
        while grown * 2 <= min(p.batch_size, largest_batch):
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


# ---- the schedule's validation ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ScheduleValidation:
    """The recommended schedule's run against the trunk (the fixed small batch) over the same samples."""

    schedule_steps: int
    trunk_steps: int
    steps_saved: float
    """1 − schedule steps / trunk steps (0.43: 43 % fewer optimizer steps)."""
    schedule_loss: Optional[float]
    trunk_loss: Optional[float]
    loss_difference: Optional[float]
    """schedule loss / trunk loss − 1 (positive: the schedule ends worse)."""
    schedule_samples: int
    trunk_samples: int
    target_met: bool
    """loss_difference ≤ LOSS_TARGET and steps_saved ≥ STEPS_TARGET (the issue's target)."""
    text: str

    def to_dict(self) -> dict:
        return _as_dict(self)


def _final(frame: pd.DataFrame):
    return frame.sort_values(Column.samples_seen, kind="stable").iloc[-1] if not frame.empty else None


def validate_schedule(history: pd.DataFrame) -> Optional[ScheduleValidation]:
    """The ``role == "schedule"`` run's last report against the trunk's: optimizer steps, final eval loss;
    None when no schedule run reported."""
    run, trunk = _final(_role(history, "schedule")), _final(_role(history, "trunk"))
    if run is None or trunk is None:
        return None
    require_columns(history, [Column.steps, Column.eval_loss], where="validate_schedule")
    steps, trunk_steps = int(run[Column.steps]), int(trunk[Column.steps])
    saved = 1.0 - steps / trunk_steps if trunk_steps else 0.0
    loss = None if _diverged(run) else float(run[Column.eval_loss])
    trunk_loss = None if _diverged(trunk) else float(trunk[Column.eval_loss])
    diff = loss / trunk_loss - 1.0 if loss is not None and trunk_loss is not None else None
    met = diff is not None and diff <= LOSS_TARGET + 1e-12 and saved >= STEPS_TARGET - 1e-12
    samples, trunk_samples = int(run[Column.samples_seen]), int(trunk[Column.samples_seen])
    if diff is None:
        text = ("the schedule's run diverged" if loss is None else "the trunk diverged") + \
            f" ({steps} vs {trunk_steps} optimizer steps)"
    else:
        text = (f"{steps} optimizer steps vs the fixed small batch's {trunk_steps} ({saved:.0%} fewer), final eval "
                f"loss {loss:.4g} vs {trunk_loss:.4g} ({diff:+.2%}): target (≤ {LOSS_TARGET:.0%} worse, ≥ "
                f"{STEPS_TARGET:.0%} fewer steps) {'met' if met else 'not met'}")
    if samples != trunk_samples:
        text += f"; unequal samples: {samples} vs {trunk_samples} (a run did not finish)"
    return ScheduleValidation(steps, trunk_steps, saved, loss, trunk_loss, diff, samples, trunk_samples, met, text)


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
        start = int(start) if _finite(start) else 0
        role = str(last.get(Column.role, "trunk"))
        out[role] = out.get(role, 0) + int(last[Column.samples_seen]) - start
    return out
