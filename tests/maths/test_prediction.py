"""maths.prediction: B_crit at D from the rungs and a prior over the exponent (issues 49 and 57), on hand-built rungs
with the known answer beside them."""

import math

import pytest

from cbs_ray.maths.prediction import (
    FLAT_EXPONENT,
    PRIORS,
    TRANSFER_SD,
    Prior,
    RungPoint,
    literature_range,
    posterior,
    predict_b_crit,
    screen_rungs,
)

RUNG_SAMPLES = [384, 512, 768, 1024, 1408, 2048, 2944, 3200]  # the markov ladder's rungs (issue 36)
BUDGET = 16384


def power_rungs(gamma, constant=2.0, sd=0.05, samples=RUNG_SAMPLES):
    return [RungPoint(d, constant * d ** gamma, sd) for d in samples]


def test_posterior_is_the_prior_without_data_and_the_data_when_exact():
    assert posterior(None, None, 0.5, 0.15) == (0.5, 0.15, 0.0)
    assert posterior(0.8, math.inf, 0.5, 0.15) == (0.5, 0.15, 0.0)
    mean, sd, share = posterior(0.8, 0.0, 0.5, 0.15)
    assert (mean, sd, share) == (0.8, 0.0, 1.0)
    # equal precisions: the midpoint, sd / sqrt(2)
    mean, sd, share = posterior(0.8, 0.15, 0.5, 0.15)
    assert mean == pytest.approx(0.65) and sd == pytest.approx(0.15 / math.sqrt(2)) and share == pytest.approx(0.5)


def test_no_rungs_but_an_anchor_gives_the_prior_with_its_wider_interval():
    prior = PRIORS["mccandlish"]
    only = predict_b_crit([RungPoint(3200, 30.0, 0.05)], BUDGET)
    assert only.source == "prior" and only.refusal is None
    assert only.exponent == pytest.approx(prior.mean) and only.exponent_sd == pytest.approx(prior.sd)
    assert only.b_crit == pytest.approx(30.0 * (BUDGET / 3200) ** prior.mean)
    fitted = predict_b_crit(power_rungs(prior.mean), BUDGET)
    assert fitted.source == "combined"  # with TRANSFER_SD the rungs carry at most ~31 % of the precision
    # one rung where the fitted prediction is anchored (the same span to D): the prior alone is less sure
    only = predict_b_crit([RungPoint(fitted.anchor_samples, fitted.anchor_b_crit, 0.05)], BUDGET)
    width = lambda p: math.log(p.interval_90[1] / p.interval_90[0])  # noqa: E731
    assert width(only) > width(fitted)


def test_infinitely_precise_rungs_give_the_fit():
    exact = predict_b_crit(power_rungs(0.8, sd=1e-9), BUDGET, sd_floor=0.0, transfer_sd=0.0)
    assert exact.source == "rungs" and exact.form == "line"
    assert exact.exponent == pytest.approx(0.8, abs=1e-6)
    assert exact.b_crit == pytest.approx(2.0 * BUDGET ** 0.8, rel=1e-6)


def test_noisy_rungs_are_pulled_towards_the_prior():
    prior = Prior("mccandlish", 0.5, 0.15, "test")
    noisy = [RungPoint(d, 2.0 * d ** 0.9 * math.exp(e), 0.3) for d, e in
             zip(RUNG_SAMPLES, [0.3, -0.3, 0.2, -0.2, 0.3, -0.3, 0.1, 0.0])]
    p = predict_b_crit(noisy, BUDGET, prior=prior)
    assert p.source == "combined" and 0.5 < p.exponent < p.rungs_exponent


def test_the_transfer_sd_caps_how_far_even_exact_rungs_move_the_exponent():
    # rungs' SE → 0: the share is τ₀² / (τ₀² + TRANSFER_SD²), not 1
    prior = PRIORS["mccandlish"]
    p = predict_b_crit(power_rungs(0.9, sd=1e-9), BUDGET, sd_floor=0.0)
    share = prior.sd ** 2 / (prior.sd ** 2 + TRANSFER_SD ** 2)
    assert p.rung_share == pytest.approx(share, rel=1e-4)
    assert p.exponent == pytest.approx(share * 0.9 + (1 - share) * prior.mean, rel=1e-4)


