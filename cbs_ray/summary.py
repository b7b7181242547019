"""From reported milestones to the answer: per-trial and per-batch tables, the critical batch by the
turning-point rule, and the Pareto front of training time vs quality. Pure pandas, no Ray: the input is
the history of reports (one row per milestone per trial) however it was obtained.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from .critical_batch import monotone_fit, turning_point, within_tolerance
from .noise_scale import b_simple
from .pareto import pareto_front
from .lr_schedule import warmup_steps
from .tradeoff import TradeoffFit, fit_tradeoff, overhead_rule, samples_to_target
from .uncertainty import accuracy_standard_error, mean_and_standard_error, turning_point_range, verdict

__all__ = ["trial_table", "per_batch_table", "summarize", "write_summary", "default_target", "recommend"]

TRIAL_COLUMNS = ["trial_id", "batch_size", "alpha", "warmup_fraction", "peak_lr"]


def trial_table(history: pd.DataFrame, *, metric: str, budget_samples: int) -> pd.DataFrame:
    """One row per trial: its configuration, how far it got, its last metric, its time at the end.

    ``status``: ``completed`` (reached the budget), ``diverged`` (non-finite loss or gradient), ``failed``
    (its workers died more often than ``max_failures``), or ``stopped`` (ended before the budget: stopped
    early by ASHA, or still running)."""
    if history.empty:
        return pd.DataFrame(columns=TRIAL_COLUMNS + ["samples_seen", metric, "wall_time_s", "samples_per_s", "repeat",
                                                     "status"])
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
    rows["repeat"] = history.groupby("trial_id")["repeat"].any() if "repeat" in history else False
    if "eval_examples" in history:
        rows["eval_examples"] = last["eval_examples"]
    for column in (c for c in last.columns if c.startswith("dev_")):  # data.holdout_examples: the dev set
        rows[column] = last[column]
    failed = history.groupby("trial_id")["failed"].any() if "failed" in history else False
    rows["status"] = np.where(diverged, "diverged",
                              np.where(rows["samples_seen"] >= budget_samples, "completed",
                                       np.where(failed, "failed", "stopped")))
    return rows.reset_index().sort_values(["batch_size", "trial_id"]).reset_index(drop=True)


def _steps_to_target(history: pd.DataFrame, *, metric: str, mode: str, target: float) -> pd.DataFrame:
    """Per trial: optimizer steps to first reach ``target`` (interpolated), NaN if never, and
    ``target_at_first_report``: reached by the first report already, so the steps are only an upper bound
    (nothing says how much earlier)."""
    rows = {}
    for trial_id, h in history.groupby("trial_id"):
        samples = samples_to_target(h["samples_seen"].tolist(), h[metric].astype(float).tolist(), target, mode=mode)
        rows[trial_id] = {"steps_to_target": samples / float(h["batch_size"].iloc[0]),
                          "target_at_first_report": bool(samples == h["samples_seen"].min())}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["steps_to_target", "target_at_first_report"])


def _ratio_of_means(frame: pd.DataFrame) -> float:
    ok = frame[["grad_sq", "trace_sigma"]].dropna()
    return float(b_simple(ok["grad_sq"].mean(), ok["trace_sigma"].mean())) if len(ok) else math.nan


def noise_scale_table(history: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """B_simple per batch size early in training (each trial's first finite report, averaged) and over
    training (ratio of the mean |G|² and mean tr Σ over the reports, as McCandlish et al.'s Table 1),
    plus the same two figures over every trial. Only reports whose moving averages give a positive B_simple
    count: early reports whose tr Σ estimate is still negative are left out of both means."""
    if "b_simple" not in history or history["b_simple"].notna().sum() == 0:
        note = (history["noise_scale_note"].dropna().iloc[0] if "noise_scale_note" in history
                and history["noise_scale_note"].notna().any() else "not reported")
        return pd.DataFrame(), {"early": None, "mean": None, "note": note or "not measurable"}
    measured = history.dropna(subset=["b_simple"]).sort_values("samples_seen")
    first = measured.groupby("trial_id").head(1)
    rows = [{"batch_size": int(b), "b_simple_early": _ratio_of_means(first[first["batch_size"] == b]),
             "b_simple_mean": _ratio_of_means(group)} for b, group in measured.groupby("batch_size")]
    # How many reports carried both estimates, and how many of them the rule above left out: the reader's
    # measure of how settled the figure is.
    estimated = int(history[["grad_sq", "trace_sigma"]].apply(np.isfinite).all(axis=1).sum()) \
        if {"grad_sq", "trace_sigma"} <= set(history) else len(measured)
    return pd.DataFrame(rows), {"early": _ratio_of_means(first), "mean": _ratio_of_means(measured), "note": None,
                                "reports": estimated, "reports_left_out": estimated - len(measured)}


def per_batch_table(trials: pd.DataFrame, *, metric: str, mode: str) -> pd.DataFrame:
    """Per batch size: trials run / completed / stopped / diverged / failed, the peak LRs the diverged trials
    used (lowest first: the stability limit at that batch), the best completed trial's metric and
    configuration (NaN where no trial reached the budget), and — when ``trials`` has a
    ``steps_to_target`` column — the fewest steps and samples any trial of that batch needed to reach
    the target."""
    out = []
    for batch, group in trials.groupby("batch_size"):
        repeats = group[group["repeat"]] if "repeat" in group else group.iloc[:0]
        group = group[~group["repeat"]] if "repeat" in group else group
        done = group[(group["status"] == "completed") & group[metric].notna()]
        row = {"batch_size": int(batch), "trials": len(group), "completed": len(done),
               "stopped": int((group["status"] == "stopped").sum()),
               "diverged": int((group["status"] == "diverged").sum()),
               "failed": int((group["status"] == "failed").sum()),
               "diverged_peak_lrs": sorted(float(lr) for lr in group.loc[group["status"] == "diverged", "peak_lr"])}
        if len(done):
            best = done.loc[done[metric].idxmax() if mode == "max" else done[metric].idxmin()]
            row.update({f"best_{metric}": float(best[metric]), "alpha": float(best["alpha"]),
                        "warmup_fraction": float(best["warmup_fraction"]), "peak_lr": float(best["peak_lr"]),
                        "wall_time_s": float(best["wall_time_s"]), "samples_per_s": float(best["samples_per_s"]),
                        "trial_id": best["trial_id"]})
            if f"dev_{metric}" in best:  # the selected trial's figure on the dev set, not the dev set's best
                row[f"dev_{metric}"] = float(best[f"dev_{metric}"])
        else:
            row.update({f"best_{metric}": math.nan})
        if "steps_to_target" in group:
            steps = group["steps_to_target"].min()
            row.update({"steps_to_target": steps, "samples_to_target": steps * batch})
            if "target_at_first_report" in group:  # then the fewest steps are that trial's upper bound
                row["target_at_first_report"] = bool(group["target_at_first_report"].fillna(False).astype(bool).any())
        row.update(_repeated_mean(done, repeats, metric=metric, best=row.get(f"best_{metric}", math.nan)))
        out.append(row)
    return pd.DataFrame(out)


def _repeated_mean(done: pd.DataFrame, repeats: pd.DataFrame, *, metric: str, best: float) -> dict:
    """The best configuration's metric over its runs (the search's trial plus completed repeats): mean,
    standard error (from the runs' spread and, for accuracy, the evaluation set's size), run count."""
    runs = [best] + repeats.loc[repeats["status"] == "completed", metric].dropna().tolist()
    eval_se = 0.0
    # An accuracy's evaluation error is known from the evaluation set's size, where the reports carry it.
    eval_error_known = (metric == "accuracy" and "eval_examples" in done and done["eval_examples"].notna().any()
                        and not math.isnan(best))
    if eval_error_known:
        eval_se = accuracy_standard_error(min(max(best, 0.0), 1.0), int(done["eval_examples"].max()))
    mean, se = mean_and_standard_error(runs, eval_se=eval_se)
    if not eval_error_known and len([r for r in runs if not math.isnan(r)]) < 2:
        se = math.nan  # one run and no known evaluation error: no noise estimate (not a noise of 0)
    return {"runs": len([r for r in runs if not math.isnan(r)]), f"mean_{metric}": mean, f"se_{metric}": se}


def _uncertainty(per_batch: pd.DataFrame, *, metric: str, mode: str, tolerance: float, monotone: bool) -> dict:
    """Range of the turning point under the per-batch standard errors, and the verdict. Batch sizes with no
    completed run stay in the redraws as gaps (NaN), where the walk stops as it does for the headline."""
    rows = per_batch.dropna(subset=[f"mean_{metric}"])
    se = rows[f"se_{metric}"].astype(float)
    if se.isna().any():
        return {"range": None, "verdict": None, "reason": f"no noise estimate for {metric} from one run per "
                "batch size: set search.repeats >= 2"}
    repeats = int(rows["runs"].max())
    run_sd = float((se * np.sqrt(rows["runs"])).max())
    spread = turning_point_range(per_batch["batch_size"].tolist(), per_batch[f"mean_{metric}"].astype(float).tolist(),
                                 per_batch[f"se_{metric}"].astype(float).tolist(), mode=mode, tolerance=tolerance,
                                 monotone=monotone)
    return {"range": [spread["low"], spread["high"]], "level": spread["level"], "share": spread["share"],
            "verdict": verdict(rows[f"mean_{metric}"].tolist(), se.tolist(), mode=mode, tolerance=tolerance,
                               run_sd=run_sd, repeats=repeats),
            "noise_se_max": float(se.max()), "reason": None}


def default_target(per_batch: pd.DataFrame, *, metric: str, mode: str) -> float:
    """A level every batch size with a completed trial reaches: the worst of the per-batch bests."""
    values = per_batch[f"best_{metric}"].dropna()
    return float(values.min() if mode == "max" else values.max())


def recommend(done: pd.DataFrame, front: list[int], *, metric: str, mode: str, tolerance: float,
              budget_samples: int) -> Optional[dict]:
    """The fastest configuration on the (projected-time) Pareto front whose metric is within
    ``tolerance`` (relative) of the best completed trial."""
    if not front:
        return None
    best = done[metric].max() if mode == "max" else done[metric].min()
    for i in front:  # ordered by time: the first within tolerance is the fastest
        row = done.loc[i]
        if within_tolerance(float(row[metric]), float(best), mode=mode, tolerance=tolerance):
            steps = budget_samples // int(row["batch_size"])
            return {"batch_size": int(row["batch_size"]), "alpha": float(row["alpha"]),
                    "peak_lr": float(row["peak_lr"]), "warmup_fraction": float(row["warmup_fraction"]),
                    "warmup_steps": warmup_steps(float(row["warmup_fraction"]), steps),
                    "budget_samples": budget_samples, "optimizer_steps": steps, metric: float(row[metric]),
                    "projected_time_s": float(row["projected_time_s"]), "trial_id": row["trial_id"]}
    return None


def summarize(history: pd.DataFrame, *, metric: str, mode: str, budget_samples: int,
              tolerance: float = 0.01, target: Optional[float] = None, turning_fit: str = "monotone") -> dict:
    """Everything ``summary.json`` holds, as plain Python values (NaN becomes None). ``turning_fit``:
    ``monotone`` reads the turning point off the per-batch means' monotone fit, ``raw`` off the means
    (``search.turning_point``); the other reading is kept as ``raw_batch_size`` / ``monotone_batch_size``."""
    if turning_fit not in ("monotone", "raw"):
        raise ValueError(f"turning_fit must be 'monotone' or 'raw', got {turning_fit!r}")
    monotone = turning_fit == "monotone"
    trials = trial_table(history, metric=metric, budget_samples=budget_samples)
    per_batch = per_batch_table(trials, metric=metric, mode=mode) if len(trials) else pd.DataFrame()
    measured = per_batch.dropna(subset=[f"best_{metric}"]) if len(per_batch) else per_batch
    fitted = {}
    turning = {"batch_size": None, "fit": turning_fit, "raw_batch_size": None, "monotone_batch_size": None,
               "tolerance": tolerance, "reason": None, "uncertainty": None}
    if len(measured) == 0:
        turning["reason"] = "no batch size has a trial that reached the full budget"
    else:
        # A batch size with no completed trial (diverged, stopped, still running) counts as NaN: the walk
        # up from the best batch stops there rather than jumping over a batch nobody measured.
        # On the mean over repeats (the best run itself when repeats = 1).
        batches, means = per_batch["batch_size"].tolist(), per_batch[f"mean_{metric}"].astype(float).tolist()
        fitted = dict(zip(batches, monotone_fit(batches, means, mode=mode)))
        for fit, values in (("raw", means), ("monotone", list(fitted.values()))):
            turning[f"{fit}_batch_size"] = turning_point(batches, values, mode=mode, tolerance=tolerance)
        turning["batch_size"] = turning[f"{turning_fit}_batch_size"]
        turning["uncertainty"] = _uncertainty(per_batch, metric=metric, mode=mode, tolerance=tolerance,
                                              monotone=monotone)
        # Name a batch size with no completed trial only where it ended the walk: right above the answer.
        above = [b for b in sorted(per_batch["batch_size"]) if b > turning["batch_size"]]
        if len(measured) == 1:
            turning["reason"] = "only one batch size completed: nothing to compare it with"
        elif above and above[0] not in set(measured["batch_size"]):
            turning["reason"] = f"batch size {int(above[0])} has no completed trial and ends the walk"

    target_source = "user" if target is not None else "default: worst per-batch best"
    if target is None and len(measured):
        target = default_target(measured, metric=metric, mode=mode)
    tradeoff = TradeoffFit(None, None, None, reason="no completed trial to take a target from")
    overhead = {"batch_size": None, "reason": "no completed trial to take a target from"}
    left_out_note = None  # batch sizes both rules left out, and why
    if target is not None and len(trials):
        trials = trials.merge(_steps_to_target(history, metric=metric, mode=mode, target=target),
                              left_on="trial_id", right_index=True, how="left")
        per_batch = per_batch_table(trials, metric=metric, mode=mode)
        reached = per_batch.dropna(subset=["steps_to_target"])
        # A batch that reached the target by its first report has only an upper bound on its steps: fitting
        # it as exact reads a steps ∝ 1/B line (perfect scaling) into what may be reporting too rarely.
        early = reached["target_at_first_report"].astype(bool)
        left_out = [int(b) for b in reached.loc[early, "batch_size"]]
        reached = reached[~early]
        tradeoff = fit_tradeoff(reached["batch_size"].tolist(), reached["steps_to_target"].tolist())
        b20 = overhead_rule(reached["batch_size"].tolist(), reached["steps_to_target"].tolist())
        overhead = {"batch_size": b20, "reason": None if b20 is not None else
                    f"no batch size reached the target {target:.4g}"}
        if b20 is not None and len(reached) == 1:
            overhead["reason"] = "only one batch size reached the target"
        if tradeoff.b_crit is None and not len(reached):
            tradeoff.reason = f"no batch size reached the target {target:.4g}"
        if left_out:
            note = (f"B={', '.join(map(str, left_out))} reached the target {target:.4g} by the first report, so "
                    f"their steps to it are only upper bounds: left out (report more often, "
                    f"training.eval_every_samples, or raise the target)")
            if not len(reached):
                tradeoff.reason = overhead["reason"] = note
            else:
                overhead["left_out"] = left_out_note = note

    if fitted:
        per_batch[f"fit_{metric}"] = per_batch["batch_size"].map(fitted)
    noise_rows, noise = noise_scale_table(history)
    if len(noise_rows):
        per_batch = per_batch.merge(noise_rows, on="batch_size", how="left")
        measured_noise = history.dropna(subset=["b_simple"]).sort_values("samples_seen")
        per_trial = pd.DataFrame(
            [{"trial_id": t, "b_simple_early": _ratio_of_means(g.head(1)), "b_simple_mean": _ratio_of_means(g)}
             for t, g in measured_noise.groupby("trial_id")])
        trials = trials.merge(per_trial, on="trial_id", how="left")
    done = trials[trials["status"] == "completed"].reset_index(drop=True)
    done["projected_time_s"] = budget_samples / done["samples_per_s"]
    columns = ["trial_id", "batch_size", "alpha", "warmup_fraction", "peak_lr", "wall_time_s",
               "projected_time_s", metric]
    front_wall = pareto_front(done["wall_time_s"].tolist(), done[metric].tolist(), mode=mode) if len(done) else []
    front_projected = (pareto_front(done["projected_time_s"].tolist(), done[metric].tolist(), mode=mode)
                       if len(done) else [])
    return {
        "metric": metric, "mode": mode, "budget_samples": budget_samples, "target": target,
        "target_source": target_source,
        "critical_batch": {
            "batch_size": turning["batch_size"],  # the turning point, the headline answer
            "turning_point": turning,
            # An unbounded end (B_crit = ∞ in enough resamples) is null: JSON has no infinity.
            "tradeoff": {"b_crit": tradeoff.b_crit, "left_out": left_out_note,
                         "ci95": [v if math.isfinite(v) else None for v in tradeoff.ci] if tradeoff.ci else None,
                         "s_min": tradeoff.s_min, "e_min": tradeoff.e_min, "points": tradeoff.points,
                         "reason": tradeoff.reason},
            "overhead_20pct": overhead,
            "tolerance": tolerance,
            "reason": turning["reason"],
        },
        "noise_scale": {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                        for k, v in noise.items()},
        "recommendation": recommend(done, front_projected, metric=metric, mode=mode, tolerance=tolerance,
                                    budget_samples=budget_samples),
        "per_batch": _records(per_batch),
        "pareto": _records(done.loc[front_wall, columns]),
        "pareto_projected": _records(done.loc[front_projected, columns]),
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
