import math

import pytest

from cbs_ray import turning_point
from cbs_ray.critical_batch import within_tolerance

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
