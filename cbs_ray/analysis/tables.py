"""From reported milestones to tables: one row per trial (``trial_table``), one per batch size
(``per_batch_table``), the noise scale over the reports (``noise_scale_table``). Pure pandas, no Ray: the
input is the history of reports (one row per milestone per trial) however it was obtained.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd

from cbs_ray.maths.noise_scale import b_simple
from cbs_ray.maths.tradeoff import samples_to_target
from cbs_ray.maths.uncertainty import accuracy_standard_error, mean_and_standard_error
from cbs_ray.records.columns import DEV_PREFIX, Column, require_columns

__all__ = ["trial_table", "per_batch_table", "noise_scale_table", "unequal_effort", "restarts"]


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


def steps_to_target_table(history: pd.DataFrame, *, metric: str, mode: str, target: float) -> pd.DataFrame:
    """Per trial: optimizer steps to first reach ``target`` (interpolated), NaN if never, and
    ``target_at_first_report``: reached by the first report already, so the steps are only an upper bound
    (nothing says how much earlier)."""
    rows = {}
    for trial_id, h in history.groupby(Column.trial_id):
        seen = h[Column.samples_seen]
        samples = samples_to_target(seen.tolist(), h[metric].astype(float).tolist(), target, mode=mode)
        rows[trial_id] = {Column.steps_to_target: samples / float(h[Column.batch_size].iloc[0]),
                          Column.target_at_first_report: bool(samples == seen.min())}
    return pd.DataFrame.from_dict(rows, orient="index",
                                  columns=[Column.steps_to_target, Column.target_at_first_report])


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


# The best completed trial's columns the per-batch table keeps, in order (then its trial_id).
BEST_COLUMNS = [Column.alpha, Column.warmup_fraction, Column.peak_lr, Column.wall_time_s, Column.samples_per_s]


def per_batch_table(trials: pd.DataFrame, *, metric: str, mode: str) -> pd.DataFrame:
    """Per batch size: trials run / completed / stopped / diverged / failed, the peak LRs the diverged trials
    used (lowest first: the stability limit at that batch), the best completed trial's metric and
    configuration (NaN where no trial reached the budget), and — when ``trials`` has a
    ``steps_to_target`` column — the fewest steps and samples any trial of that batch needed to reach
    the target."""
    require_columns(trials, [Column.batch_size, Column.status, Column.peak_lr, metric], where="per_batch_table")
    out = []
    for batch, group in trials.groupby(Column.batch_size):
        repeats = group[group[Column.repeat]] if Column.repeat in group else group.iloc[:0]
        group = group[~group[Column.repeat]] if Column.repeat in group else group
        status = group[Column.status]
        done = group[(status == "completed") & group[metric].notna()]
        row: dict[str, Any] = {Column.batch_size: int(batch), Column.trials: len(group), Column.completed: len(done),
               Column.stopped: int((status == "stopped").sum()), Column.diverged: int((status == "diverged").sum()),
               Column.failed: int((status == "failed").sum()),
               Column.diverged_peak_lrs: sorted(float(lr) for lr in group.loc[status == "diverged", Column.peak_lr])}
        if len(done):
            best = done.loc[done[metric].idxmax() if mode == "max" else done[metric].idxmin()]
            row.update({f"best_{metric}": float(best[metric]), **{c: float(best[c]) for c in BEST_COLUMNS},
                        Column.trial_id: best[Column.trial_id]})
            dev = f"{DEV_PREFIX}{metric}"
            if dev in best:  # the selected trial's figure on the dev set, not the dev set's best
                row[dev] = float(best[dev])
        else:
            row.update({f"best_{metric}": math.nan})
        if Column.steps_to_target in group:
            steps = group[Column.steps_to_target].min()
            row.update({Column.steps_to_target: steps, Column.samples_to_target: steps * batch})
            if Column.target_at_first_report in group:  # then the fewest steps are that trial's upper bound
                early = group[Column.target_at_first_report].fillna(False).astype(bool)
                row[Column.target_at_first_report] = bool(early.any())
        row.update(_repeated_mean(done, repeats, metric=metric, best=row.get(f"best_{metric}", math.nan)))
        out.append(row)
    return pd.DataFrame(out)


def _repeated_mean(done: pd.DataFrame, repeats: pd.DataFrame, *, metric: str, best: float) -> dict:
    """The best configuration's metric over its runs (the search's trial plus completed repeats): mean,
    standard error (from the runs' spread and, for accuracy, the evaluation set's size), run count."""
    runs = [best] + repeats.loc[repeats[Column.status] == "completed", metric].dropna().tolist()
    eval_se = 0.0
    # An accuracy's evaluation error is known from the evaluation set's size, where the reports carry it.
    examples = done.get(Column.eval_examples)
    eval_error_known = (metric == Column.accuracy and examples is not None and examples.notna().any()
                        and not math.isnan(best))
    if eval_error_known:
        eval_se = accuracy_standard_error(min(max(best, 0.0), 1.0), int(examples.max()))
    mean, se = mean_and_standard_error(runs, eval_se=eval_se)
    if not eval_error_known and len([r for r in runs if not math.isnan(r)]) < 2:
        se = math.nan  # one run and no known evaluation error: no noise estimate (not a noise of 0)
    return {Column.runs: len([r for r in runs if not math.isnan(r)]), f"mean_{metric}": mean, f"se_{metric}": se}


def unequal_effort(batch_sizes: Sequence[int], trials: Sequence[int], *, check: Sequence[int],
                   factor: float = 2.0) -> Optional[str]:
    """A note where the per-batch best of a batch size in ``check`` (the best batch, the answer) is the best
    of at least ``factor``× the trials of a neighbour (the next batch size measured either side). TPE puts
    more trials where the metric looks best, and the best of more trials is biased upward, so that batch
    size can win the comparison the turning point rests on by effort, not quality. ``trials`` counts every
    configuration tried at that batch size, those ASHA stopped included: stopping is part of how the
    search picked the best, so a balanced search (3 trials each, one completed here, two there) is even
    effort. None when effort is even enough.

    >>> unequal_effort([8, 16, 32], [1, 4, 1], check=[16])[:52]
    "B=16's best is the best of 4 trials, its neighbours'"
    """
    counts = {int(b): int(c) for b, c in zip(batch_sizes, trials) if c and c > 0}
    order = sorted(counts)
    for b in (b for b in dict.fromkeys(int(x) for x in check) if b in counts):
        i = order.index(b)
        neighbours = [order[j] for j in (i - 1, i + 1) if 0 <= j < len(order)]
        if not any(counts[b] >= factor * counts[n] for n in neighbours):
            continue
        same = len({counts[n] for n in neighbours}) == 1
        theirs = f"{counts[neighbours[0]]}" if same else " and ".join(f"{counts[n]} (B={n})" for n in neighbours)
        whose = "its neighbours'" if len(neighbours) > 1 else "its neighbour's"
        return (f"B={b}'s best is the best of {counts[b]} trials, {whose} of {theirs}: the best of more "
                f"trials is biased upward; use search.balance_batches: true or the grid's reading")
    return None
