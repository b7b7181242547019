"""A branch search's summary (``BranchSummary``, whose ``to_json`` is ``summary.json``) from its
history: CBS(t) at every checkpoint, its trend, the schedule and its validation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

import pandas as pd

from cbs_ray.analysis.branch_points import (
    CbsPoint,
    _as_dict,
    _clean,
    _diverged,
    _role,
    _run_key,
    critical_batch_over_training,
)
from cbs_ray.analysis.branch_schedule import (
    ScheduleValidation,
    _final,
    recommend_schedule,
    samples_trained,
    schedule_in_tokens,
    validate_schedule,
)
from cbs_ray.analysis.branch_trend import Trend, b_simple_over_training, trend
from cbs_ray.maths.budget import scratch_grid_samples

__all__ = ["BranchSummary", "summarize_branches"]


# ---- the summary ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BranchSummary:
    """Branch mode's answer; ``summary.json`` is its ``to_json``, each attribute named as its key there."""

    critical_batch_over_training: tuple[CbsPoint, ...]
    batch_size_schedule: list
    """``[start_samples, batch_size]`` pairs (``recommend_schedule``)."""
    trend: Trend
    b_simple_over_training: list
    """The trunk's ``[samples_seen, b_simple]`` pairs."""
    schedule_validation: Optional[ScheduleValidation]
    trunk: dict
    """``batch_size``, ``peak_lr``, ``final_eval_loss``, ``samples_seen``, ``steps``."""
    branches: list
    """One record per branch run: ``start_samples``, ``batch_size``, ``alpha``, ``peak_lr``, ``eval_loss`` at
    the window's end (None if it never got there), ``diverged``, ``samples_seen``, ``steps``."""
    budget_samples: int
    window_samples: int
    checkpoints: list
    branch_batches: list
    tolerance: float
    total_samples: int
    """Samples trained by the whole branch search: trunk, branches and the validation run."""
    samples_by_role: dict
    scratch_samples: Optional[int]
    """What a from-scratch search over the same batches and alphas trains: one full-budget run per (batch,
    alpha) for the branch batches, plus one at the trunk's batch (the budget × (batches × alphas + 1))."""
    cost_ratio: Optional[float]
    """(trunk + branches) samples / ``scratch_samples`` (the issue's cost target: ≤ 0.5; the validation run is
    not part of finding CBS(t) and is left out of the ratio, counted in ``total_samples``)."""
    metric: str = "eval_loss"
    method: str = "branch"
    tokens_per_sample: Optional[int] = field(default=None, metadata={"omit_if_none": True})
    budget_tokens: Optional[int] = field(default=None, metadata={"omit_if_none": True})
    batch_size_schedule_tokens: Optional[list] = field(default=None, metadata={"omit_if_none": True})
    """``[start_tokens, batch_size_tokens]`` pairs, with packed token budgets only."""
    name: Optional[str] = field(default=None, metadata={"omit_if_none": True})
    experiment_path: Optional[str] = field(default=None, metadata={"omit_if_none": True})

    def to_dict(self) -> dict:
        record = _as_dict(self)
        # method first: the key a reader checks to tell a branch summary from a from-scratch one
        return {"method": record.pop("method"), **record}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)


def _branch_records(history: pd.DataFrame, window_samples: int) -> list[dict]:
    branches = _role(history, "branch")
    if branches.empty:
        return []
    rows = []
    for _, run in branches.groupby(_run_key(branches), sort=False):
        run = run.sort_values("samples_seen", kind="stable")
        last, start = run.iloc[-1], int(run.iloc[-1]["start_samples"])
        at_end = run[run["samples_seen"] == start + window_samples]
        end_row = at_end.iloc[-1] if not at_end.empty else None
        rows.append({"start_samples": start, "batch_size": int(last["batch_size"]),
                     "alpha": _clean(last.get("alpha")), "peak_lr": _clean(last.get("peak_lr")),
                     "eval_loss": None if end_row is None or _diverged(end_row) else float(end_row["eval_loss"]),
                     "diverged": bool(_diverged(last)), "samples_seen": int(last["samples_seen"]),
                     "steps": _clean(last.get("steps")),
                     **({"trial_id": str(last["trial_id"])} if "trial_id" in last else {})})
    return sorted(rows, key=lambda r: (r["start_samples"], r["batch_size"], r["alpha"] or 0.0))


def summarize_branches(history: pd.DataFrame, meta: dict) -> BranchSummary:
    """Everything branch mode reports, from the history and ``meta`` (the resolved values:
    ``trunk_batch``, ``window_samples``, ``checkpoints``, ``branch_batches``, ``tolerance``, ``budget_samples``,
    ``tokens_per_sample`` (None without packing), ``metric``; ``alphas``, ``trunk_peak_lr``, ``name``,
    ``experiment_path`` where known: ``Branching.to_meta`` writes them)."""
    metric = meta.get("metric", "eval_loss")
    if metric != "eval_loss":
        raise ValueError(f"branch mode reads eval_loss (the loss a branch must recover), not {metric!r}")
    trunk_batch, window = int(meta["trunk_batch"]), int(meta["window_samples"])
    tokens, budget = meta.get("tokens_per_sample"), int(meta["budget_samples"])
    batches = [int(b) for b in meta["branch_batches"]]
    tolerance = float(meta["tolerance"])
    points = critical_batch_over_training(history, trunk_batch=trunk_batch, window_samples=window, tolerance=tolerance,
                                          tokens_per_sample=tokens)
    schedule = recommend_schedule(points, trunk_batch=trunk_batch, largest_batch=max(batches))
    final = _final(_role(history, "trunk"))
    trunk = {"batch_size": trunk_batch,
             "peak_lr": _clean(meta.get("trunk_peak_lr", final.get("peak_lr") if final is not None else None)),
             "final_eval_loss": None if final is None or _diverged(final) else float(final["eval_loss"]),
             "samples_seen": None if final is None else int(final["samples_seen"]),
             "steps": None if final is None else _clean(final.get("steps"))}
    by_role = samples_trained(history)
    alphas = meta.get("alphas") or sorted(_role(history, "branch")["alpha"].dropna().unique().tolist()
                                          if "alpha" in history else [])
    scratch = scratch_grid_samples(budget, batches, alphas) if alphas else None
    searched = by_role.get("trunk", 0) + by_role.get("branch", 0)
    return BranchSummary(
        critical_batch_over_training=tuple(points), batch_size_schedule=schedule,
        trend=trend(points, tokens_per_sample=tokens), b_simple_over_training=b_simple_over_training(history),
        schedule_validation=validate_schedule(history), trunk=trunk,
        branches=_branch_records(history, window), budget_samples=budget, window_samples=window,
        checkpoints=[int(c) for c in meta["checkpoints"]], branch_batches=batches, tolerance=tolerance,
        total_samples=sum(by_role.values()), samples_by_role=by_role, scratch_samples=scratch,
        cost_ratio=searched / scratch if scratch else None, metric=metric, tokens_per_sample=tokens,
        budget_tokens=budget * tokens if tokens else None,
        batch_size_schedule_tokens=schedule_in_tokens(schedule, tokens) if tokens else None,
        name=meta.get("name"), experiment_path=meta.get("experiment_path"))
