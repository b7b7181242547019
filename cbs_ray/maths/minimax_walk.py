"""Which batch the ``bisect`` walk trains next: the probe with the fewest full runs in the worst case, then on average.

The walk reads a threshold on a grid of ``n`` batches (indices ``0 .. n-1``): the batches at or below the answer
``a`` are within the tolerance, those above are not (the monotone reading, ``critical_batch.turning_point``). It
always trains index 0, and it ends once ``a`` and both its grid neighbours (``a-1``, ``a+1``, where they exist) are
measured; every run is a full run, so its cost is the number of batches it trained. Between two measured batches
``lo`` (within the tolerance) and ``hi`` (outside, or ``n``: the grid's top, an open end) with nothing measured
between them, the answers still consistent are ``lo .. hi-1``, and what remains to train depends only on the
bracket's width ``hi - lo`` and on whether ``lo - 1`` is measured: ``hi`` is measured or off the grid, so the
upper neighbour of the bracket's top answer costs nothing, and no batch outside the bracket can tell anything.

The rule, at every bracket: the probe that minimises **first the worst case** over the answers still consistent
(the full runs until the answer and both neighbours are measured), **then the mean** under a uniform prior over
those answers; a tie goes to the old rule, the upper middle of the bracket (then the nearer, then the upper).
Worst case first because a search's cost target is met or missed per task, not on average; the mean second
because, among walks with the same bound, it is what a user pays over many tasks. The prior is uniform because
nothing in the search says where the answer lies before it is measured: **no task's answer is an input** (the
answers seen on SST-2 played no part; the rule is the same for every task of the same grid size). The recursion
is exact and memoised on (width, lower neighbour measured), so each state's choice is computed once; the walk is
stateless (the next probe follows from what is measured), and ``tests/maths/test_minimax_walk.py`` checks on every
width up to 12 that its (worst, total) equals the optimum over all decision trees.

What it does, by hand (``tests/maths/test_minimax_walk.py``): on 7 batches with index 0 measured, the first probe
is index 4 and the full runs per answer 0..6 are 4, 4, 5, 4, 4, 4, 4 (the old rule, first probe 3 then the upper
middle: 4, 4, 4, 5, 4, 5, 4). No walk makes every answer cost 4 on 7 batches: answers 2..5 each need their own
four batches, and no single first probe lies in all four of those sets. Pure: no Ray.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Optional, Sequence

__all__ = ["Cost", "bracket_cost", "probe_in_bracket", "next_probe", "first_probe", "walk_cost", "runs_by_answer"]


class Cost(NamedTuple):
    """The full runs a walk still trains, over the answers of a bracket: the most for any answer, and the sum over
    the answers (the mean under a uniform prior is ``total / width``)."""

    worst: int
    total: int


@lru_cache(maxsize=None)
def _choice(width: int, below_measured: bool) -> tuple[Cost, Optional[int]]:
    """(the bracket's cost, the probe's offset from ``lo``; None where the bracket is closed)."""
    if width == 1:  # the answer is lo: only its lower neighbour can be left to train
        runs = 0 if below_measured else 1
        return Cost(runs, runs), None
    upper_middle = (width + 1) // 2
    best: Optional[tuple[tuple[Cost, int, int], int]] = None
    for k in range(1, width):
        within, _ = _choice(width - k, k == 1)  # the answer is lo + k or above: lo + k - 1 measured only if it is lo
        outside, _ = _choice(k, below_measured)  # below lo + k: the bracket's lower side as it was
        cost = Cost(1 + max(within.worst, outside.worst), width + within.total + outside.total)
        key = (cost, abs(k - upper_middle), -k)
        if best is None or key < best[0]:
            best = (key, k)
    assert best is not None  # width > 1 here: the loop ran
    return best[0][0], best[1]


def bracket_cost(width: int, below_measured: bool) -> Cost:
    """What the walk still trains inside a bracket of ``width`` consistent answers (``hi - lo``) where nothing
    between ``lo`` and ``hi`` is measured; ``below_measured``: whether ``lo - 1`` is (or ``lo`` is index 0)."""
    if width < 1:
        raise ValueError(f"a bracket holds at least one answer, got width {width}")
    return _choice(width, bool(below_measured))[0]


def probe_in_bracket(width: int, below_measured: bool) -> Optional[int]:
    """The probe's offset from ``lo`` (1 .. width-1) by the rule (module docstring); None for a closed bracket."""
    if width < 1:
        raise ValueError(f"a bracket holds at least one answer, got width {width}")
    return _choice(width, bool(below_measured))[1]


