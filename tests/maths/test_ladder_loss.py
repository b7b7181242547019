"""The ladder's prediction through the loss (``maths.ladder_loss``): B_crit = c·L^k over the rungs, at the smallest
batch's loss at D extrapolated from its last octave, on inputs whose answers are known by construction."""

import math

import pytest

from cbs_ray.maths.ladder import Rung, fit_ladder, rung_readings
from cbs_ray.maths.ladder_loss import extrapolate_loss, fit_through_loss
from cbs_ray.maths.tradeoff import fit_tradeoff

BATCHES = (8, 16, 32, 64, 128)
RUNGS = [384 * 2 ** (j / 2) for j in range(7)]           # 384 … 3072, √2 apart
STOP = RUNGS[-1]
BUDGET = 16384.0


def loss(d):
    return 5 * d ** -0.6                                 # L = 5·D^−0.6 exactly


def b_crit_of(target):
    return 3 * target ** -1.2                            # B_crit = 3·L^−1.2 exactly


def exact_rung(d, sd=0.1):
    """A rung at ``d`` whose batches' steps follow S(B) = S_min·(1 + B_crit/B) exactly (McCandlish et al. 2018), with
    B_crit = 3·L(d)^−1.2 and a 95 % interval of ±1.96·sd in log."""
    b = b_crit_of(loss(d))
    steps = {batch: d / (8 + b) * (1 + b / batch) for batch in BATCHES}
    assert fit_tradeoff(list(BATCHES), [steps[x] for x in BATCHES], bootstrap=0).b_crit == pytest.approx(b)
    return Rung(d, loss(d), steps, b, (b * math.exp(-1.959964 * sd), b * math.exp(1.959964 * sd)), None, None)


def reference(seeds=2, scale=(1.0, 1.0)):
    """The smallest batch's curves, √2 apart up to the stop, exact (each seed's loss × its ``scale``)."""
    return [[(d, loss(d) * scale[s]) for d in RUNGS] for s in range(seeds)]


def test_the_prediction_through_the_loss_is_c_times_the_extrapolated_loss_to_the_k():
    rungs = [exact_rung(d) for d in RUNGS]
    power_law = fit_ladder(rungs, budget_samples=BUDGET, bootstrap=200)
    fit = fit_through_loss(rungs, reference(), power_law=power_law, stop_samples=STOP, bootstrap=200)
    truth = 3 * (5 * BUDGET ** -0.6) ** -1.2             # 3·(5·D^−0.6)^−1.2 = 3·5^−1.2·D^0.72
    assert fit.refusal is None
    assert fit.constant == pytest.approx(3.0) and fit.exponent == pytest.approx(-1.2)
    assert fit.loss.loss_at_budget == pytest.approx(loss(BUDGET)) and fit.loss.exponent == pytest.approx(-0.6)
    assert fit.loss.samples == tuple(d for d in RUNGS if d >= STOP / 2)   # the last octave: 3 evaluations
    assert fit.b_crit == pytest.approx(truth)
    assert fit.interval_90[0] < truth < fit.interval_90[1] and fit.exponent_ci[0] < -1.2 < fit.exponent_ci[1]
    assert fit.fit_p_value == pytest.approx(1.0) and fit.rungs_used == tuple(RUNGS)


def test_the_loss_is_extrapolated_from_its_last_octave_anchored_at_the_stop():
    # a loss that falls as s^−0.3 before the octave and as s^−0.6 in it: only the octave's law is extrapolated
    xs = [256, 512, 1024, 1408, 2048, 2944, 3200]
    ys = [9.9, 7.7, 5.5] + [2.0 * (x / 1408) ** -0.6 for x in xs[3:]]
    got = extrapolate_loss(xs, ys, stop_samples=3200, budget_samples=16384)
    assert got.refusal is None and got.samples == (2048, 2944, 3200)
    assert got.exponent == pytest.approx(-0.6) and (got.anchor_samples, got.anchor_loss) == (3200, ys[-1])
    assert got.loss_at_budget == pytest.approx(2.0 * (16384 / 1408) ** -0.6)


