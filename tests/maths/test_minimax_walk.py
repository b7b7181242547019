"""The bisect walk's probe rule (``maths.minimax_walk``) on grids worked by hand, its tie rule, its optimality against
every decision tree, and the policy (``maths.bisection``) driven by a threshold and by noisy outcomes.

Notation: a grid of n batches, indices 0..n-1; the answer a is the largest index within the tolerance; the walk
ends once a, a-1 and a+1 (where they exist) are measured; a bracket lo..hi (lo within, hi outside or the open top
n) holds the answers lo..hi-1; "B" says whether lo-1 is measured (or lo is 0). Costs are full runs.

Hand-worked brackets (k: the probe's offset from lo; within: the answer is lo+k or above, a bracket of width w-k
whose lower neighbour is measured only if k = 1; outside: width k, B as before):
  w=1: 0 runs if B, else 1 (train lo-1).
  w=2, B: k=1 -> 1 + (within w1 B: 0, outside w1 B: 0) = worst 1, total 2.  w=2, not B: worst 2, total 3.
  w=3, B: k=1 -> within (w2, B) (1, 2), outside (w1, B) (0, 0): worst 2, total 3+2+0 = 5;
          k=2 -> within (w1, not B) (1, 1), outside (w2, B) (1, 2): worst 2, total 6.  k=1 wins.
  w=3, not B: k=1 -> (w2, B) (1, 2), (w1, not B) (1, 1): worst 2, total 6; k=2 -> worst 3.  k=1.
  w=4, B: k=1 -> (w3, B) (2, 5), (w1, B) (0, 0): (3, 9); k=2 -> (w2, not B) (2, 3), (w2, B) (1, 2): (3, 9);
          k=3 -> (w1, not B) (1, 1), (w3, B) (2, 5): (3, 10).  k=1 and k=2 tie: the upper middle, k=2.
  w=4, not B: k=1 -> (3, 4+5+1 = 10); k=2 -> (3, 4+3+3 = 10); k=3 -> (3, 11).  Tie: k=2.
  w=5, B: k=2 -> (w3, not B) (2, 6), (w2, B) (1, 2): (3, 13); k=3 -> (w2, not B) (2, 3), (w3, B) (2, 5): (3, 13);
          k=1 and k=4 -> worst 4.  Tie: k=3, the upper middle.
  w=6, B: k=3 -> (w3, not B) (2, 6), (w3, B) (2, 5): (3, 17); k=2 -> (w4, not B) (3, 10), (w2, B): (4, 18);
          k=4 -> (w2, not B), (w4, B) (3, 9): (4, 18).  k=3.
The 5-grid (index 0 measured, a bracket 0..5 of width 5): first probe index 3, then
  a=0: [0, 3, 1]           a=1: [0, 3, 1, 2]    a=2: [0, 3, 1, 2]    a=3: [0, 3, 4, 2]    a=4: [0, 3, 4]
  runs 3, 4, 4, 4, 3 (worst 4, total 18); the old rule (index 2, then upper middles): 3, 3, 5, 4, 4 (worst 5, 19).
The 6-grid (the default space's 16..512): first probe index 3 (128), then
  a=0: [0, 3, 1]   a=1, 2: [0, 3, 1, 2]   a=3: [0, 3, 4, 2]   a=4, 5: [0, 3, 4, 5]
  runs 3, 4, 4, 4, 4, 4 (worst 4, total 23); the old rule: 4, 4, 4, 5, 4, 4.
"""

import math
from functools import lru_cache

import pytest

from cbs_ray.maths.bisection import Bisection
from cbs_ray.maths.minimax_walk import (
    Cost,
    bracket_cost,
    first_probe,
    next_probe,
    probe_in_bracket,
    runs_by_answer,
    walk_cost,
)

SST2 = [16, 32, 64, 128, 256, 512, 1024]


def threshold_walk(grid, answer, *, base_batch=16, alphas=(0.5, 0.0, 1.0)):
    """The policy driven to its end by a clean threshold at ``grid[answer]`` (the first alpha best, the others just
    below it); returns the batches trained at the chosen alpha in order, and the policy."""
    policy = Bisection(list(grid), list(alphas), base_batch=base_batch)
    order = []
    while not policy.finished:
        runs = policy.next_runs()
        assert runs, "the policy neither finished nor proposed a run"
        for run in runs:
            inside = run.batch <= grid[answer]
            policy.ended(run, (0.9 if inside else 0.5) - (0.0 if run.alpha == alphas[0] else 0.001))
            if run.alpha == alphas[0]:
                order.append(run.batch)
    return order, policy


def test_the_sst2_grid_first_probe_256_and_five_runs_for_one_answer_only():
    assert Bisection(SST2, [0.5, 0.0, 1.0], base_batch=16).alpha_batch == 256
    runs, orders = [], {}
    for answer in range(7):
        order, policy = threshold_walk(SST2, answer)
        assert policy.reading() == SST2[answer]
        needed = {SST2[i] for i in (answer - 1, answer, answer + 1) if 0 <= i < 7}
        assert needed <= set(policy.measured()) and len(order) == len(set(order))  # each batch once
        runs.append(len(order))
        orders[SST2[answer]] = order
    assert runs == [4, 4, 5, 4, 4, 4, 4]
    assert orders[512] == [256, 16, 512, 1024] and orders[256] == [256, 16, 512, 128]
    assert orders[64] == [256, 16, 64, 128, 32]  # the one answer that costs five
    assert {a: len(o) for a, o in runs_by_answer(7, [0, 4]).items()} == dict(enumerate(runs))


