"""A fair frontier: the fixed-batch controls of branch mode's schedule validation train each
batch at its best configuration (alpha, warmup) from a from-scratch search at the same budget, where one exists
(``branch.controls_from``), instead of the trunk's (alpha 0.5, the trunk's warmup). A user tuning a fixed batch
would tune it: tried on a GPT over packed SST-2 blocks, the schedule was "below the frontier" of controls at the
trunk's configuration, yet the search's tuned B=16 (alpha 0.75, its own warmup) reached the schedule's loss in
512 steps against its 768.

Pure pandas: ``best_configurations`` reads the from-scratch search's history, ``control_configurations`` picks
each control's, and ``configurations_run`` reads back what a validation's controls trained.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import pandas as pd

from cbs_ray.analysis.tables import trial_table
from cbs_ray.records.columns import Column

__all__ = ["TRUNK", "NONE", "best_configurations", "control_configurations", "configurations_run",
           "budget_problem", "configurations_line", "interpolated_configuration"]

TRUNK = "trunk"
"""A control's source where no from-scratch configuration is used: the trunk's alpha and warmup."""
NONE = "none"
"""``branch.controls_from: none``: every control at the trunk's configuration (the rule before tuned controls)."""


def best_configurations(history: pd.DataFrame, *, metric: str, mode: str, budget_samples: int) -> dict[int, dict]:
    """Each batch's best trial that completed the budget in a from-scratch search's ``history``: batch →
    ``{alpha, warmup_fraction, metric (its value), trial_id}``. A repeat re-trains its batch's best and adds no
    configuration; a batch with no completed trial is absent (a tie: the earlier trial id)."""
    trials = trial_table(history, metric=metric, budget_samples=budget_samples)
    if trials.empty:
        return {}
    done = trials[(trials[Column.status] == "completed") & trials[metric].notna()]
    if Column.repeat in done:
        done = done[~done[Column.repeat].fillna(False).astype(bool)]
    out: dict[int, dict] = {}
    for batch, group in done.groupby(Column.batch_size):
        ordered = group.sort_values([metric, Column.trial_id], ascending=[mode != "max", True], kind="stable")
        best = ordered.iloc[0]
        out[int(batch)] = {Column.alpha: float(best[Column.alpha]),
                           Column.warmup_fraction: float(best[Column.warmup_fraction]),
                           metric: float(best[metric]), Column.trial_id: str(best[Column.trial_id])}
    return out


def control_configurations(controls: Sequence[tuple[str, int]], best: dict[int, dict], *, alpha: float,
                           warmup_fraction: float, source: str, base_batch: Optional[int] = None) -> list[dict]:
    """One record per control batch (ascending): ``batch_size``, ``alpha``, ``warmup_fraction``, ``source``: the
    from-scratch search's best at that batch (``source``, the experiment) where ``best`` has it, else the trunk's
    configuration (``alpha``, ``warmup_fraction``; source ``trunk``). With ``base_batch`` (``training.base_batch``:
    the dense frontier, ``branch.frontier: dense``) a batch the search did not train takes its configuration
    interpolated between its tuned neighbours (``interpolated_configuration``; the record then names them,
    ``interpolated_from``) where ``best`` has any."""
    out = []
    for batch in sorted({int(b) for _, b in controls}):
        tuned = best.get(batch)
        if tuned is None and base_batch is not None and best:
            a, w, between = interpolated_configuration(batch, best, base_batch=base_batch)
            out.append({Column.batch_size: batch, Column.alpha: a, Column.warmup_fraction: w, "source": source,
                        "interpolated_from": between})
            continue
        out.append({Column.batch_size: batch, Column.alpha: tuned[Column.alpha] if tuned else float(alpha),
                    Column.warmup_fraction: tuned[Column.warmup_fraction] if tuned else float(warmup_fraction),
                    "source": source if tuned else TRUNK})
    return out


