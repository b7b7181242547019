"""Noise-aware turning point on synthetic per-batch samples with known means and noise."""

import math

import numpy as np
import pytest

from cbs_ray.maths.uncertainty import accuracy_standard_error, mean_and_standard_error, turning_point_range, verdict

BATCHES = [16, 32, 64, 128, 256, 512, 1024]
# True curve: flat 0.80 up to 128, then clear drops -> true turning point 128 at 1 % tolerance.
TRUE = [0.80, 0.80, 0.80, 0.80, 0.76, 0.72, 0.68]


def test_accuracy_standard_error_matches_the_issue():
    assert accuracy_standard_error(0.8, 872) == pytest.approx(0.01355, abs=1e-4)   # "about 1.3 points"
    with pytest.raises(ValueError):
        accuracy_standard_error(0.8, 0)


def test_mean_and_standard_error():
    assert mean_and_standard_error([0.8], eval_se=0.01) == (0.8, 0.01)
    mean, se = mean_and_standard_error([0.78, 0.80, 0.82])
    assert mean == pytest.approx(0.80) and se == pytest.approx(0.02 / math.sqrt(3))
    assert mean_and_standard_error([0.8, 0.8], eval_se=0.01)[1] == pytest.approx(0.01 / math.sqrt(2))


def test_verdict_resolved_when_gaps_are_many_standard_errors():
    v = verdict(TRUE, [0.0005] * 7, tolerance=0.01)          # tolerance 0.008 vs difference noise 0.0007
    assert v["resolved"] and v["text"].startswith("resolved")


def test_verdict_not_resolvable_below_one_standard_error_says_how_many_repeats():
    v = verdict(TRUE, [0.013] * 7, tolerance=0.01)           # SST-2-like: 1.3 points vs 0.8 tolerance
    assert not v["resolved"] and "not resolvable" in v["text"]
    # one run's sd 0.013: N >= (2·√2·0.013 / 0.008)² = 21.1 -> 22
    assert v["repeats_needed"] == 22 and "use ≥ 22 repeats" in v["text"]


def test_range_is_a_single_batch_when_noise_is_tiny():
    r = turning_point_range(BATCHES, TRUE, [1e-5] * 7)
    assert (r["batch_size"], r["low"], r["high"]) == (128, 128, 128) and r["share"][128] == 1.0


def test_range_covers_the_true_turning_point_in_most_repetitions():
    rng = np.random.default_rng(42)
    se = np.full(7, 0.006)
    covered = 0
    for rep in range(150):
        observed = np.asarray(TRUE) + rng.normal(size=7) * se
        r = turning_point_range(BATCHES, observed.tolist(), se.tolist(), draws=400, seed=rep)
        covered += BATCHES.index(r["low"]) <= BATCHES.index(128) <= BATCHES.index(r["high"])
    assert covered / 150 >= 0.8


def test_a_zero_tolerance_verdict_names_no_repeat_count():
    # Best metric 0 with a relative tolerance: the tolerance is 0, no number of repeats resolves it.
    out = verdict([0.0, 0.1], [0.01, 0.01], mode="min", tolerance=0.01)
    assert not out["resolved"] and out["repeats_needed"] is None
    assert "None" not in out["text"] and "a larger evaluation set" in out["text"]


def test_a_verdict_without_any_standard_error_names_no_repeat_count():
    out = verdict([0.8, 0.79], [math.nan, math.nan])  # raised ValueError (ceil of NaN)
    assert not out["resolved"] and out["repeats_needed"] is None