def test_the_anchor_is_the_rungs_geometric_centroid():
    # B = 2·D^0.5 with one rung 20 % high: the anchor is the (equal-weight) mean of log D and of log B, and the
    # prediction is carried from there, not from the last rung
    rungs = [RungPoint(d, 2.0 * d ** 0.5, 0.05) for d in (1000, 2000, 4000, 8000)]
    rungs[-1] = RungPoint(8000, 2.0 * 8000 ** 0.5 * 1.2, 0.05)
    p = predict_b_crit(rungs, BUDGET)
    centroid_d = math.exp(sum(math.log(d) for d in (1000, 2000, 4000, 8000)) / 4)  # 2828.4
    centroid_b = math.exp(sum(math.log(r.b_crit) for r in rungs) / 4)
    assert p.anchor_samples == pytest.approx(centroid_d) and centroid_d == pytest.approx(2828.43, rel=1e-5)
    assert p.anchor_b_crit == pytest.approx(centroid_b) and centroid_b == pytest.approx(2.0 * centroid_d ** 0.5 * 1.2 ** 0.25)
    assert p.b_crit == pytest.approx(centroid_b * (BUDGET / centroid_d) ** p.exponent)
    # the last rung's anchor would have carried all its 20 % with it
    assert p.b_crit < rungs[-1].b_crit * (BUDGET / 8000) ** p.exponent
    # weighted: a rung known 10× better pulls the centroid to itself
    weighted = predict_b_crit([RungPoint(1000, 63.2, 0.05), RungPoint(2000, 89.4, 0.5), RungPoint(4000, 126.5, 0.5)],
                              BUDGET)
    assert math.log(weighted.anchor_samples) == pytest.approx((100 * math.log(1000) + math.log(2000) + math.log(4000))
                                                              / 102)
    # rungs past the budget are left out, not an anchor
    beyond = predict_b_crit([*rungs, RungPoint(32768, 500.0, 0.05)], BUDGET)
    assert beyond.anchor_samples == pytest.approx(centroid_d) and "past the budget" in beyond.left_out[0].reason


def test_rungs_off_the_batch_grid_or_in_the_warmup_are_left_out_with_their_reason():
    rungs = [RungPoint(256, 40.0), RungPoint(384, 3.0), RungPoint(512, 6.0), RungPoint(1024, 9.0),
             RungPoint(2048, 13.0), RungPoint(4096, 200.0), RungPoint(8192, 25.0)]
    used, left = screen_rungs(rungs, BUDGET, batch_grid=(8, 128), rungs_from=300)
    assert [r.samples for r in used] == [1024, 2048, 8192]
    assert [(r.samples, r.reason.split(" ")[0]) for r in left] == [(256, "inside"), (384, "B_crit"), (512, "B_crit"),
                                                                   (4096, "B_crit")]
    assert "below the smallest batch trained (8)" in left[1].reason and "above the largest" in left[3].reason
    p = predict_b_crit(rungs, BUDGET, batch_grid=(8, 128), rungs_from=300)
    assert p.rungs_used == 3 and len(p.left_out) == 4
    assert p.anchor_samples == pytest.approx(math.exp((math.log(1024) + math.log(2048) + math.log(8192)) / 3))
    assert any("4 of 7 rung(s) left out" in w for w in p.warnings)
    # without the grid, every rung is used
    assert predict_b_crit(rungs, BUDGET).rungs_used == 7
    # all off the grid: no anchor
    off = predict_b_crit([RungPoint(1024, 3.0), RungPoint(2048, 5.0)], BUDGET, batch_grid=(8, 128))
    assert off.b_crit is None and "inside the batch grid [8, 128]" in off.refusal and len(off.left_out) == 2


