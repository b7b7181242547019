"""The fitted and Seesaw batch ramps and geometric checkpoints, on hand-built inputs (``maths.batch_ramp``)."""

import math
import random

import pytest

from cbs_ray.maths.batch_ramp import (
    cap_at,
    fit_power_law,
    fitted_ramp,
    geometric_checkpoints,
    halving_points,
    seesaw_ramp,
)


def cosine(step, total=100):
    return 0.5 * (1 + math.cos(math.pi * step / total))


def batch_at(ramp, samples):
    return [b for s, b in ramp if s <= samples][-1]


def test_geometric_checkpoints_double_from_a_32nd_to_a_half():
    assert geometric_checkpoints() == pytest.approx([1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2])
    assert geometric_checkpoints(0.125, 0.5) == pytest.approx([0.125, 0.25, 0.5])
    with pytest.raises(ValueError):
        geometric_checkpoints(0.0)


def test_cosine_halves_where_worked_by_hand():
    # m = (1 + cos(pi p)) / 2 <= 2^-k at p >= arccos(2^(1-k) - 1) / pi:
    # k=1: 0.5 -> step 50 (m = 0.5 exactly, float 0.5 + 3e-17); k=2: 0.6667 -> 67; k=3: 0.7699 -> 77;
    # k=4: 0.8391 -> 84; k=5: 0.8869 -> 89
    cuts = halving_points([(k, cosine(k)) for k in range(100)])
    assert cuts[:5] == [50, 67, 77, 84, 89]


def test_halving_points_start_after_the_warmup_peak():
    # the warmup's 0.25 and 0.5 come before the peak: not halvings. After it: 0.5 at step 4 (k=1);
    # 0.2 at 5 passes 1/4 (k=2), not 1/8; 0.1 at 6 passes 1/8 (k=3); 0.03 at 7 passes 1/16 and 1/32 (k=4, 5)
    warm = [(0, 0.25), (1, 0.5), (2, 1.0), (3, 0.6), (4, 0.5), (5, 0.2), (6, 0.1), (7, 0.03)]
    assert halving_points(warm) == [4, 5, 6, 7, 7]


def test_seesaw_ramp_from_cosine_doubles_at_each_halving_up_to_the_largest_batch():
    # trunk B=8, 100 steps = 800 samples; a checkpoint at sample 8 measured CBS 1024 (no cap in effect)
    ramp = seesaw_ramp(cosine, measured=[(8, 1024)], trunk_batch=8, largest_batch=64, budget_samples=800)
    assert ramp == [[0, 8], [400, 16], [536, 32], [616, 64]]  # steps 50, 67, 77 at 8 samples a step


def test_seesaw_ramp_is_capped_by_the_measured_cbs_and_takes_a_held_back_doubling_when_the_cap_lifts():
    # CBS 16 from sample 200, 128 from 600: at 400 -> 16; at 536 the target 32 is held at 16;
    # at 600 the cap lifts: 32 (two halvings so far); 616 -> 64; 672 -> 128; 712 would be 256 > largest
    ramp = seesaw_ramp(cosine, measured=[(200, 16), (600, 128)], trunk_batch=8, largest_batch=128,
                       budget_samples=800)
    assert ramp == [[0, 8], [400, 16], [600, 32], [616, 64], [672, 128]]


def test_seesaw_from_the_tuned_batch_doubles_it_at_each_halving():
    # issue 60: the same 100-step cosine (halvings at steps 50, 67, 77, 84 = samples 400, 536, 616, 672 at the
    # trunk's 8 a step), started at B* = 32 instead of the trunk's 8: 32 -> 64 -> 128 -> 256 at those samples
    ramp = seesaw_ramp(cosine, measured=[(8, 1024)], trunk_batch=8, largest_batch=256, budget_samples=800,
                       start_batch=32)
    assert ramp == [[0, 32], [400, 64], [536, 128], [616, 256]]


def test_seesaw_from_the_tuned_batch_never_doubles_above_the_measured_cbs():
    # CBS 16 from sample 200 (below the start: the start stands, no doubling), 128 from 600: the halvings at 400
    # and 536 are held back; at 600 the cap lifts to 128 and both are taken (32 -> 128); the third halving (616)
    # would make 256 > 128: held
    ramp = seesaw_ramp(cosine, measured=[(200, 16), (600, 128)], trunk_batch=8, largest_batch=256,
                       budget_samples=800, start_batch=32)
    assert ramp == [[0, 32], [600, 128]]


