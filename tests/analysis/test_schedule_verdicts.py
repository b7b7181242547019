"""The schedule's pre-registered paired tests (methods.branch.reading_verdicts) on loss samples built by hand, the
known verdicts beside them."""

import math

import pytest

from cbs_ray.methods.branch.reading_verdicts import (
    FixedRun,
    below_frontier,
    criterion_text,
    frontier_band,
    interpolate_frontier,
    non_inferiority,
    paired_difference,
    steps_saved,
    t_quantile,
)

T95_2 = 2.919986  # Student's t, one-sided 95 %, 2 degrees of freedom (a table's value)
T975_2 = 4.302653  # two-sided 95 %, 2 degrees of freedom


def test_t_quantiles_are_student_s():
    assert t_quantile(0.95, 2) == pytest.approx(T95_2, abs=1e-6)
    assert t_quantile(0.975, 2) == pytest.approx(T975_2, abs=1e-6)
    with pytest.raises(ValueError):
        t_quantile(0.95, 0)


def test_a_detectably_worse_schedule_is_non_inferior_within_the_margin():
    # The case: worse by ~0.007 nats beyond its noise, yet its upper bound (0.0099) is under ε = 0.01.
    schedule = {1: 4.200, 2: 4.205, 3: 4.195}
    small = {1: 4.193, 2: 4.199, 3: 4.186}  # differences 0.007, 0.006, 0.009
    ni = non_inferiority(schedule, small, margin=0.01)
    se = math.sqrt(((0.007 - 0.022 / 3) ** 2 + (0.006 - 0.022 / 3) ** 2 + (0.009 - 0.022 / 3) ** 2) / 2) / math.sqrt(3)
    assert ni.difference_mean == pytest.approx(0.022 / 3)
    assert ni.standard_error == pytest.approx(se)
    assert ni.upper_95 == pytest.approx(0.022 / 3 + T95_2 * se) and ni.upper_95 == pytest.approx(0.009909, abs=1e-5)
    assert ni.holds is True and ni.seeds == 3 and ni.differences == pytest.approx({1: 0.007, 2: 0.006, 3: 0.009})
    # The same pairs at a margin of 0.009: the bound is above it.
    assert non_inferiority(schedule, small, margin=0.009).holds is False


def test_a_schedule_better_on_average_but_noisy_is_not_shown_non_inferior():
    schedule = {1: 4.18, 2: 4.22, 3: 4.197}
    small = {1: 4.20, 2: 4.20, 3: 4.20}  # differences −0.02, +0.02, −0.003: mean −0.001
    ni = non_inferiority(schedule, small, margin=0.01)
    assert ni.difference_mean == pytest.approx(-0.001)
    assert ni.upper_95 > 0.01 and ni.holds is False


def test_pairs_are_the_seeds_both_finished():
    d = paired_difference({1: 1.0, 2: 2.0, 3: math.nan, 4: 5.0}, {1: 0.5, 2: 1.0, 3: 1.0})
    assert d.differences == {1: 0.5, 2: 1.0} and d.seeds == 2
    one = non_inferiority({1: 1.0}, {1: 1.0, 2: 1.0}, margin=0.01)
    assert one.seeds == 1 and one.upper_95 is None and one.holds is None  # no noise to bound with: no verdict
    assert paired_difference({}, {1: 1.0}).difference_mean is None


SMALL = FixedRun(8, 1024, {1: 4.190, 2: 4.200, 3: 4.180})
MIDDLE = FixedRun(16, 512, {1: 4.195, 2: 4.205, 3: 4.186})  # −small: 0.005, 0.005, 0.006: non-inferior
LARGE = FixedRun(32, 256, {1: 4.240, 2: 4.250, 3: 4.230})  # −small: 0.05: not
FIXED = [SMALL, MIDDLE, LARGE]
W = math.log2(352 / 256)  # the schedule's 352 steps between B=32 (256) and B=16 (512), in log-steps


