"""Branch mode's ``decision`` (summary.json's first key, ``analysis.decision.Decision``): the batch-size schedule,
started at its first batch with the trunk's LR (scaled along alpha where the schedule starts elsewhere) and warmup;
its validation (``--validate-schedule``) is its test. A schedule the validation finds inferior to the small batch,
or to the best tuned fixed batch, is not followed: that fixed batch is the decision. Pure: no Ray, no pandas;
``decide_branch`` takes plain values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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
    search_command,
    train_words,
    with_sentence,
)

__all__ = ["TunedFixedBatch", "decide_branch"]


@dataclass(frozen=True)
class TunedFixedBatch:
    """A schedule validation's best fixed batch (lowest mean final loss over the seeds) at the configuration it
    trained, and the paired verdict on the schedule against it (None: not shown, fewer than two seeds)."""

    batch_size: int
    lr: Optional[float]
    warmup_samples: Optional[int]
    schedule_non_inferior: Optional[bool]


def decide_branch(schedule: Sequence[Sequence[int]], *, trunk_batch: int, trunk_lr: Optional[float],
                  trunk_warmup_samples: Optional[int], budget_samples: int, alpha: Optional[float],
                  validated: bool, non_inferior: Optional[bool], below_frontier: Optional[bool],
                  trend_holds: Optional[bool], trend_text: str = "", base: NextSearch = DEFAULT_BASE,
                  best_tuned: Optional[TunedFixedBatch] = None) -> Decision:
    """Branch mode's decision: the schedule (``[start_samples, batch_size]`` pairs), started at its first batch
    with the trunk's LR (scaled along ``alpha`` where the schedule starts elsewhere) and warmup. ``validated``: a
    validation ran; ``non_inferior`` / ``below_frontier`` its verdicts; ``trend_holds``: CBS(t) does not decrease
    beyond its noise. ``best_tuned``: the validation's best fixed batch at its tuned configuration and whether the
    schedule is non-inferior to it; where it is not (or not to the small batch), that fixed batch is the decision:
    a user compares a schedule with their best fixed batch, not with an untuned one."""
    budget = int(budget_samples)
    pairs = [[int(s), int(b)] for s, b in schedule]
    if not pairs:
        rerun = search_command(base, "search.method=branch")
        d = Decision(None, None, None, None, budget, REFUSED, "no checkpoint was read: no schedule", next_step=rerun)
        return replace(d, text=f"Decision: none ({REFUSED}: no checkpoint was read; next: {rerun})")
    per_doubling = 2 ** alpha if alpha is not None else None
    first = pairs[0][1]
    lr = trunk_lr * (first / trunk_batch) ** alpha if trunk_lr is not None and alpha is not None else trunk_lr
    apart: list[Evidence] = []
    loses = validated and (non_inferior is False or (best_tuned is not None and best_tuned.schedule_non_inferior
                                                     is False))
    if loses and best_tuned is not None:  # the schedule loses to a tuned fixed batch: that batch is the decision
        b = best_tuned
        because = (f"the schedule's validation found it worse than the best tuned fixed batch {b.batch_size} by more "
                   f"than the margin{' (and worse than the small batch)' if non_inferior is False else ''}: followed "
                   f"that batch at its tuned configuration, which it was measured against on the same seeds")
        apart = [Evidence("schedule", pairs[-1][1], text="the schedule (inferior to the best tuned fixed batch)")]
        d = Decision(b.batch_size, b.lr, b.warmup_samples, None, budget, DISAGREE, because, apart)
        return with_sentence(d, train_words(b.batch_size, b.lr, b.warmup_samples, budget))
    if validated and non_inferior is False:  # the schedule loses quality: the trunk's fixed batch is the decision
        because = (f"the schedule's validation found it worse than the small batch by more than the margin: "
                   f"followed the trunk's fixed batch {trunk_batch}, which it was measured against")
        apart = [Evidence("schedule", pairs[-1][1], text="the schedule (inferior to the small batch)")]
        d = Decision(trunk_batch, trunk_lr, trunk_warmup_samples, None, budget, DISAGREE, because, apart)
        return with_sentence(d, train_words(trunk_batch, trunk_lr, trunk_warmup_samples, budget))
    because = ("followed the batch-size schedule: CBS(t) read at each checkpoint from branches off the trunk, the "
               "batch each stretch of training can take")
    step: Optional[str] = None
    if validated:
        because += ("; its validation: non-inferior to the small batch"
                    + ("" if non_inferior is not None else " (not judged)")
                    + (", below the fixed-batch frontier" if below_frontier else
                       ", not below the fixed-batch frontier" if below_frontier is False else ""))
        if best_tuned is not None and best_tuned.schedule_non_inferior:
            because += f", non-inferior to the best tuned fixed batch {best_tuned.batch_size}"
        if below_frontier is False:
            apart.append(Evidence("fixed-batch frontier", None, text="the fixed-batch frontier (the schedule is not "
                                                                     "below it: it saves no steps)"))
    else:
        because += "; not validated against fixed batches"
        step = search_command(base, "search.method=branch", *_tuned_controls_where_needed(pairs, trunk_batch, base),
                              flags=["--validate-schedule"])
    if trend_holds is False:
        apart.append(Evidence("CBS(t) trend", None, text=f"CBS(t) trend: {trend_text or 'it decreases'}"))
    confidence = DISAGREE if apart else RESOLVED if validated and non_inferior and below_frontier else UNRESOLVED
    if apart:
        because += "; against it: " + "; ".join(e.text for e in apart)
    d = Decision(first, lr, trunk_warmup_samples, pairs, budget, confidence, because, apart, step)
    return with_sentence(d, train_words(first, lr, trunk_warmup_samples, budget, pairs, per_doubling))


def _tuned_controls_where_needed(pairs: Sequence[Sequence[int]], trunk_batch: int, base: NextSearch) -> tuple[str, ...]:
    """A schedule that keeps the trunk's batch throughout is validated only against tuned fixed batches (against
    controls at the trunk's configuration the schedule run would repeat one of them, and the search skips it):
    its next step runs the from-scratch search as a stage (``branch.controls_from=scratch``) unless the experiment
    named its own."""
    constant = len(pairs) == 1 and int(pairs[0][1]) == int(trunk_batch)
    named = any(s.split("=", 1)[0] == "branch.controls_from" for s in base[1])
    return ("branch.controls_from=scratch",) if constant and not named else ()
