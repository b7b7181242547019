"""The from-scratch search's tables over its trials: one row per batch size (``per_batch_table``: trials run and
how they ended, the best completed trial's metric and configuration, its repeats' mean), each trial's steps to the
target (``steps_to_target_table``), and the note where a batch's best rests on more trials than its neighbours'
(``unequal_effort``). Pure pandas, no Ray: the input is ``analysis.tables.trial_table``'s rows.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import pandas as pd

from cbs_ray.maths.tradeoff import samples_to_target
from cbs_ray.maths.uncertainty import accuracy_standard_error, mean_and_standard_error
from cbs_ray.records.columns import DEV_PREFIX, Column, require_columns

__all__ = ["per_batch_table", "steps_to_target_table", "unequal_effort"]


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
