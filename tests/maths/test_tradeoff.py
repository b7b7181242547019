"""Steps/samples tradeoff fit, steps-to-target interpolation and the 20 % overhead rule."""

import math

import numpy as np
import pytest

from cbs_ray import fit_tradeoff
from cbs_ray.maths.tradeoff import overhead_rule, samples_to_target

NAN = math.nan


def test_interpolates_between_bracketing_milestones():
    # 0.6 at 1000, 0.8 at 2000: 0.7 is reached half-way -> 1500 samples
    assert samples_to_target([1000, 2000, 3000], [0.6, 0.8, 0.9], 0.7) == pytest.approx(1500)
    # unsorted input, min mode: loss 1.0 at 1000, 0.5 at 2000; 0.75 half-way
    assert samples_to_target([2000, 1000], [0.5, 1.0], 0.75, mode="min") == pytest.approx(1500)


def test_reached_at_first_milestone_never_reached_and_nan():
    assert samples_to_target([1000, 2000], [0.9, 0.95], 0.8) == 1000
    assert math.isnan(samples_to_target([1000, 2000], [0.5, 0.6], 0.8))
    assert samples_to_target([1000, 2000, 3000], [0.5, NAN, 0.9], 0.7) == 3000  # no bracket across a NaN


def test_exact_hyperbola_recovers_parameters():
    s_min, e_min = 100.0, 25600.0            # B_crit = 256
    b = np.array([16, 32, 64, 128, 256, 512, 1024, 2048], dtype=float)
    fit = fit_tradeoff(b, s_min + e_min / b)
    assert fit.s_min == pytest.approx(100.0) and fit.e_min == pytest.approx(25600.0)
    assert fit.b_crit == pytest.approx(256.0)
    assert fit.ci[0] == pytest.approx(256.0, rel=1e-6) and fit.ci[1] == pytest.approx(256.0, rel=1e-6)


def test_noisy_hyperbola_within_ten_percent_and_ci_covers_truth():
    rng = np.random.default_rng(3)
    s_min, b_crit = 200.0, 512.0
    b = np.repeat(2.0 ** np.arange(4, 13), 3)            # 16 .. 4096, three runs each
    steps = (s_min + s_min * b_crit / b) * rng.lognormal(0, 0.05, len(b))
    fit = fit_tradeoff(b, steps)
    assert fit.b_crit == pytest.approx(b_crit, rel=0.10)
    assert fit.ci[0] < b_crit < fit.ci[1]


def test_too_few_points_or_no_saturation_give_reasons():
    assert fit_tradeoff([16, 32], [100, 50]).b_crit is None
    assert "at least 3" in fit_tradeoff([16, 32, NAN], [100, 50, 20]).reason
    perfect = fit_tradeoff([16, 32, 64, 128], [800, 400, 200, 100])   # S ∝ 1/B: S_min ≈ 0
    assert perfect.b_crit is None and "largest batch measured (128)" in perfect.reason
    flat = fit_tradeoff([16, 32, 64], [100, 110, 120])
    assert flat.b_crit is None and "do not fall" in flat.reason
    # Equal steps: E_min is 0 up to rounding (2e-13), which gave B_crit = 2e-15 before.
    equal = fit_tradeoff([8, 16, 32, 64], [100, 100, 100, 100])
    assert equal.b_crit is None and "below 1/4 of the smallest batch measured (8)" in equal.reason


def test_resamples_that_scale_perfectly_make_the_upper_end_unbounded():
    # S = (40 + 16384/B)·noise: B_crit ≈ 624, but 27 of the 976 usable resamples fit S_min ≤ 0 (B_crit = ∞),
    # more than 2.5 %: the upper end is ∞, not the largest finite estimate (2922 when they were dropped).
    b = np.array([8, 16, 32, 64, 128, 256.0])
    steps = (40 + 16384 / b) * np.exp(np.random.default_rng(11).normal(0, 0.1, len(b)))
    fit = fit_tradeoff(b, steps)
    assert fit.b_crit == pytest.approx(624, rel=0.01)
    assert 400 < fit.ci[0] < fit.b_crit and fit.ci[1] == math.inf
    assert fit_tradeoff(b, steps, bootstrap=0).ci is None  # no resamples: no interval (an IndexError before)


def test_overhead_rule():
    # B0=16 needs 1000 steps (16000 samples); 20 % allowance: E(B) <= 19200 samples.
    batches = [16, 32, 64, 128, 256]
    steps = [1000, 520, 290, 170, 120]     # samples: 16000, 16640, 18560, 21760, 30720
    assert overhead_rule(batches, steps) == 64
    assert overhead_rule(batches, [NAN] * 5) is None
    assert overhead_rule([16, 32], [NAN, 400]) == 32   # smallest batch that reached it is the reference
    # B=16 needs 1.75× B=8's samples: the walk ends at 8, though 32 and 64 are back under the line.
    assert overhead_rule([8, 16, 32, 64], [100, 70, 20, 12]) == 8


def test_a_b_crit_past_the_measured_range_is_a_bound():
    # S ∝ 1/B over 16…128: B_crit lies beyond 4 × 128, a lower bound at 512 (issue 17).
    perfect = fit_tradeoff([16, 32, 64, 128], [800, 400, 200, 100])
    assert (perfect.b_crit, perfect.bound, perfect.bound_at) == (None, "lower", 512.0)
    # Equal steps over 8…64: B_crit lies below 8 / 4, an upper bound at 2.
    equal = fit_tradeoff([8, 16, 32, 64], [100, 100, 100, 100])
    assert (equal.b_crit, equal.bound, equal.bound_at) == (None, "upper", 2.0)
    # A fitted B_crit, or too few points, is no bound.
    assert fit_tradeoff([16, 32, 64, 128], [900, 500, 300, 200]).bound is None
    assert fit_tradeoff([16, 32], [100, 50]).bound is None


def test_fit_tradeoffs_agrees_with_fit_tradeoff_point_for_point_and_its_intervals_as_bootstraps_do():
    import numpy as np

    from cbs_ray.maths.tradeoff import fit_tradeoffs

    rng = np.random.default_rng(3)
    fits = []
    for b_crit in (10.0, 20.0, 40.0, 80.0):
        batches = [8, 16, 32, 64, 128]
        fits.append((batches, [(1000 / b_crit + 1000 / b) * math.exp(rng.normal(0, 0.05)) for b in batches]))
    fits.append(([8, 16], [10.0, 6.0]))                 # too few batch sizes: the same reason
    fits.append(([8, 16, 32], [10.0, 10.0, 10.0]))      # no tradeoff: the same reason
    many = fit_tradeoffs(fits, bootstrap=1000, seed=0)
    for (b, s), fit in zip(fits, many):
        one = fit_tradeoff(b, s, bootstrap=1000, seed=0)
        assert fit.reason == one.reason
        if one.b_crit is None:
            assert fit.b_crit is None
            continue
        assert fit.b_crit == pytest.approx(one.b_crit, rel=1e-9)
        assert fit.ci is not None and one.ci is not None
        # two bootstraps of the same 5 points: the ends within 15 % of each other
        assert fit.ci[0] == pytest.approx(one.ci[0], rel=0.15) and fit.ci[1] == pytest.approx(one.ci[1], rel=0.15)
