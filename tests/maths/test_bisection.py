"""The bisect strategy's policy on hand-built outcomes: which runs it asks for, in which order, and when it stops."""

import math

from cbs_ray.maths.bisection import Bisection, Run, middle_first, middle_of

GRID = [16, 32, 64, 128, 256, 512]
ALPHAS = [0.625, 0.5, 0.75]  # the middle first (middle_first), as the searcher orders them


def drive(policy: Bisection, metric_of, stopped=()):
    """Run the policy to its end, every proposed run ending at once with ``metric_of(run)`` (None for the runs in
    ``stopped``); returns the runs in the order they were proposed."""
    order = []
    while not policy.finished:
        runs = policy.next_runs()
        assert runs, "the policy neither finished nor proposed a run"
        for run in runs:
            order.append(run)
            policy.ended(run, None if run in stopped else metric_of(run))
    return order


def default_task(run: Run) -> float:
    """The default task's shape: a plateau at 0.95 up to 128, then a drop; alpha 0.625 best at 128."""
    plateau = {16: 0.952, 32: 0.952, 64: 0.951, 128: 0.948, 256: 0.907, 512: 0.78}[run.batch]
    return plateau - (0.0 if run.alpha == 0.625 else 0.01)


def test_middle_of_a_bracket_in_the_grid_and_candidates_from_the_middle_out():
    assert middle_of(GRID, 16, 512) == 128 and middle_of(GRID, 128, 512) == 256
    assert middle_of(GRID, 128, 256) is None and middle_of(GRID, 16, 64) == 32
    assert middle_first([0.5, 0.625, 0.75]) == [0.625, 0.5, 0.75] and middle_first([0.0, 1.0]) == [0.0, 1.0]
    assert middle_first([1, 2, 3, 4, 5]) == [3, 2, 4, 1, 5]


def test_alpha_once_then_the_smallest_then_the_open_bracket_then_the_neighbour_below():
    policy = Bisection(GRID, ALPHAS, base_batch=16)
    order = drive(policy, default_task)
    assert order[:4] == [Run(128, 0.625), Run(128, 0.5), Run(128, 0.75), Run(16, 0.625)]
    assert policy.alpha == 0.625
    # then 256 (the minimax probe of 128 .. the grid's open top: the lower of the bracket's three answers, since
    # 64 must be trained anyway if 128 is the answer), outside the tolerance, then 64 (below the answer); until
    # session 6 the upper middle, 512, came first: 5 runs where the answer and its neighbours need 4
    assert order[4:] == [Run(256, 0.625), Run(64, 0.625)]
    assert policy.reading() == 128
    assert sorted(policy.measured()) == [16, 64, 128, 256]


def test_a_run_stopped_early_is_not_a_measurement_and_alpha_is_the_best_completed():
    policy = Bisection(GRID, ALPHAS, base_batch=16)
    drive(policy, default_task, stopped={Run(128, 0.625)})  # stopped early (were it not the first, ASHA could)
    assert policy.alpha == 0.5  # of the two completed candidates, tied, the first


def test_nothing_waits_on_a_running_decision():
    policy = Bisection(GRID, ALPHAS, base_batch=16)
    first = policy.next_runs()
    assert len(first) == 4 and policy.next_runs() == []  # alpha not chosen yet: nothing more to start
    for run in first[:3]:
        policy.ended(run, default_task(run))
    assert policy.next_runs() == []  # the bracket waits on the smallest batch, still running
    policy.ended(Run(16, 0.625), default_task(Run(16, 0.625)))
    assert policy.next_runs() == [Run(256, 0.625)]
    policy.ended(Run(256, 0.625), default_task(Run(256, 0.625)))
    assert policy.next_runs() == [Run(64, 0.625)]


def test_no_drop_in_the_grid_reads_the_largest_and_measures_its_neighbour():
    policy = Bisection(GRID, ALPHAS, base_batch=16)
    order = drive(policy, lambda run: 0.95)
    assert policy.reading() == 512 and sorted(policy.measured()) == [16, 128, 256, 512]
    assert [r.batch for r in order[4:]] == [256, 512]  # up the open top one batch at a time (was 512, then 256)


def test_a_drop_right_after_the_smallest_walks_down_the_grid():
    drop = {16: 0.95, 32: 0.90, 64: 0.85, 128: 0.80, 256: 0.75, 512: 0.70}
    policy = Bisection(GRID, ALPHAS, base_batch=16)
    order = drive(policy, lambda run: drop[run.batch])
    assert policy.reading() == 16 and Run(32, policy.alpha) in order  # the neighbour above is measured
    assert [r.batch for r in order[4:]] == [32]  # 16..128's minimax probe; 64 (the old upper middle) never trained


def test_a_diverged_run_counts_as_outside_the_tolerance():
    policy = Bisection(GRID, ALPHAS, base_batch=16)
    drive(policy, lambda run: math.nan if run.batch >= 256 else 0.95)
    assert policy.reading() == 128


def test_minimised_metrics_and_a_base_batch_outside_the_grid():
    loss = {32: 1.00, 64: 1.00, 128: 1.005, 256: 1.2, 512: 1.5}
    policy = Bisection([32, 64, 128, 256, 512], [0.5, 1.0], mode="min", base_batch=16)
    order = drive(policy, lambda run: loss[run.batch] + (0.0 if run.alpha == 1.0 else 0.1))
    # the alpha batch is the walk's first probe on 5 batches, the fourth (index 3): 256 here, given in this order
    assert order[:2] == [Run(256, 0.5), Run(256, 1.0)] and policy.alpha == 1.0
    assert [r.batch for r in order[2:]] == [32, 64, 128]
    assert policy.reading() == 128


def test_one_alpha_candidate_has_no_alpha_batch_the_walk_starts_with_the_smallest_and_the_base_batch():
    """markov_lm.yaml's shape (alpha fixed at 0.5, excess loss, lower is better): the answer is the grid's smallest;
    8 and 16 (the base batch) at once, 16 outside the tolerance, and the walk ends: 2 runs, where the alpha batch
    (32) first made it 3."""
    losses = {8: 0.2348, 16: 0.2488, 32: 0.2432, 64: 0.2668, 128: 0.3135}
    policy = Bisection([8, 16, 32, 64, 128], [0.5], mode="min", base_batch=16)
    assert policy.alpha == 0.5
    assert policy.next_runs() == [Run(8, 0.5), Run(16, 0.5)]
    policy.ended(Run(16, 0.5), losses[16])
    assert policy.next_runs() == [] and not policy.finished  # asked again while 8 trains: nothing yet
    policy.ended(Run(8, 0.5), losses[8])
    assert policy.next_runs() == [] and policy.finished and policy.reading() == 8
    policy = Bisection([8, 16, 32, 64, 128], [0.5], mode="min", base_batch=16)
    assert drive(policy, lambda run: {**losses, 16: 0.2349}[run.batch]) == [  # 16 within the tolerance: the walk
        Run(8, 0.5), Run(16, 0.5), Run(64, 0.5), Run(32, 0.5)]
    policy = Bisection([8, 16, 32, 64, 128], [0.5], mode="min", base_batch=8)  # the base batch is the smallest
    assert policy.next_runs() == [Run(8, 0.5)]