def interpolated_configuration(batch: int, best: dict[int, dict], *, base_batch: int) -> tuple[float, float, list]:
    """(alpha, warmup fraction, the tuned batches they come from) of a fixed batch the from-scratch search did not
    train, from its best configurations ``best`` (batch → ``alpha``, ``warmup_fraction``), in log B between the
    tuned batches either side: the peak LR geometrically (log LR linear in log B; the LR of batch B is
    base_lr·(B / ``base_batch``)^alpha, ``maths.lr_schedule.scaled_lr``, so the alpha returned is the one that gives
    that LR at ``batch``), the warmup fraction linearly. Outside the tuned batches: the nearest end's configuration
    (its alpha carries its LR on by the same rule). At ``batch`` = ``base_batch`` every alpha gives base_lr: the
    alphas' interpolation then."""
    tuned = sorted(int(b) for b in best)
    lower, upper = [b for b in tuned if b < batch], [b for b in tuned if b > batch]
    if not lower or not upper:
        end = lower[-1] if lower else upper[0]
        return float(best[end][Column.alpha]), float(best[end][Column.warmup_fraction]), [end]
    lo, hi = lower[-1], upper[0]
    w = math.log(batch / lo) / math.log(hi / lo)
    a_lo, a_hi = float(best[lo][Column.alpha]), float(best[hi][Column.alpha])
    warmup = (1 - w) * float(best[lo][Column.warmup_fraction]) + w * float(best[hi][Column.warmup_fraction])
    if batch == base_batch:
        return (1 - w) * a_lo + w * a_hi, warmup, [lo, hi]
    log_lr = (1 - w) * a_lo * math.log(lo / base_batch) + w * a_hi * math.log(hi / base_batch)  # over log base_lr
    return log_lr / math.log(batch / base_batch), warmup, [lo, hi]


def configurations_run(history: pd.DataFrame, recorded: Optional[list] = None, *,
                       trunk_warmup: Optional[float] = None) -> Optional[list]:
    """What each control batch of a schedule validation trained: the configurations recorded before its runs
    (``recorded``, from the experiment's metadata) where there are any, else read off the control runs' own
    reports (alpha, and the warmup fraction, ``trunk_warmup`` where a run did not report it; source ``trunk``:
    every validation before tuned controls used the trunk's). None where the history has no control run."""
    if recorded:
        return [dict(r) for r in recorded]
    if history.empty or Column.control not in history or Column.role not in history:
        return None
    rows = history[(history[Column.role] == "schedule") & history[Column.control].notna()
                   & (history[Column.control] != "schedule")]
    if rows.empty:
        return None
    out = []
    for batch, group in rows.groupby(Column.batch_size):
        first = group.iloc[0]
        warmup = first.get(Column.warmup_fraction, trunk_warmup)
        warmup = trunk_warmup if warmup is None or pd.isna(warmup) else warmup
        out.append({Column.batch_size: int(batch), Column.alpha: float(first[Column.alpha]),
                    Column.warmup_fraction: None if warmup is None or pd.isna(warmup) else float(warmup),
                    "source": TRUNK})
    return out


def budget_problem(scratch_budget: Optional[int], branch_budget: int, *, where: str) -> Optional[str]:
    """Why the from-scratch search at ``where`` cannot set the controls (its budget differs: its best
    configurations are tuned for another run length), or None."""
    if scratch_budget is None or int(scratch_budget) != int(branch_budget):
        return (f"branch.controls_from: {where} trained {scratch_budget} samples per trial, this branch search "
                f"{branch_budget}: its best configurations are for another budget; name a from-scratch search at "
                f"the same budget, or set branch.controls_from=none")
    return None


def configurations_line(configs: list[dict]) -> str:
    """The controls' configurations, one phrase each: "B=16 alpha 0.75, warmup 0.1 (from <experiment>)",
    "B=128 alpha 0.5, warmup 0.04 (the trunk's)"."""
    def warmup(c: dict) -> str:
        value = c.get(Column.warmup_fraction)
        return "warmup not recorded" if value is None else f"warmup {value:g}"

    def origin(c: dict) -> str:
        if c["source"] == TRUNK:
            return "(the trunk's)"
        between = c.get("interpolated_from")
        return (f"(interpolated between B={' and B='.join(map(str, between))} of {c['source']})" if between and
                len(between) > 1 else f"(B={between[0]}'s of {c['source']})" if between else f"(from {c['source']})")

    return "; ".join(f"B={c[Column.batch_size]} alpha {c[Column.alpha]:g}, {warmup(c)} {origin(c)}"
                     for c in configs)