def test_seesaw_late_switch_takes_no_doubling_before_its_fraction():
    # first doubling no earlier than sample 560 (70 % of 800): the halvings at 400 and 536 are taken there
    # (8 -> 32), the one at 616 where it falls (64 = the largest)
    ramp = seesaw_ramp(cosine, measured=[(8, 1024)], trunk_batch=8, largest_batch=64, budget_samples=800,
                       first_doubling_samples=560)
    assert ramp == [[0, 8], [560, 32], [616, 64]]
    # a switch after every halving: one step up at the switch, to the largest batch the halvings reach
    assert seesaw_ramp(cosine, measured=[(8, 1024)], trunk_batch=8, largest_batch=64, budget_samples=800,
                       first_doubling_samples=700) == [[0, 8], [700, 64]]


def test_seesaw_halvings_land_on_whole_units():
    # the cuts at 400, 536, 616 samples rounded up to whole 64s: 448, 576, 640; 672 -> 704 > the largest batch's
    ramp = seesaw_ramp(cosine, measured=[(8, 1024)], trunk_batch=8, largest_batch=64, budget_samples=800, unit=64)
    assert ramp == [[0, 8], [448, 16], [576, 32], [640, 64]]
    # a halving rounded to the budget or past it is dropped: with a budget of 600, the third (640) goes
    # (the multipliers are still the 100-step cosine's)
    assert seesaw_ramp(cosine, measured=[(8, 1024)], trunk_batch=8, largest_batch=64, budget_samples=600,
                       unit=64) == [[0, 8], [448, 16], [576, 32]]


def test_power_law_fit_through_exact_points_and_one_point():
    a, b = fit_power_law([(2048, 32), (4096, 64), (8192, 128)])
    assert (a, b) == (pytest.approx(1 / 64), pytest.approx(1.0))
    assert fit_power_law([(2048, 32)]) == (pytest.approx(32.0), 0.0)
    assert fit_power_law([(2048, 64), (4096, 32)])[1] == 0.0  # a falling CBS is clipped to flat
    assert fit_power_law([]) is None


def test_fitted_ramp_on_an_exact_power_law_is_one_batch_below_at_each_checkpoint():
    # fit(s) = s / 64; one batch below: B(s) = largest 8 * 2^j <= s / 128; the cap keeps B <= measured CBS
    ramp = fitted_ramp([(2048, 32), (4096, 64), (8192, 128)], trunk_batch=8, largest_batch=128,
                       budget_samples=16384)
    assert ramp == [[0, 8], [2048, 16], [4096, 32], [8192, 64]]


def test_fitted_ramp_switches_where_the_fit_crosses_between_checkpoints():
    # log2 points (11, 6), (12, 6), (13, 7): b = 0.5, a = 2^(1/3) = 1.259921.
    # at 2048: fit/2 = 28.5 -> 16; 32 when fit/2 = 32: s = (64 / a)^2 = 2580.3 -> 2624 (whole 64s) < 4096;
    # 64 needs s = (128 / a)^2 = 10321.3: past 4096 and 8192 (capped there by CBS 64 anyway? 8192's is 128),
    # taken at 10368 (whole 64s) < the budget 16384; 128 needs (256 / a)^2 = 41285: past the budget
    ramp = fitted_ramp([(2048, 64), (4096, 64), (8192, 128)], trunk_batch=8, largest_batch=128,
                       budget_samples=16384, unit=64)
    assert ramp == [[0, 8], [2048, 16], [2624, 32], [10368, 64]]


def test_cap_is_the_lowest_cbs_from_the_latest_checkpoint_on():
    measured = [(100, 64), (200, 32), (300, 128)]
    assert cap_at(measured, 50, 8) == 8
    assert cap_at(measured, 150, 8) == 32  # 64 at 100, but 32 measured later
    assert cap_at(measured, 250, 8) == 32
    assert cap_at(measured, 300, 8) == 128
    assert cap_at([(100, 48)], 100, 8) == 32  # floored to the trunk's grid


@pytest.mark.parametrize("seed", range(25))
def test_fitted_and_seesaw_ramps_never_exceed_a_measured_cbs(seed):
    rng = random.Random(seed)
    points = sorted(rng.sample(range(64, 16384, 64), rng.randint(1, 5)))
    measured = [(p, 8 * 2 ** rng.randint(0, 5)) for p in points]
    fitted = fitted_ramp(measured, trunk_batch=8, largest_batch=256, budget_samples=16384, unit=64,
                         margin_doublings=rng.randint(0, 1))
    seesaw = seesaw_ramp(lambda k: cosine(k, 2048), measured=measured, trunk_batch=8, largest_batch=256,
                         budget_samples=16384)
    for ramp in (fitted, seesaw):
        assert [b for _, b in ramp] == sorted(b for _, b in ramp)
        for start, batch in ramp:
            assert batch <= 256
            assert batch == 8 or batch <= [c for p, c in measured if p <= start][-1]  # the latest checkpoint's
        for point, cbs in measured:  # and at every checkpoint, its own
            assert batch_at(ramp, point) <= max(cbs, 8)