def test_the_frontier_is_linear_in_log_steps_with_its_band():
    p = interpolate_frontier(FIXED, 352)
    middle = (4.195 + 4.205 + 4.186) / 3
    assert p.loss == pytest.approx((1 - W) * 4.24 + W * middle)
    se_large = 0.01 / math.sqrt(3)
    se_middle = math.sqrt(((4.195 - middle) ** 2 + (4.205 - middle) ** 2 + (4.186 - middle) ** 2) / 2) / math.sqrt(3)
    se = math.sqrt((1 - W) ** 2 * se_large ** 2 + W ** 2 * se_middle ** 2)
    assert p.standard_error == pytest.approx(se)
    assert [p.low, p.high] == pytest.approx([p.loss - T975_2 * se, p.loss + T975_2 * se])
    assert interpolate_frontier(FIXED, 512).loss == pytest.approx(middle)  # at a fixed batch: its own mean
    assert interpolate_frontier(FIXED, 200) is None and interpolate_frontier(FIXED, 2048) is None  # no extrapolation
    band = frontier_band(FIXED, points_between=2, extra_steps=[352])
    assert [round(b.steps) for b in band] == [256, 323, 352, 406, 512, 645, 813, 1024]


def test_below_the_frontier_beyond_its_noise():
    below = below_frontier({1: 4.200, 2: 4.212, 3: 4.190}, 352, FIXED)
    frontier = {s: (1 - W) * LARGE.losses[s] + W * MIDDLE.losses[s] for s in (1, 2, 3)}
    assert below.between == [32, 16] and below.steps == 352
    assert below.differences == pytest.approx({1: 4.200 - frontier[1], 2: 4.212 - frontier[2], 3: 4.190 - frontier[3]})
    assert below.upper_95 < 0 and below.holds is True


def test_on_the_frontier_within_its_noise_is_not_below():
    frontier = {s: (1 - W) * LARGE.losses[s] + W * MIDDLE.losses[s] for s in (1, 2, 3)}
    # Differences −0.006, +0.009, −0.006 from the frontier: mean −0.001, sd 0.00866: the bound is above 0.
    schedule = {1: frontier[1] - 0.006, 2: frontier[2] + 0.009, 3: frontier[3] - 0.006}
    below = below_frontier(schedule, 352, FIXED)
    assert below.difference_mean == pytest.approx(-0.001)
    assert below.upper_95 == pytest.approx(-0.001 + T95_2 * math.sqrt(75e-6) / math.sqrt(3))
    assert below.holds is False
    # Steps outside the fixed runs' range: no frontier there, no verdict.
    assert below_frontier(schedule, 128, FIXED).holds is None


def test_steps_saved_against_the_best_non_inferior_fixed_batch():
    saved = steps_saved(352, FIXED, small_batch=8, margin=0.01)
    assert saved.against_batch == 16 and saved.against_steps == 512 and saved.non_inferior_batches == [8, 16]
    assert saved.fraction == pytest.approx(1 - 352 / 512)
    assert saved.interval == pytest.approx([1 - 352 / 256, 1 - 352 / 512])  # up to B=32, not non-inferior
    # B=32 non-inferior too: it is the best; nothing larger measured, the interval's low end unknown.
    close = FixedRun(32, 256, {1: 4.192, 2: 4.201, 3: 4.183})
    saved = steps_saved(352, [SMALL, MIDDLE, close], small_batch=8, margin=0.01)
    assert saved.against_batch == 32 and saved.fraction == pytest.approx(1 - 352 / 256)
    assert saved.interval[0] is None
    # Only the small batch non-inferior to itself.
    saved = steps_saved(352, [SMALL, LARGE], small_batch=8, margin=0.01)
    assert saved.against_batch == 8 and saved.fraction == pytest.approx(1 - 352 / 1024)


def test_the_criterion_names_its_margin():
    text = criterion_text(0.01)
    assert "ε = 0.01 nats" in text and "one-sided 95 %" in text and "log(optimizer steps)" in text
    assert "held out" in text
    assert "of the small batch's mean loss" in criterion_text(0.005, relative=True)
