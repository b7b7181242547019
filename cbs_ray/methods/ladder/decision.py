"""The ladder's ``decision`` (summary.json's first key, ``analysis.decision.Decision``): its prediction's
recommended batch (the 90 % interval's low end, a power of two) with its LR and warmup; B_crit measured at the budget
(``ladder.validate``), where there is one and it lies outside the interval by more than a grid step, is followed
instead (the LR moved along ``ladder.alpha``'s rule). Pure: no Ray, no pandas; ``decide_ladder`` takes plain values.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional, Sequence

from cbs_ray.analysis.decision import (
    DEFAULT_BASE,
    DISAGREE,
    REFUSED,
    RESOLVED,
    UNRESOLVED,
    Decision,
    Evidence,
    NextSearch,
    disagreeing,
    search_command,
    train_words,
    with_sentence,
)
from cbs_ray.maths.ladder import recommend_batch

__all__ = ["decide_ladder"]


def decide_ladder(*, batch_size: Optional[int], lr: Optional[float], warmup_samples: Optional[int],
                  budget_samples: int, b_crit: Optional[float], interval_90: Optional[Sequence[float]],
                  refusal: Optional[str], alpha: float, measured: Optional[float] = None,
                  measured_ci: Optional[Sequence[Optional[float]]] = None, base: NextSearch = DEFAULT_BASE,
                  others: Sequence[Evidence] = ()) -> Decision:
    """The ladder's decision: its prediction's recommended batch; where ``ladder.validate`` measured B_crit at the
    budget (``measured``, ``measured_ci``) beyond the prediction's interval by more than a grid step, that
    measurement (rounded down to a power of two, the LR moved along ``alpha``). ``others``: further cross-checks
    (B_simple's prediction). A refusal is a decision only with its next step: a from-scratch search at the budget,
    which measures what the ladder could not predict."""
    budget = int(budget_samples)
    if batch_size is None or b_crit is None:
        measure = search_command(base, "search.method=scratch")
        because = (f"the ladder made no prediction ({refusal or 'no B_crit'}); a from-scratch search at the budget "
                   f"measures the critical batch directly")
        d = Decision(None, None, None, None, budget, REFUSED, because, next_step=measure)
        return replace(d, text=f"Decision: none ({REFUSED}: {refusal or 'no prediction'}; "
                                                 f"next: {measure})")
    lo, hi = (interval_90 or (None, None))[:2]
    predicted = Evidence("prediction", b_crit, interval=(lo, hi) if lo is not None else None,
                         text=f"predicted B_crit {b_crit:.3g}" + (f" (90 % [{lo:.3g}, {hi:.3g}])" if lo and hi else ""))
    checks = list(others)
    at_d = None
    if measured is not None and math.isfinite(measured) and measured > 0:
        ci = tuple(measured_ci) if measured_ci and measured_ci[0] is not None else None
        at_d = Evidence("measured at the budget", measured, interval=ci,  # type: ignore[arg-type]
                        text=f"B_crit measured at the budget {measured:.3g}")
        checks.insert(0, at_d)
    apart = disagreeing(predicted, checks)
    if at_d is not None and at_d in apart:  # a measurement at D beats a prediction of it
        batch = recommend_batch(float(measured))  # type: ignore[arg-type]
        new_lr = lr * (batch / batch_size) ** alpha if lr is not None else None
        because = (f"followed B_crit measured at the budget ({measured:.3g}, ladder.validate): it lies beyond the "
                   f"prediction's interval by more than a grid step, and a measurement at D answers what the "
                   f"prediction estimates; batch {batch} (a power of two at most it), LR moved by alpha {alpha:g}")
        rest = [predicted] + [e for e in apart if e is not at_d]
        d = Decision(batch, new_lr, warmup_samples, None, budget, DISAGREE, because, rest)
        return with_sentence(d, train_words(batch, new_lr, warmup_samples, budget))
    because = (f"followed the ladder's prediction at the budget: batch {batch_size}, the largest power of two at "
               f"most the 90 % interval's low end")
    if at_d is not None:
        because += f"; B_crit measured at the budget ({measured:.3g}) agrees within one grid step"
    if apart:
        because += "; beyond its interval (more than one grid step from it): " + ", ".join(e.text for e in apart)
    confidence = DISAGREE if apart else RESOLVED if at_d is not None else UNRESOLVED
    step = None if at_d is not None or apart else search_command(base, "search.method=ladder",
                                                                 flags=["--validate-prediction"])
    d = Decision(int(batch_size), lr, warmup_samples, None, budget, confidence, because, apart, step)
    return with_sentence(d, train_words(int(batch_size), lr, warmup_samples, budget))