def test_flat_rungs_warn_and_rising_ones_do_not():
    flat = [RungPoint(d, 15.0 * math.exp(e)) for d, e in zip(RUNG_SAMPLES, [0.05, -0.05, 0.02, -0.03, 0.0, 0.04,
                                                                            -0.04, 0.01])]
    p = predict_b_crit(flat, BUDGET, batch_grid=(8, 128))
    assert p.rungs_exponent + 1.6449 * p.rungs_exponent_se <= FLAT_EXPONENT
    flat_lines = [w for w in p.warnings if w.startswith("flat or falling rungs")]
    assert len(flat_lines) == 1 and "\n" not in flat_lines[0]
    falling = [RungPoint(d, 40.0 * (d / 384) ** -0.3) for d in RUNG_SAMPLES]
    assert any(w.startswith("flat or falling") for w in predict_b_crit(falling, BUDGET).warnings)
    rising = predict_b_crit(power_rungs(0.5), BUDGET)
    assert not any(w.startswith("flat") for w in rising.warnings) and rising.warnings == []


def test_the_literature_band_carries_the_same_anchor_with_the_definitions_exponents():
    rungs = power_rungs(0.5)
    for definition in ("mccandlish", "b_opt"):
        p = predict_b_crit(rungs, BUDGET, definition=definition)
        low, high = literature_range(definition)
        ratio = BUDGET / p.anchor_samples
        assert p.literature_band[0] == pytest.approx(p.anchor_b_crit * ratio ** low)
        assert p.literature_band[1] == pytest.approx(p.anchor_b_crit * ratio ** high)
    assert literature_range("mccandlish") == pytest.approx((0.452, 0.68), abs=1e-3)


def test_wild_but_finite_rungs_give_finite_figures_or_a_refusal():
    import json

    for rungs, budget in [([RungPoint(1e-300, 1e300), RungPoint(1e-200, 1e-300), RungPoint(1e300, 1e-300)], 1e308),
                          ([RungPoint(1.0, 1e308, 0.05), RungPoint(2.0, 1e-308, 0.05), RungPoint(3.0, 5.0)], 1e308),
                          ([RungPoint(1e-5, 1e-5)], 1e300)]:
        p = predict_b_crit(rungs, budget)
        if p.b_crit is None:
            assert p.refusal.startswith(("out of range", "no anchor"))
        else:
            assert all(math.isfinite(v) for v in (p.b_crit, *p.interval_90, *p.literature_band))
        json.dumps(p.to_dict(), allow_nan=False)


def test_refuses_only_without_an_anchor():
    assert predict_b_crit([], BUDGET).refusal.startswith("no anchor")
    bad = [RungPoint(1024, math.nan), RungPoint(2048, -1.0), RungPoint(20000, 40.0)]
    p = predict_b_crit(bad, BUDGET)
    assert p.b_crit is None and p.interval_90 is None and "no anchor" in p.refusal
    two = predict_b_crit([RungPoint(1024, 20.0), RungPoint(2048, 30.0)], BUDGET)
    assert two.source == "prior" and two.b_crit is not None


def test_rungs_without_errors_are_read_from_their_scatter():
    rungs = [RungPoint(d, 2.0 * d ** 0.7 * math.exp(e)) for d, e in
             zip(RUNG_SAMPLES, [0.02, -0.02, 0.01, -0.01, 0.02, -0.02, 0.01, 0.0])]
    p = predict_b_crit(rungs, BUDGET)
    assert p.rungs_exponent == pytest.approx(0.7, abs=0.03) and p.source == "combined"
    lo, hi = p.interval_90
    assert lo < p.b_crit < hi and set(p.interval_parts) == {"exponent", "anchor", "at_budget", "model"}


def test_from_interval_reads_the_sd_of_the_log():
    r = RungPoint.from_interval(1000, 50.0, 50.0 / math.e, 50.0 * math.e)
    assert r.sd == pytest.approx(1 / 1.959964)
    assert RungPoint.from_interval(1000, 50.0, None, 60.0).sd is None
    assert RungPoint.from_interval(1000, 50.0, 49.99, 50.01).sd == pytest.approx(0.05)
