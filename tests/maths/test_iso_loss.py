"""Iso-loss steps on constructed frontiers, the answers worked by hand beside them (``maths.iso_loss``)."""

import math

import pytest

from cbs_ray.maths.iso_loss import (
    CHORD,
    censoring_bound,
    iso_loss_steps,
    paired_saved_fraction,
    pareto_points,
    pooled_saved_fraction,
    saved_fraction,
)

# B=64: 100 steps, B=32: 200, B=16: 400, B=8: 800 (worse than B=16: not on the frontier)
FRONTIER = [(100, 3.0), (200, 2.8), (400, 2.7), (800, 2.72)]


def test_pareto_points_drop_a_batch_that_does_not_improve_on_fewer_steps():
    assert pareto_points(FRONTIER) == [(100.0, 3.0), (200.0, 2.8), (400.0, 2.7)]
    assert pareto_points([(100, 3.0), (100, 2.9), (200, float("nan"))]) == [(100.0, 2.9)]


def test_iso_loss_interpolates_in_log_steps():
    # chords: 2.75 is halfway from 2.8 (200 steps) to 2.7 (400 steps): w = 0.5, S* = 200 * 2 ** 0.5 = 282.84
    iso = iso_loss_steps(FRONTIER, 2.75, interpolation=CHORD)
    assert iso.steps == pytest.approx(282.8427, rel=1e-6)
    assert iso.censored is None
    # a schedule of 150 steps saves 1 - 150 / 282.84 = 0.4697
    assert saved_fraction(150, iso) == pytest.approx(0.469670, abs=1e-6)


def test_iso_loss_at_a_point_is_that_point():
    assert iso_loss_steps(FRONTIER, 2.8).steps == pytest.approx(200.0)
    assert iso_loss_steps(FRONTIER, 3.0).steps == pytest.approx(100.0)
    assert iso_loss_steps(FRONTIER, 3.0).censored is None


def test_outside_the_frontier_is_a_bound_with_its_direction():
    below_all = iso_loss_steps(FRONTIER, 2.65)  # better than every fixed batch: more than 400 steps
    assert (below_all.steps, below_all.censored) == (pytest.approx(400.0), "above")
    worse = iso_loss_steps(FRONTIER, 3.1)  # worse than the largest batch: fewer than 100 steps
    assert (worse.steps, worse.censored) == (pytest.approx(100.0), "below")
    assert iso_loss_steps(FRONTIER, float("nan")) is None
    assert iso_loss_steps([], 2.0) is None


def test_paired_fraction_with_its_t_interval():
    # per seed the frontier (100, 3.0), (400, 2.0); schedule 80 steps.
    # seed 0: loss 2.5 -> S* = 200, saved 0.6; seed 1: 3.0 -> 100, 0.2; seed 2: 2.0 -> 400, 0.8
    fixed = [(100, {0: 3.0, 1: 3.0, 2: 3.0}), (400, {0: 2.0, 1: 2.0, 2: 2.0})]
    out = paired_saved_fraction(80, {0: 2.5, 1: 3.0, 2: 2.0}, fixed)
    assert out.seeds == 3
    assert out.per_seed == {0: pytest.approx(0.6), 1: pytest.approx(0.2), 2: pytest.approx(0.8)}
    # mean 0.5333; sd 0.305505; t(0.975, 2) = 4.302653; half width 4.302653 * 0.305505 / sqrt(3) = 0.758917
    assert out.saved_fraction == pytest.approx(0.533333, abs=1e-6)
    assert out.interval_95 == [pytest.approx(0.533333 - 0.758917, abs=1e-5),
                               pytest.approx(0.533333 + 0.758917, abs=1e-5)]
    assert out.censored == {}


def test_paired_fraction_reads_each_seed_on_the_fixed_batches_it_has_and_records_censoring():
    # B at 400 steps diverged on seed 1 (nan): seed 1's frontier is the 100-step batch alone
    fixed = [(100, {0: 3.0, 1: 3.0, 2: 3.0}), (400, {0: 2.0, 1: float("nan")})]
    out = paired_saved_fraction(80, {0: 1.5, 1: 2.5, 3: 2.0}, fixed)
    assert out.seeds == 2  # seed 3: no fixed batch ran it; seed 2: no schedule run
    # seed 0: 1.5 below the frontier's lowest (2.0 at 400): at least 1 − 80/400 = 0.8;
    # seed 1: 2.5 below 3.0 at 100 steps, the only point: at least 1 − 80/100 = 0.2
    assert out.per_seed == {0: pytest.approx(0.8), 1: pytest.approx(0.2)}
    assert out.censored == {0: "above", 1: "above"}