def next_probe(n: int, lo: int, hi: int, measured: Sequence[int]) -> Optional[int]:
    """The grid index to train next: inside the bracket ``lo`` (the reading) .. ``hi`` (the first measured batch
    above it, or ``n``) by the rule; once it is closed, ``lo - 1`` where it is not measured; None when done."""
    if not 0 <= lo < hi <= n:
        raise ValueError(f"a bracket needs 0 <= lo < hi <= n, got lo={lo}, hi={hi}, n={n}")
    below = lo == 0 or (lo - 1) in measured
    k = probe_in_bracket(hi - lo, below)
    if k is not None:
        return lo + k
    return None if below else lo - 1


def walk_cost(n: int, measured: Sequence[int]) -> Cost:
    """The whole walk's full runs over the ``n`` answers, once the indices ``measured`` (index 0 among them) are:
    each answer's runs count the measured ones too. The answer lies in exactly one bracket between consecutive
    measured indices (the last one's upper end is the open top ``n``)."""
    marks = sorted(set(measured))
    if not marks or marks[0] != 0 or marks[-1] >= n:
        raise ValueError(f"measured indices must include 0 and lie below n={n}, got {list(measured)}")
    costs = [bracket_cost(hi - lo, lo == 0 or (lo - 1) in marks) for lo, hi in zip(marks, marks[1:] + [n])]
    return Cost(len(marks) + max(c.worst for c in costs), n * len(marks) + sum(c.total for c in costs))


def first_probe(n: int, measured: Sequence[int] = (0,)) -> int:
    """The index to train together with ``measured`` (index 0, and the base batch where it is in the grid) before
    any result is known: the alpha batch of a search with an alpha stage. By the same rule as every later probe
    (worst case, then the mean over all ``n`` answers; a tie to the upper middle of the probe's bracket, then the
    nearer, then the upper). Where every index is measured already: index 0's neighbour or 0 itself."""
    marks = sorted(set(measured) | {0})
    free = [p for p in range(n) if p not in marks]
    if not free:
        return min(1, n - 1)

    def key(p: int) -> tuple[Cost, int, int]:
        lo = max(m for m in marks if m < p)
        hi = min([m for m in marks if m > p] + [n])
        return walk_cost(n, marks + [p]), abs(p - (lo + hi + 1) // 2), -p

    return min(free, key=key)


def runs_by_answer(n: int, start: Sequence[int] = (0,)) -> dict[int, list[int]]:
    """The indices the walk trains, in order, for each answer on a clean threshold: ``start`` first (trained at
    once: index 0, the base batch, the alpha batch where there is one; index 0 is added where missing), then the
    walk. For tests, ``--dry-run``'s plan and a reader's table of what the rule costs on a grid."""
    start = list(dict.fromkeys([0, *start]))
    if max(start) >= n or min(start) < 0:
        raise ValueError(f"start indices must lie in 0 .. {n - 1}, got {start}")
    orders = {}
    for answer in range(n):
        order = list(start)
        while True:
            lo = max(i for i in order if i <= answer)
            hi = min([i for i in order if i > answer] + [n])
            probe = next_probe(n, lo, hi, order)
            if probe is None:
                break
            order.append(probe)
        orders[answer] = order
    return orders