def test_the_five_and_six_grids_worked_by_hand():
    assert first_probe(5) == 3 and runs_by_answer(5, [0, 3]) == {
        0: [0, 3, 1], 1: [0, 3, 1, 2], 2: [0, 3, 1, 2], 3: [0, 3, 4, 2], 4: [0, 3, 4]}
    assert walk_cost(5, [0, 3]) == Cost(4, 18) and walk_cost(5, [0, 2]) == Cost(4, 18)  # index 2 ties on cost
    assert first_probe(6) == 3 and runs_by_answer(6, [0, 3]) == {
        0: [0, 3, 1], 1: [0, 3, 1, 2], 2: [0, 3, 1, 2], 3: [0, 3, 4, 2], 4: [0, 3, 4, 5], 5: [0, 3, 4, 5]}
    assert walk_cost(6, [0, 3]) == Cost(4, 23)
    hand = {(1, True): (0, 0), (1, False): (1, 1), (2, True): (1, 2), (2, False): (2, 3), (3, True): (2, 5),
            (3, False): (2, 6), (4, True): (3, 9), (4, False): (3, 10), (5, True): (3, 13), (6, True): (3, 17)}
    assert {key: tuple(bracket_cost(*key)) for key in hand} == hand
    assert [probe_in_bracket(w, True) for w in range(1, 7)] == [None, 1, 1, 2, 3, 3]


def test_ties_go_to_the_upper_middle():
    # width 4: offsets 1 and 2 both cost (3, 9); width 8: 3, 4 and 5 all cost (4, 27); the upper middles win
    assert probe_in_bracket(4, True) == 2 and probe_in_bracket(8, True) == 4 and probe_in_bracket(9, False) == 5
    # the 7-grid's first probe: indices 3 and 4 both cost (5, 29) over the seven answers; 4 is 0..7's upper middle
    assert walk_cost(7, [0, 3]) == walk_cost(7, [0, 4]) == Cost(5, 29) and first_probe(7) == 4
    # no first probe makes every answer cost 4 on seven batches
    assert min(walk_cost(7, [0, p]).worst for p in range(1, 7)) == 5


@lru_cache(maxsize=None)
def least_total(width: int, below: bool, cap: int) -> float:
    """The least total over every decision tree whose every answer costs at most ``cap`` (inf where none does)."""
    if width == 1:
        runs = 0 if below else 1
        return runs if runs <= cap else math.inf
    if cap < 1:
        return math.inf
    return min(width + least_total(width - k, k == 1, cap - 1) + least_total(k, below, cap - 1)
               for k in range(1, width))


def test_the_stateless_walk_is_optimal_among_all_decision_trees():
    """The walk chooses each bracket's probe from its own (worst, total), which could in principle give up a
    lower total that a looser child would allow; over every decision tree it does not, up to 12 batches."""
    for width in range(1, 13):
        for below in (True, False):
            worst = next(cap for cap in range(width + 2) if least_total(width, below, cap) < math.inf)
            assert bracket_cost(width, below) == Cost(worst, least_total(width, below, worst))


def test_the_base_batch_inside_the_grid_and_one_alpha():
    """markov_lm.yaml's shape: 8..128, base 16 (index 1), one alpha: 8 and 16 at once, then the walk, whose probe
    above 16 is the upper middle, 64, as before (a tie there)."""
    losses = {8: 0.2348, 16: 0.2349, 32: 0.2432, 64: 0.2668, 128: 0.3135}
    policy = Bisection([8, 16, 32, 64, 128], [0.5], mode="min", base_batch=16)
    order = []
    while not policy.finished:
        for run in policy.next_runs():
            order.append(run.batch)
            policy.ended(run, losses[run.batch])
    assert order == [8, 16, 64, 32] and policy.reading() == 16
    # with an alpha stage the first probe is chosen beside 8 and 16: index 3 (64)
    assert first_probe(5, [0, 1]) == 3 and Bisection([8, 16, 32, 64, 128], [0.5, 1.0], base_batch=16).alpha_batch == 64


def test_noisy_outcomes_a_nan_and_a_dip_the_monotone_reading_smooths():
    # a diverged run at 1024 is outside the tolerance; the walk still ends with 512 and both neighbours
    metric = {16: 0.80, 32: 0.80, 64: 0.80, 128: 0.80, 256: 0.80, 512: 0.80, 1024: math.nan}
    noisy = Bisection(SST2, [0.5], base_batch=16)
    trained = []
    while not noisy.finished:
        for run in noisy.next_runs():
            trained.append(run.batch)
            noisy.ended(run, metric[run.batch])
    assert noisy.reading() == 512 and {256, 1024} <= set(noisy.measured())
    # not a clean threshold: 256 within, 512 outside, then 128 (the answer's lower neighbour) dips below the
    # tolerance; the monotone fit pools 128 and 256 (0.795, outside 2 % of 0.82), the reading falls back to 16 and
    # the walk goes on below 128: 32 (the minimax probe of 16..128), 64; the answer 64, both its neighbours measured
    dip = {16: 0.82, 32: 0.81, 64: 0.82, 128: 0.78, 256: 0.81, 512: 0.70, 1024: 0.60}
    noisy = Bisection(SST2, [0.5], base_batch=16, tolerance=0.02)
    trained = []
    while not noisy.finished:
        for run in noisy.next_runs():
            trained.append(run.batch)
            noisy.ended(run, dip[run.batch])
    assert trained == [16, 256, 512, 128, 32, 64] and noisy.reading() == 64


def test_bad_brackets_are_one_line_errors():
    with pytest.raises(ValueError, match="at least one answer"):
        bracket_cost(0, True)
    with pytest.raises(ValueError, match="lo < hi"):
        next_probe(7, 3, 3, [0, 3])
    with pytest.raises(ValueError, match="include 0"):
        walk_cost(7, [2])
