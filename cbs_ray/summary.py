"""From reported milestones to the answer: per-trial and per-batch tables, the critical batch by the
turning-point rule, and the Pareto front of training time vs quality. Pure pandas, no Ray: the input is
the history of reports (one row per milestone per trial) however it was obtained.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from .critical_batch import turning_point
from .pareto import pareto_front

__all__ = ["trial_table", "per_batch_table", "summarize", "write_summary"]

TRIAL_COLUMNS = ["trial_id", "batch_size", "alpha", "warmup_fraction", "peak_lr"]


def trial_table(history: pd.DataFrame, *, metric: str, budget_samples: int) -> pd.DataFrame:
    """One row per trial: its configuration, how far it got, its last metric, its time at the end.

    ``status``: ``completed`` (reached the budget), ``diverged`` (non-finite loss or gradient), or
    ``stopped`` (ended before the budget: stopped early by ASHA, failed, or still running)."""
    if history.empty:
        return pd.DataFrame(columns=TRIAL_COLUMNS + ["samples_seen", metric, "status"])
    history = history.sort_values(["trial_id", "samples_seen"])
    last = history.groupby("trial_id", sort=False).tail(1).set_index("trial_id")
    diverged = history.groupby("trial_id")["diverged"].any() if "diverged" in history else False
    rows = pd.DataFrame({
        "batch_size": last["batch_size"].astype(int),
        "alpha": last["alpha"], "warmup_fraction": last["warmup_fraction"], "peak_lr": last["peak_lr"],
        "samples_seen": last["samples_seen"].astype(int), metric: last[metric].astype(float),
        "wall_time_s": last.get("wall_time_s", np.nan),
        "samples_per_s": history.groupby("trial_id")["samples_per_s"].mean()
        if "samples_per_s" in history else np.nan,
    })
    rows["status"] = np.where(diverged, "diverged",
                              np.where(rows["samples_seen"] >= budget_samples, "completed", "stopped"))
    return rows.reset_index().sort_values(["batch_size", "trial_id"]).reset_index(drop=True)


def per_batch_table(trials: pd.DataFrame, *, metric: str, mode: str) -> pd.DataFrame:
    """Per batch size: trials run / completed / stopped / diverged, and the best completed trial's
    metric and configuration (NaN where no trial of that batch reached the budget)."""
    out = []
    for batch, group in trials.groupby("batch_size"):
        done = group[(group["status"] == "completed") & group[metric].notna()]
        row = {"batch_size": int(batch), "trials": len(group), "completed": len(done),
               "stopped": int((group["status"] == "stopped").sum()),
               "diverged": int((group["status"] == "diverged").sum())}
        if len(done):
            best = done.loc[done[metric].idxmax() if mode == "max" else done[metric].idxmin()]
            row.update({f"best_{metric}": float(best[metric]), "alpha": float(best["alpha"]),
                        "warmup_fraction": float(best["warmup_fraction"]), "peak_lr": float(best["peak_lr"]),
                        "wall_time_s": float(best["wall_time_s"]), "samples_per_s": float(best["samples_per_s"]),
                        "trial_id": best["trial_id"]})
        else:
            row.update({f"best_{metric}": math.nan})
        out.append(row)
    return pd.DataFrame(out)


def summarize(history: pd.DataFrame, *, metric: str, mode: str, budget_samples: int,
              tolerance: float = 0.01) -> dict:
    """Everything ``summary.json`` holds, as plain Python values (NaN becomes None)."""
    trials = trial_table(history, metric=metric, budget_samples=budget_samples)
    per_batch = per_batch_table(trials, metric=metric, mode=mode) if len(trials) else pd.DataFrame()
    critical = {"batch_size": None, "method": "turning_point", "tolerance": tolerance, "reason": None}
    measured = per_batch.dropna(subset=[f"best_{metric}"]) if len(per_batch) else per_batch
    if len(measured) == 0:
        critical["reason"] = "no batch size has a trial that reached the full budget"
    else:
        critical["batch_size"] = turning_point(measured["batch_size"].tolist(),
                                               measured[f"best_{metric}"].tolist(), mode=mode,
                                               tolerance=tolerance)
        missing = sorted(set(per_batch["batch_size"]) - set(measured["batch_size"]))
        if missing:
            critical["reason"] = f"batch sizes without a completed trial were left out: {missing}"
        if len(measured) == 1:
            critical["reason"] = "only one batch size completed: the turning point is that batch by default"
    done = trials[trials["status"] == "completed"].reset_index(drop=True)
    front = pareto_front(done["wall_time_s"].tolist(), done[metric].tolist(), mode=mode) if len(done) else []
    pareto = done.loc[front, ["trial_id", "batch_size", "alpha", "warmup_fraction", "peak_lr",
                              "wall_time_s", metric]]
    return {
        "metric": metric, "mode": mode, "budget_samples": budget_samples,
        "critical_batch": critical,
        "per_batch": _records(per_batch),
        "pareto": _records(pareto),
        "trials": _records(trials),
    }


def _records(frame: pd.DataFrame) -> list[dict]:
    def clean(v):
        if isinstance(v, (np.integer,)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            return None if not math.isfinite(v) else float(v)
        return v
    return [{k: clean(v) for k, v in row.items()} for row in frame.to_dict("records")]


def write_summary(summary: dict, history: pd.DataFrame, directory: str | Path) -> Path:
    """Write ``summary.json`` (strict JSON) and ``trials.csv`` (one row per trial) to ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    pd.DataFrame(summary["trials"]).to_csv(directory / "trials.csv", index=False)
    history.to_csv(directory / "history.csv", index=False)
    return directory
