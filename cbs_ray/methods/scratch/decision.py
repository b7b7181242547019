"""The from-scratch ``decision`` (summary.json's first key, ``analysis.decision.Decision``): the turning point (the
largest batch within the tolerance of the best quality at this budget, measured at equal samples: the question
asked) is followed. The tradeoff's B_crit, the 20 % rule and B_simple are cross-checks; one that lies more than one
grid step (a factor of 2) from the turning point *and* outside its interval (the turning point's range under the
noise, the tradeoff's bootstrap interval) disagrees. The LR and warmup are the recommendation's where it is at that
batch, else that batch's best trial's. Pure: no Ray; ``decide_scratch`` takes plain values.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

from cbs_ray.analysis.bounds import bound_text
from cbs_ray.analysis.decision import (
    DEFAULT_BASE,
    DISAGREE,
    LOWER_BOUND,
    REFUSED,
    RESOLVED,
    UNRESOLVED,
    UPPER_BOUND,
    Decision,
    Evidence,
    NextSearch,
    batch_grid,
    disagreeing,
    search_command,
    train_words,
    with_sentence,
)
from cbs_ray.maths.critical_batch import LOWER, UPPER
from cbs_ray.maths.lr_schedule import warmup_steps
from cbs_ray.methods.scratch.summary import NoiseScale, OverheadRule, Recommendation, Tradeoff, TurningPoint
from cbs_ray.records.columns import Column

__all__ = ["scratch_decision", "decide_scratch"]


def scratch_decision(turning: TurningPoint, tradeoff: Tradeoff, overhead: OverheadRule, noise: NoiseScale,
                     resolved: Optional[bool], next_range: Optional[list[int]], rec: Optional[Recommendation],
                     per_batch: list[dict], *, budget_samples: int, base: NextSearch = DEFAULT_BASE) -> Decision:
    """The from-scratch ``decision`` (``decide_scratch``) on the summary's readings: the turning point, its range
    under the noise as its interval; the tradeoff's B_crit (its bootstrap interval), the 20 % rule and B_simple (over
    training) as cross-checks; the LR and warmup the recommendation's where it is at the turning point's batch,
    else that batch's best trial's."""
    unc = turning.uncertainty
    point = Evidence("turning point", turning.batch_size, turning.bound,
                     interval=tuple(unc.range) if unc is not None and unc.range else None,  # type: ignore[arg-type]
                     text=bound_text(turning.batch_size, turning.bound))
    b_crit = tradeoff.b_crit if tradeoff.b_crit is not None else tradeoff.b_crit_bound
    ci = tradeoff.ci95 if tradeoff.b_crit is not None and tradeoff.ci95 else None
    interval = (ci[0], ci[1]) if ci else None
    checks = [Evidence("tradeoff B_crit", b_crit, tradeoff.bound, interval=interval,  # type: ignore[arg-type]
                       text=f"tradeoff B_crit {bound_text(b_crit, tradeoff.bound, '{:.3g}')}"),
              Evidence("20% rule", overhead.batch_size, overhead.bound,
                       text=f"20% rule {bound_text(overhead.batch_size, overhead.bound)}"),
              Evidence("B_simple", noise.mean, text=f"B_simple {noise.mean:.3g}" if noise.mean is not None else "")]
    lr, warmup = None, None
    batch = turning.batch_size
    if batch is not None and rec is not None and rec.batch_size == batch:
        lr, warmup = rec.peak_lr, rec.warmup_samples
    elif batch is not None:
        row = next((r for r in per_batch if r.get(Column.batch_size) == batch), None)
        if row is not None and row.get(Column.peak_lr) is not None and row.get(Column.warmup_fraction) is not None:
            lr = float(row[Column.peak_lr])
            warmup = warmup_steps(float(row[Column.warmup_fraction]), budget_samples // batch) * batch
    return decide_scratch(point, resolved=resolved, cross_checks=checks, budget_samples=budget_samples, lr=lr,
                          warmup_samples=warmup, next_batch_range=next_range, base=base,
                          not_determined=turning.reason)


def decide_scratch(turning: Evidence, *, resolved: Optional[bool], cross_checks: Sequence[Evidence],
                   budget_samples: int, lr: Optional[float], warmup_samples: Optional[int],
                   next_batch_range: Optional[list[int]], base: NextSearch = DEFAULT_BASE,
                   not_determined: Optional[str] = None) -> Decision:
    """The from-scratch decision: the turning point (``turning``), weighed against ``cross_checks`` (the tradeoff's
    B_crit with its interval, the 20 % rule, B_simple). ``resolved``: the noise verdict (None: no noise estimate);
    ``lr`` and ``warmup_samples`` at the turning point's batch; ``next_batch_range``: where a bound says to search
    next (``maths.critical_batch.next_batch_range``); ``base``: what a next search keeps
    (``analysis.decision.next_search_base``). ``not_determined``: why there is no turning point."""
    budget = int(budget_samples)
    if turning.batch_size is None:
        retry = search_command(base, "search.repeats=2")
        d = Decision(None, None, None, None, budget, REFUSED,
                     f"no turning point ({not_determined or 'no batch size completed'}); the tradeoff and the 20 % "
                     f"rule read steps to a target, not quality at this budget, and are not followed alone",
                     next_step=retry)
        return replace(d, text=f"Decision: none ({REFUSED}: {not_determined or 'no turning point'}; next: {retry})")
    batch = int(turning.batch_size)
    apart = disagreeing(turning, cross_checks)
    where = f"turning point {turning.text or batch}"
    because = (f"followed the {where}: it reads quality at equal samples at this budget, the question asked; the "
               f"tradeoff B_crit and the 20 % rule read steps to a lower target and B_simple predicts from the "
               f"gradient's noise, so they are cross-checks")
    grid = f"[{','.join(map(str, batch_grid(*next_batch_range)))}]" if next_batch_range else None
    step: Optional[str] = None
    if turning.bound == UPPER:
        confidence = UPPER_BOUND
        because += (f"; the drop comes right after the smallest batch trained, so {batch} is the largest batch known "
                    f"to be safe and a smaller one may be the critical batch")
        step = search_command(base, f"search.batch_sizes={grid}") if grid else None
        if step is None:
            because += " (no smaller batch to search: it is the workers per trial)"
    elif turning.bound == LOWER:
        confidence = LOWER_BOUND
        because += f"; no drop was seen up to {batch}: it costs no quality, a larger batch may not either"
        step = search_command(base, f"search.batch_sizes={grid}") if grid else None
    elif apart:
        confidence = DISAGREE
        if not resolved:  # the noise unmeasured or unresolved: repeats tell whether the turning point holds
            step = search_command(base, "search.repeats=2")
    elif resolved:
        confidence = RESOLVED
    else:
        confidence = UNRESOLVED
        because += ("; the noise was not resolved" if resolved is False else
                    "; no noise estimate (one run per batch size)")
        step = search_command(base, "search.repeats=2")
    if apart:
        because += "; beyond its noise (more than one grid step from it): " + ", ".join(e.text for e in apart)
    d = Decision(batch, lr, warmup_samples, None, budget, confidence, because, apart, step)
    return with_sentence(d, train_words(batch, lr, warmup_samples, budget))