def test_a_loss_that_cannot_be_extrapolated_is_a_one_line_refusal():
    two = extrapolate_loss([1024, 2048, 3200], [3.0, 2.0, 1.5], stop_samples=3200, budget_samples=16384)
    assert two.loss_at_budget is None and "needs 3" in two.refusal and "\n" not in two.refusal
    flat = extrapolate_loss([1600, 2048, 3200], [1.0, 1.0, 1.01], stop_samples=3200, budget_samples=16384)
    assert flat.loss_at_budget is None and "does not fall" in flat.refusal
    rungs = [exact_rung(d) for d in RUNGS]
    power_law = fit_ladder(rungs, budget_samples=BUDGET, bootstrap=100)
    short = [[(d, v) for d, v in run if d != RUNGS[-2]] for run in reference()]  # 2 points left in the octave
    fit = fit_through_loss(rungs, short, power_law=power_law, stop_samples=STOP, bootstrap=100)
    assert fit.b_crit is None and fit.interval_90 is None and fit.refusal == extrapolate_loss(
        *zip(*short[0]), stop_samples=STOP, budget_samples=BUDGET).refusal


def test_the_power_laws_refusals_still_apply():
    rungs = [exact_rung(d) for d in RUNGS[:2]]          # 2 rungs
    power_law = fit_ladder(rungs, budget_samples=BUDGET, bootstrap=100)
    fit = fit_through_loss(rungs, reference(), power_law=power_law, stop_samples=STOP, bootstrap=100)
    assert fit.b_crit is None and fit.refusal == power_law.refusal and "at least 3" in fit.refusal


def test_a_poor_fit_against_the_loss_is_reported_not_refused():
    # B_crit grows with D as a clean power law, but the rungs' target losses zigzag: no power of L fits
    rungs = []
    for j, d in enumerate(RUNGS):
        r = exact_rung(d, sd=0.02)
        rungs.append(Rung(d, r.target_loss * (1.5 if j % 2 else 1.0), r.steps_by_batch, r.b_crit, r.b_crit_ci, None,
                          None))
    power_law = fit_ladder(rungs, budget_samples=BUDGET, bootstrap=100)
    assert power_law.refusal is None
    fit = fit_through_loss(rungs, reference(), power_law=power_law, stop_samples=STOP, bootstrap=100)
    assert fit.refusal is None and fit.fit_p_value < 0.01 and fit.b_crit is not None


def test_the_seeds_of_the_reference_widen_the_interval():
    """L(D)'s own uncertainty enters through resampling the smallest batch's seeds: two seeds whose losses differ by
    10 % widen the interval that two identical seeds give, and leave the point prediction (their mean's) where it is
    up to the mean's shift."""
    rungs = [exact_rung(d) for d in RUNGS]
    power_law = fit_ladder(rungs, budget_samples=BUDGET, bootstrap=300)
    same = fit_through_loss(rungs, reference(), power_law=power_law, stop_samples=STOP, bootstrap=300)
    apart = fit_through_loss(rungs, reference(scale=(0.9, 1.1)), power_law=power_law, stop_samples=STOP,
                             bootstrap=300)
    assert apart.b_crit == pytest.approx(same.b_crit)   # the mean of 0.9 and 1.1 is 1
    assert apart.interval_90[1] - apart.interval_90[0] > same.interval_90[1] - same.interval_90[0]


def test_the_same_resamples_as_the_power_law_on_rungs_read_off_curves():
    """On rungs read off learning curves (the batch resamples), the loss path's interval holds the truth too."""
    from helpers.ladder_curves import loss_at

    evals = sorted({round(128 * 2 ** (k / 2) / 64) * 64 for k in range(11)})   # 128 … 4096, √2 apart
    curves = {b: [[(e, loss_at(b, e, reference=8, c=2.0, gamma=0.5)) for e in evals]] for b in (8, 16, 32, 64)}
    stop = 2048
    rungs = [r for r in rung_readings(curves, bootstrap=200) if 256 <= r.samples_seen <= stop]
    power_law = fit_ladder(rungs, budget_samples=8192, bootstrap=200)
    fit = fit_through_loss(rungs, [[p for p in curves[8][0] if p[0] <= stop]], power_law=power_law,
                           stop_samples=stop, bootstrap=200)
    truth = 2.0 * 8192 ** 0.5                            # B_crit = 2·D^0.5 and L = 6·D^−0.2: B_crit = 2·(L/6)^−2.5
    assert fit.exponent == pytest.approx(-2.5, abs=0.3)
    assert fit.interval_90[0] < truth < fit.interval_90[1] and abs(math.log2(fit.b_crit / truth)) < 0.1
