"""B_simple from synthetic gradients with a known mean G and covariance Σ."""

import math

import numpy as np
import pandas as pd
import pytest

from cbs_ray.analysis.tables import noise_scale_table
from cbs_ray.maths.noise_scale import NoiseScaleMeter, noise_scale


def test_recovers_b_simple_from_two_batch_sizes():
    rng = np.random.default_rng(0)
    dim = 50
    mean = np.full(dim, 0.1)                  # |G|² = 50 · 0.01 = 0.5
    scale = np.full(dim, 0.5)                 # tr(Σ) = 50 · 0.25 = 12.5  -> B_simple = 25
    steps, b_small, b_big = 4000, 8, 32
    per_example = rng.normal(size=(steps, b_big, dim)) * scale + mean
    small = np.sum(per_example[:, :b_small].mean(axis=1) ** 2, axis=1)   # one worker's share
    big = np.sum(per_example.mean(axis=1) ** 2, axis=1)                  # the all-reduced gradient
    grad_sq, trace, b_simple = noise_scale(small, big, b_small, b_big)
    assert grad_sq == pytest.approx(0.5, rel=0.05)
    assert trace == pytest.approx(12.5, rel=0.05)
    assert b_simple == pytest.approx(25.0, rel=0.05)


def test_scalar_form_is_exact_on_expectations():
    # E|G_B|² = |G|² + tr(Σ)/B with |G|² = 2, tr(Σ) = 64: at B=4 -> 18, at B=16 -> 6
    assert noise_scale(18.0, 6.0, 4, 16) == pytest.approx((2.0, 64.0, 32.0))


def test_ratio_of_averages_not_average_of_ratios():
    small, big = [18.0, 18.0], [6.0, 7.9]       # second step: |G|² estimate ≈ 4.5, tr ≈ 34.1
    grad_sq, trace, b_simple = noise_scale(small, big, 4, 16)
    assert b_simple == pytest.approx(trace / grad_sq)
    per_step = [noise_scale(s, b, 4, 16)[2] for s, b in zip(small, big)]
    assert b_simple != pytest.approx(np.mean(per_step))


def test_non_finite_steps_are_skipped_and_bad_sizes_rejected():
    assert noise_scale([18.0, math.inf], [6.0, 1.0], 4, 16) == pytest.approx((2.0, 64.0, 32.0))
    assert all(math.isnan(v) for v in noise_scale([math.nan], [1.0], 4, 16))
    with pytest.raises(ValueError):
        noise_scale(1.0, 1.0, 16, 16)
    meter = NoiseScaleMeter(4, 16)
    assert all(math.isnan(v) for v in meter.averages())
    meter.add(18.0, 6.0)
    meter.add(math.nan, 6.0)
    assert meter.count == 1 and meter.averages() == pytest.approx((2.0, 64.0))  # bias-corrected


def test_meter_follows_a_change_within_its_window():
    meter = NoiseScaleMeter(4, 16, decay=0.9)
    for _ in range(200):
        meter.add(18.0, 6.0)     # |G|² = 2, tr = 64
    for _ in range(100):
        meter.add(10.0, 4.0)     # |G|² = 2, tr = 32
    grad_sq, trace = meter.averages()
    assert grad_sq == pytest.approx(2.0) and trace == pytest.approx(32.0, rel=1e-3)


def test_proposed_grid_is_centred_on_b_simple_and_clipped():
    from cbs_ray.maths.noise_scale import proposed_grid

    assert proposed_grid(100.0) == [16, 32, 64, 128, 256, 512, 1024]       # nearest power: 128
    assert proposed_grid(3.0) == [2, 4, 8, 16, 32]                            # clipped below at 2
    assert proposed_grid(1000.0, largest=2048) == [128, 256, 512, 1024, 2048]
    with pytest.raises(ValueError):
        proposed_grid(float("nan"))


def test_a_negative_noise_estimate_is_not_a_noise_scale():
    # |G_4|² = 5 below |G_16|² = 6: tr Σ estimate = (5 - 6) / (1/4 - 1/16) = -16/3, |G|² = (96 - 20)/12 > 0
    grad_sq, trace, b_simple = noise_scale(5.0, 6.0, 4, 16)
    assert grad_sq == pytest.approx(76 / 12) and trace == pytest.approx(-16 / 3)
    assert math.isnan(b_simple)  # not -0.84: too few steps for the noise to average out


def test_the_average_noise_scale_counts_a_negative_trace_estimate():
    history = pd.DataFrame([{"trial_id": "a", "batch_size": 16, "samples_seen": 1024, "grad_sq": 2.0,
                             "trace_sigma": -10.0, "b_simple": math.nan},
                            {"trial_id": "a", "batch_size": 16, "samples_seen": 2048, "grad_sq": 2.0,
                             "trace_sigma": 64.0, "b_simple": 32.0}])
    rows, overall = noise_scale_table(history)
    assert overall["early"] == pytest.approx(32.0)  # the first report with a B_simple, not the negative one
    # over every finite report, the negative estimate included: tr Σ (−10 + 64)/2 = 27 over |G|² 2 = 13.5
    # (leaving it out, 32, is the biased reading)
    assert overall["mean"] == pytest.approx(13.5)
    assert (overall["reports"], overall["reports_not_positive"]) == (2, 1)  # the report says how many
    history.loc[1, "trace_sigma"] = -70.0
    history.loc[1, "b_simple"] = 5.0  # even if a report carried one, the ratio of means is not positive
    assert math.isnan(noise_scale_table(history)[1]["mean"])



def test_a_meter_resumed_from_its_saved_state_reads_what_an_uninterrupted_one_reads():
    # Issue 40 row 12: a trial restarted from a checkpoint began its moving averages again, so its noise scale
    # differed from an identical run's (B_simple 23 vs 829 at one report).
    import random

    from cbs_ray.maths.noise_scale import NoiseScaleMeter

    rng = random.Random(0)
    pairs = [(rng.uniform(1.0, 3.0), rng.uniform(0.5, 1.0)) for _ in range(100)]
    whole = NoiseScaleMeter(8, 64)
    for small, big in pairs:
        whole.add(small, big)
    first = NoiseScaleMeter(8, 64)
    for small, big in pairs[:40]:
        first.add(small, big)
    resumed = NoiseScaleMeter(8, 64)
    resumed.resume(first.saved())
    for small, big in pairs[40:]:
        resumed.add(small, big)
    assert resumed.averages() == pytest.approx(whole.averages(), rel=1e-12)
    assert resumed.count == whole.count
    fresh = NoiseScaleMeter(8, 64)
    fresh.resume(NoiseScaleMeter(8, 64).saved())  # nothing measured yet: nothing to continue
    assert fresh.weight == 0