def test_pooled_fraction_clusters_by_setting():
    # equal cluster sizes: CR1 reduces to the t-interval of the setting means (0.2, 0.6):
    # mean 0.4, se = sd(0.2, 0.6) / sqrt(2) = 0.2, t(0.975, 1) = 12.706205 -> half 2.541241
    out = pooled_saved_fraction({"a": {0: 0.1, 1: 0.3}, "b": {0: 0.5, 1: 0.7}})
    assert out.saved_fraction == pytest.approx(0.4)
    assert out.interval_95 == [pytest.approx(0.4 - 2.541241, abs=1e-5), pytest.approx(0.4 + 2.541241, abs=1e-5)]
    assert (out.seeds, out.settings) == (4, 2)


def test_pooled_fraction_weights_seeds_not_settings():
    # unequal sizes: mean over the 3 seeds = 0.4; scores: a: (0.1-0.4)+(0.3-0.4) = -0.4, b: 0.8-0.4 = 0.4
    # se = sqrt(2 * (0.16 + 0.16)) / 3 = 0.266667
    out = pooled_saved_fraction({"a": {0: 0.1, 1: 0.3}, "b": {0: 0.8}})
    half = 12.706205 * math.sqrt(0.64) / 3
    assert out.saved_fraction == pytest.approx(0.4)
    assert out.interval_95[1] == pytest.approx(0.4 + half, abs=1e-5)
    assert pooled_saved_fraction({"a": {0: 0.3}}).interval_95 is None


# ---- the monotone frontier (issue 60) ----------------------------------------------------------------------

# A convex frontier in log(steps): L(S) = 2 + 10 / sqrt(S), fixed batches 2x apart (100 ... 1600 steps).
# The steps it needs to reach L, worked by hand: S* = (10 / (L - 2)) ** 2.
CONVEX = [(s, 2.0 + 10.0 / math.sqrt(s)) for s in (100, 200, 400, 800, 1600)]


def test_chords_overstate_a_saving_on_a_convex_frontier_and_pchip_does_not():
    loss = 2.6
    true_steps = (10.0 / (loss - 2.0)) ** 2  # 277.78
    schedule = true_steps / 2  # the schedule truly saves half the steps
    truth = 1 - schedule / true_steps  # 0.5
    chord = saved_fraction(schedule, iso_loss_steps(CONVEX, loss, interpolation=CHORD))
    pchip = saved_fraction(schedule, iso_loss_steps(CONVEX, loss))  # PCHIP is the default
    # the chord from (200, 2.7071) to (400, 2.5) lies above the curve: it reaches 2.6 at 286.2 steps, 51.5 % saved
    assert chord == pytest.approx(0.51476, abs=1e-4)
    assert chord - truth > 0.01
    assert pchip == pytest.approx(truth, abs=1e-3)  # 277.86 steps: within 0.1 point of the truth


def test_pchip_passes_through_the_points_and_two_points_are_the_chord():
    assert iso_loss_steps(CONVEX, 2.5).steps == pytest.approx(400.0)  # on a point: that point's steps
    two = [(100, 3.0), (400, 2.0)]
    assert iso_loss_steps(two, 2.5).steps == pytest.approx(200.0)  # halfway in log-steps
    with pytest.raises(ValueError, match="unknown interpolation"):
        iso_loss_steps(two, 2.5, interpolation="spline")


def test_pchip_is_monotone_between_points_that_are_not_convex():
    # a kink: a steep drop then a flat tail; PCHIP stays within each segment's range (no overshoot), so every
    # loss between two points is reached once, between their steps
    kinked = [(100, 3.0), (200, 2.2), (400, 2.19), (800, 2.18)]
    for loss in (2.9, 2.5, 2.195, 2.185):
        steps = iso_loss_steps(kinked, loss).steps
        (s1, _), (s2, _) = next(((a, b) for a, b in zip(kinked, kinked[1:]) if b[1] <= loss < a[1]))
        assert s1 <= steps <= s2


def test_censoring_is_named_as_a_bound():
    # every censored seed beat every fixed batch: their fractions are at least what is read, so is the mean
    assert censoring_bound({1: "above", 3: "above"}) == "lower bound"
    assert censoring_bound({2: "below"}) == "upper bound"
    assert censoring_bound({1: "above", 2: "below"}) == "mixed bounds"
    assert censoring_bound({}) is None
    below_all = paired_saved_fraction(100, {1: 2.1}, [(s, {1: v}) for s, v in CONVEX])
    assert below_all.censored == {1: "above"}
    assert below_all.per_seed[1] == pytest.approx(1 - 100 / 1600)  # read at the last point: a lower bound
