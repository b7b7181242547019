"""What the methods read of another experiment of the same spec: a branch experiment's history with its
schedule run (``branch_history``: branch mode's own report, and the ladder's), and the batch-size schedule
branch mode recommends for the run a ladder is about (``same_spec_schedule``). Both methods import this module,
neither the other (the independence contract in pyproject.toml)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd

from cbs_ray.methods.branch.reading import summarize_branches
from cbs_ray.records.columns import Column
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.storage import ReportError, load_history

__all__ = ["branch_history", "same_spec_schedule"]


def branch_history(path: str, schedule_path: Optional[str]) -> tuple[pd.DataFrame, Optional[str]]:
    """The history of the branch experiment at ``path`` and of its schedule run at ``schedule_path``, and that
    path (None where there is none, or its state cannot be read: then the branches alone, said)."""
    frames = [load_history(path)]
    if schedule_path:
        try:
            frames.append(load_history(schedule_path))
        except Exception as e:  # its state missing (killed before Tune saved it): report the branches alone
            print(f"schedule: its run cannot be read ({str(e).splitlines()[0]}); reporting without it", flush=True)
            schedule_path = None
    frames = [f for f in frames if len(f)]
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), schedule_path


def same_spec_schedule(path: str, meta: ExperimentMeta) -> Optional[dict]:
    """Branch mode's batch-size schedule for the run an experiment at ``path`` (a ladder's, ``meta``) is about:
    the newest branch experiment beside it (``<name>-branch-*`` in the same storage) with the same spec name,
    the same data (``data_fingerprint``) and the same budget, summarized as branch mode reports it; None where
    there is none or the storage is remote. ``{"experiment", "batch_size_schedule", "alpha", "peak_lr",
    "warmup_steps", "warmup_samples", "validated"}`` (its first stage's peak LR and warmup are the trunk's),
    ``validated`` the schedule validation's verdicts where it ran (``below_frontier``; ``loss_holds``, its
    non-inferiority to the small batch)."""
    root = Path(path).parent
    if "://" in path or not root.is_dir() or meta.data_fingerprint is None:
        return None
    for candidate in sorted(root.glob(f"{meta.name}-branch-*"), reverse=True):
        if candidate.name.endswith("-schedule") or not candidate.is_dir():
            continue
        try:
            other = ExperimentMeta.read(str(candidate))
        except ReportError:
            continue
        if (other.method, other.name, other.data_fingerprint, other.budget_samples) != \
                ("branch", meta.name, meta.data_fingerprint, meta.budget_samples):
            continue
        recorded = other.recorded()
        try:
            history, _ = branch_history(str(candidate), recorded.get("schedule_experiment"))
            if history.empty:
                continue
            summary = summarize_branches(history, {**recorded, "experiment_path": str(candidate)})
        except Exception as e:  # a damaged neighbour must not cost the ladder its report
            print(f"schedule: {candidate} cannot be read ({str(e).splitlines()[0]}); looking further", flush=True)
            continue
        sv = summary.schedule_validation
        return {"experiment": str(candidate), "batch_size_schedule": [[int(a), int(b)] for a, b in
                                                                       summary.batch_size_schedule],
                Column.alpha: summary.schedule_alpha, Column.peak_lr: summary.trunk.peak_lr,
                **{k: v for k, v in ((Column.warmup_steps, summary.trunk.warmup_steps),
                                     ("warmup_samples", summary.trunk.warmup_samples)) if v is not None},
                "validated": None if sv is None else {"below_frontier": sv.below_frontier.holds,
                                                      "loss_holds": None if sv.non_inferiority is None
                                                      else sv.non_inferiority.holds}}
    return None
