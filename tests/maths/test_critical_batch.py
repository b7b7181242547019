import math

import pytest

from cbs_ray import turning_point
from cbs_ray.maths.critical_batch import within_tolerance

NAN = math.nan


def test_plateau_then_drop():
    # best 0.90 at 32; 64 at 0.895 is within 1 % (>= 0.891); 128 at 0.88 is not -> 64
    assert turning_point([16, 32, 64, 128], [0.89, 0.90, 0.895, 0.88]) == 64


def test_unsorted_input_gives_same_answer():
    assert turning_point([128, 16, 64, 32], [0.88, 0.89, 0.895, 0.90]) == 64


def test_walk_stops_at_first_drop_even_if_later_recovers():
    # 64 drops out of tolerance; 128 back in, but "every B in between" must stay within -> 32
    assert turning_point([16, 32, 64, 128], [0.90, 0.899, 0.85, 0.899]) == 32


def test_ties_for_best_take_the_smallest_then_walk_up():
    assert turning_point([8, 16, 32], [0.9, 0.9, 0.7]) == 16


def test_min_mode_for_losses():
    # best loss 1.00 at 16; 32 at 1.009 within 1 %; 64 at 1.02 not -> 32
    assert turning_point([8, 16, 32, 64], [1.05, 1.00, 1.009, 1.02], mode="min") == 32


def test_absolute_tolerance():
    assert turning_point([8, 16, 32], [0.50, 0.48, 0.45], tolerance=0.02, relative=False) == 16
    assert turning_point([8, 16, 32], [0.50, 0.48, 0.45], tolerance=0.01, relative=False) == 8


def test_nan_above_the_best_ends_the_walk_and_nan_elsewhere_is_ignored():
    assert turning_point([8, 16, 32, 64], [NAN, 0.9, NAN, 0.9]) == 16
    assert turning_point([8, 16, 32], [NAN, 0.9, 0.9]) == 32


def test_best_at_the_largest_batch():
    assert turning_point([8, 16, 32], [0.7, 0.8, 0.9]) == 32


def test_errors():
    with pytest.raises(ValueError):
        turning_point([8, 16], [NAN, NAN])
    with pytest.raises(ValueError):  # infinities are no more a metric than NaN (this returned 8)
        turning_point([8, 16], [math.inf, math.inf], mode="min")
    with pytest.raises(ValueError):
        turning_point([8], [0.1, 0.2])
    with pytest.raises(ValueError):
        turning_point([8], [0.1], mode="up")


def test_within_tolerance_edges():
    assert within_tolerance(0.891, 0.9)          # exactly 1 % below
    assert not within_tolerance(0.8909, 0.9)
    assert not within_tolerance(NAN, 0.9)
    assert within_tolerance(2.0, 2.0, mode="min", tolerance=0.0)


# ---- bounds at the edge of the grid, the next range, agreement (issue 17) ----------------------------------

from cbs_ray.maths.critical_batch import agree_within, bound_interval, edge_bound, next_batch_range  # noqa: E402

INF = math.inf


@pytest.mark.parametrize("reading, compared, bound", [
    (128, [8, 16, 32, 64, 128], "lower"),  # at the largest batch: the drop was not reached, ≥ 128
    (8, [8, 16, 32], "upper"),             # at the smallest, with the drop right after it: ≤ 8
    (16, [8, 16, 32], None),               # inside the grid: a value
    (8, [8], None),                        # one batch size: nothing compared, no bound claimed
    (None, [8, 16], None),                 # no reading
    (16, [32, 16, 8], None),               # order does not matter
])
def test_edge_bound(reading, compared, bound):
    assert edge_bound(reading, compared) == bound


@pytest.mark.parametrize("reading, bound, grid, min_batch, expected", [
    (128, "lower", [8, 16, 32, 64, 128], 1, [64, 1024]),  # keep 64 and 128, three doublings up
    (8, "upper", [8, 16, 32, 64, 128], 1, [1, 16]),       # keep 8 and 16, three doublings down
    (8, "upper", [8, 16, 32], 4, [4, 16]),                # stops at 4 workers per trial
    (32, "upper", [32, 64], 3, [6, 64]),                  # 32/8 = 4, rounded up to a multiple of 3 workers
    (4, "upper", [4, 8], 4, None),                        # already at the workers: nothing smaller to search
    (64, None, [8, 64, 128], 1, None),                    # a value, not a bound
    (128, "lower", [128], 1, [128, 1024]),                # no neighbour below: overlap on the bound alone
])
def test_next_batch_range(reading, bound, grid, min_batch, expected):
    assert next_batch_range(reading, bound, grid, min_batch=min_batch) == expected


@pytest.mark.parametrize("a, b, agree", [
    ((64, 64), (128, 128), True),      # one grid step apart
    ((32, 32), (128, 128), False),     # two steps
    ((64, 64), (237, 237), False),     # B_crit 237 is 3.7× 64
    ((128, 128), (237, 237), True),    # 1.85×
    ((128, INF), (64, 64), True),      # "≥ 128" and 64: one step
    ((128, INF), (32, 32), False),
    ((128, INF), (1000, 1000), True),  # inside the bound
    ((0, 8), (16, 16), True),          # "≤ 8" and 16
    ((0, 8), (32, 32), False),
    ((0, 8), (32, INF), False),        # "≤ 8" and "≥ 32"
    ((0, 8), (0, 64), True),           # two upper bounds always overlap
])
def test_agree_within_one_grid_step(a, b, agree):
    assert agree_within(a, b) is agree and agree_within(b, a) is agree


def test_bound_interval():
    assert bound_interval(128, "lower") == (128, INF)
    assert bound_interval(8, "upper") == (0.0, 8)
    assert bound_interval(64, None) == (64, 64)
    assert bound_interval(None, "lower") is None
