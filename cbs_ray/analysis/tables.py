"""From reported milestones to the tables shared beyond one method: one row per trial (``trial_table``,
with its ``restarts``), the noise scale over the reports (``noise_scale_table``). Pure pandas, no Ray: the input is
the history of reports (one row per milestone per trial) however it was obtained. The from-scratch search's
per-batch table is in its folder (``methods.scratch.batch_table``).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from cbs_ray.maths.noise_scale import b_simple
from cbs_ray.records.columns import DEV_PREFIX, Column, require_columns

__all__ = ["trial_table", "noise_scale_table", "ratio_of_means", "restarts"]


TRIAL_COLUMNS = [Column.trial_id, Column.batch_size, Column.alpha, Column.warmup_fraction, Column.peak_lr]
CONFIG_COLUMNS = [Column.alpha, Column.warmup_fraction, Column.peak_lr]  # a trial's configuration besides its batch


def trial_table(history: pd.DataFrame, *, metric: str, budget_samples: int) -> pd.DataFrame:
    """One row per trial: its configuration, how far it got, its last metric, its time at the end.

    ``status``: ``completed`` (reached the budget), ``diverged`` (non-finite loss or gradient), ``failed``
    (its workers died more often than ``max_failures``), or ``stopped`` (ended before the budget: stopped
    early by ASHA, or still running)."""
    if history.empty:
        return pd.DataFrame(columns=TRIAL_COLUMNS + [Column.samples_seen, metric, Column.wall_time_s,
                                                     Column.samples_per_s, Column.repeat, Column.restarts,
                                                     Column.status])
    require_columns(history, TRIAL_COLUMNS + [Column.samples_seen, metric], where="trial_table")
    history = history.sort_values([Column.trial_id, Column.samples_seen])
    by_trial = history.groupby(Column.trial_id)
    last = history.groupby(Column.trial_id, sort=False).tail(1).set_index(Column.trial_id)
    diverged = by_trial[Column.diverged].any() if Column.diverged in history else False
    rows = pd.DataFrame({
        Column.batch_size: last[Column.batch_size].astype(int), **{c: last[c] for c in CONFIG_COLUMNS},
        Column.samples_seen: last[Column.samples_seen].astype(int), metric: last[metric].astype(float),
        Column.wall_time_s: last.get(Column.wall_time_s, np.nan),
        Column.samples_per_s: by_trial[Column.samples_per_s].mean() if Column.samples_per_s in history else np.nan,
    })
    rows[Column.repeat] = by_trial[Column.repeat].any() if Column.repeat in history else False
    rows[Column.restarts] = (by_trial[Column.resumed_from_samples].agg(restarts).astype(int)
                             if Column.resumed_from_samples in history else 0)
    if Column.eval_examples in history:
        rows[Column.eval_examples] = last[Column.eval_examples]
    if Column.node_id in history:  # where its last report came from (rank 0's Ray node); "" outside Ray
        rows[Column.node_id] = last[Column.node_id].fillna("").astype(str)
    for column in (c for c in last.columns if c.startswith(DEV_PREFIX)):  # data.holdout_examples: the dev set
        rows[column] = last[column]
    failed = by_trial[Column.failed].any() if Column.failed in history else False
    rows[Column.status] = np.where(diverged, "diverged",
                                   np.where(rows[Column.samples_seen] >= budget_samples, "completed",
                                            np.where(failed, "failed", "stopped")))
    return rows.reset_index().sort_values([Column.batch_size, Column.trial_id]).reset_index(drop=True)


def restarts(resumed_from_samples: Sequence) -> int:
    """How often a trial continued from a checkpoint (a dead worker or node, a resumed search), from its
    reports' ``resumed_from_samples`` in order: each change to a new positive value is one restart. A run
    that died again before its next checkpoint resumes from the same one and is not told apart."""
    count, previous = 0, 0.0
    for value in resumed_from_samples:
        value = 0.0 if value is None or value != value else float(value)  # NaN: a report from before the field
        count += value > 0 and value != previous
        previous = value
    return count


NOISE_COLUMNS = [Column.grad_sq, Column.trace_sigma]  # the noise scale's two estimates, B_simple their ratio


def ratio_of_means(frame: pd.DataFrame) -> float:
    ok = frame[NOISE_COLUMNS].dropna()
    return float(b_simple(ok[Column.grad_sq].mean(), ok[Column.trace_sigma].mean())) if len(ok) else math.nan


def noise_scale_table(history: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """B_simple per batch size early in training (each trial's first report with a positive B_simple, averaged)
    and over training (ratio of the mean |G|² and mean tr Σ over the reports, as McCandlish et al.'s Table 1),
    plus the same two figures over every trial. Every report whose two estimates are finite counts, a
    negative tr Σ estimate included: each estimate is unbiased and noisy, so the ratio of their means over all
    of them is the unbiased reading, where leaving out the reports whose own ratio is not positive would bias
    it (their noise pulls one way only once the negative ones are gone)."""
    if Column.b_simple not in history or history[Column.b_simple].notna().sum() == 0:
        note = (history[Column.noise_scale_note].dropna().iloc[0] if Column.noise_scale_note in history
                and history[Column.noise_scale_note].notna().any() else "not reported")
        return pd.DataFrame(), {"early": None, "mean": None, "note": note or "not measurable"}
    require_columns(history, [Column.trial_id, Column.batch_size, Column.samples_seen, *NOISE_COLUMNS],
                    where="noise_scale_table")
    finite = history[NOISE_COLUMNS].apply(lambda c: np.isfinite(pd.to_numeric(c, errors="coerce"))).all(axis=1)
    measured = history[finite].sort_values(Column.samples_seen, kind="stable")
    positive = pd.to_numeric(measured[Column.b_simple], errors="coerce") > 0
    first = measured[positive].groupby(Column.trial_id).head(1)
    rows = [{Column.batch_size: int(b), Column.b_simple_early: ratio_of_means(first[first[Column.batch_size] == b]),
             Column.b_simple_mean: ratio_of_means(group)}
            for b, group in measured.groupby(Column.batch_size)]
    # How many reports carried both estimates, and how many of them had no positive B_simple of their own
    # (counted in the means all the same): the reader's measure of how settled the figure is.
    not_positive = int((~positive).sum())
    return pd.DataFrame(rows), {"early": ratio_of_means(first), "mean": ratio_of_means(measured), "note": None,
                                "reports": len(measured), "reports_not_positive": not_positive}
