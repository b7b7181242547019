"""From reported milestones to the from-scratch answer: ``summarize`` builds the tables (``analysis.tables``,
``batch_table``), the readings of the critical batch (``critical_batch``), the answer (``answer``) and the
recommendation (``recommendation``) into one ``Summary``; ``write_summary`` writes ``summary.json``.
Pure pandas, no Ray.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import pandas as pd

from cbs_ray.analysis.bounds import bound_text
from cbs_ray.analysis.decision import DEFAULT_BASE, NextSearch
from cbs_ray.analysis.json_values import json_clean
from cbs_ray.analysis.tables import noise_scale_table, trial_table
from cbs_ray.maths.importance import EVALUATOR, param_importance
from cbs_ray.maths.pareto import pareto_front
from cbs_ray.maths.tradeoff import TradeoffFit
from cbs_ray.methods.scratch.answer import answer_of
from cbs_ray.methods.scratch.batch_table import per_batch_table
from cbs_ray.methods.scratch.critical_batch import (
    default_target,
    target_rules,
    tradeoff_reading,
    turning_point_reading,
    with_noise_scale,
)
from cbs_ray.methods.scratch.decision import scratch_decision
from cbs_ray.methods.scratch.recommendation import recommend
from cbs_ray.methods.scratch.summary import CriticalBatch, Importance, NoiseScale, OverheadRule, Summary
from cbs_ray.records.columns import Column
from cbs_ray.spec.tolerance import RELATIVE, Tolerance

__all__ = ["summarize", "write_summary"]


FRONT_COLUMNS = [Column.trial_id, Column.batch_size, Column.alpha, Column.warmup_fraction, Column.peak_lr,
                 Column.wall_time_s, Column.projected_time_s]  # then the metric


def summarize(history: pd.DataFrame, *, metric: str, mode: str, budget_samples: int,
              tolerance: float = 0.01, target: Optional[float] = None, turning_fit: str = "monotone",
              min_batch_size: int = 1, seeds: Optional[dict] = None, tolerance_unit: str = RELATIVE,
              next_search: NextSearch = DEFAULT_BASE) -> Summary:
    """Everything ``summary.json`` holds, typed (NaN becomes None; ``Summary.to_json`` writes it). ``turning_fit``:
    ``monotone`` reads the turning point off the per-batch means' monotone fit, ``raw`` off the means
    (``search.turning_point``); the other reading is kept as ``raw_batch_size`` / ``monotone_batch_size``.
    ``min_batch_size``: the smallest batch a next search may propose (the workers per trial). ``seeds``: batch
    size → the (alpha, warmup fraction) the search seeded it with (None: nothing seeded, a grid), so that the
    recommendation says when its alpha and warmup are a seed's (``recommendation.unsearched``). ``tolerance_unit``:
    ``relative`` (a fraction of the best, every experiment that recorded no unit) or ``nats`` (absolute;
    ``spec.tolerance``). ``next_search``: what the decision's next step keeps of this search
    (``analysis.decision.next_search_base``)."""
    if turning_fit not in ("monotone", "raw"):
        raise ValueError(f"turning_fit must be 'monotone' or 'raw', got {turning_fit!r}")
    trials = trial_table(history, metric=metric, budget_samples=budget_samples)
    per_batch = per_batch_table(trials, metric=metric, mode=mode) if len(trials) else pd.DataFrame()
    measured = per_batch.dropna(subset=[f"best_{metric}"]) if len(per_batch) else per_batch
    margin = Tolerance(tolerance, tolerance_unit)
    turning, fitted = turning_point_reading(per_batch, measured, metric=metric, mode=mode, tolerance=tolerance,
                                            turning_fit=turning_fit, relative=margin.relative)

    target_source = "user" if target is not None else "default: worst per-batch best"
    if target is None and len(measured):
        target = default_target(measured, metric=metric, mode=mode)
    no_target = "no completed trial to take a target from"
    tradeoff = tradeoff_reading(TradeoffFit(None, None, None), left_out=None, reason=no_target)
    overhead = OverheadRule(None, no_target)
    if target is not None and len(trials):
        trials, per_batch, tradeoff, overhead = target_rules(history, trials, metric=metric, mode=mode,
                                                              target=target)
    if fitted:
        per_batch[f"fit_{metric}"] = per_batch[Column.batch_size].map(fitted)
    noise_rows, noise = noise_scale_table(history)
    if len(noise_rows):
        per_batch, trials = with_noise_scale(history, per_batch, trials, noise_rows)

    answer = answer_of(turning, tradeoff, overhead, [int(b) for b in per_batch.get(Column.batch_size, [])],
                     min_batch=min_batch_size, within=margin.text())
    done = trials[trials[Column.status] == "completed"].reset_index(drop=True)
    done[Column.projected_time_s] = budget_samples / done[Column.samples_per_s]
    columns = FRONT_COLUMNS + [metric]
    values = done[metric].tolist()
    front_wall = pareto_front(done[Column.wall_time_s].tolist(), values, mode=mode) if len(done) else []
    front_projected = pareto_front(done[Column.projected_time_s].tolist(), values, mode=mode) if len(done) else []
    recommendation = recommend(done, front_projected, metric=metric, mode=mode, tolerance=tolerance,
                               budget_samples=budget_samples, cap=answer.batch_size, resolved=answer.resolved,
                               cap_text=bound_text(answer.batch_size, answer.bound), per_batch=per_batch,
                               trials=trials, seeds=seeds, relative=margin.relative)
    noise_scale = NoiseScale(**{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                for k, v in noise.items()})
    decision = scratch_decision(turning, tradeoff, overhead, noise_scale, answer.resolved, answer.next_batch_range,
                                recommendation, _records(per_batch), budget_samples=budget_samples, base=next_search)
    return Summary(
        decision=decision, answer=answer, metric=metric, mode=mode, budget_samples=budget_samples, target=target,
        target_source=target_source,
        critical_batch=CriticalBatch(batch_size=turning.batch_size, turning_point=turning, tradeoff=tradeoff,
                                     overhead_20pct=overhead, tolerance=tolerance, reason=turning.reason,
                                     tolerance_unit=tolerance_unit,
                                     tolerance_in_metric_units=margin.in_metric_units(_best_mean(measured, metric,
                                                                                                 mode))),
        noise_scale=noise_scale, recommendation=recommendation,
        per_batch=_records(per_batch), pareto=_records(done.loc[front_wall, columns]),
        pareto_projected=_records(done.loc[front_projected, columns]), trials=_records(trials),
        importance=Importance(EVALUATOR, *param_importance(trials, metric=metric, mode=mode)))


def _best_mean(measured: pd.DataFrame, metric: str, mode: str) -> Optional[float]:
    """The best per-batch mean (where a relative tolerance is measured from), or None."""
    if not len(measured) or f"mean_{metric}" not in measured:
        return None
    means = measured[f"mean_{metric}"].astype(float).dropna()
    return (float(means.max() if mode == "max" else means.min())) if len(means) else None


def _records(frame: pd.DataFrame) -> list[dict]:
    """The table's rows, JSON-ready as every summary's values are (``analysis.json_values.json_clean``)."""
    return [{k: json_clean(v) for k, v in row.items()} for row in frame.to_dict("records")]


def write_summary(summary: Summary, history: pd.DataFrame, directory: str | Path) -> Path:
    """Write ``summary.json`` (strict JSON) and ``trials.csv`` (one row per trial) to ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(summary.to_json())
    pd.DataFrame(summary.trials).to_csv(directory / "trials.csv", index=False)
    history.to_csv(directory / "history.csv", index=False)
    return directory
