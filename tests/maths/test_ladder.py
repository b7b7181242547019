"""The ladder predictor: rungs read off learning curves, the power-law fit of B_crit in D, its refusals,
the baselines and the closed-form laws, on inputs whose answers are known by construction."""

import math

import numpy as np
import pytest

from cbs_ray.maths.ladder import (
    BORROWED_EXPONENTS,
    Rung,
    borrowed_exponent,
    chi2_sf,
    closed_form_laws,
    fit_ladder,
    fit_power_law,
    log2_error,
    no_extrapolation,
    recommend_batch,
    rung_readings,
)

B0 = 16
BATCHES = [16, 32, 64, 128, 256, 512, 1024]
BUDGET = 2.0 ** 24
REF_POINTS = [BUDGET / 64 * 2 ** j for j in range(6)]     # D/64 … D/2


def synthetic_curves(gamma, b_crit_at_budget, *, exact=True, seeds=1, noise=0.0, rng=None):
    """Curves whose steps-to-target follow S(B) = S_min(D) + E_min(D)/B with B_crit(D) = c·D^gamma.

    Reference loss L(D) = 100·D^-0.3. Batch B needs E_B(D) = D·(B + B_crit(D)) / (B0 + B_crit(D)) samples to
    reach L(D): E_B0(D) = D, and E_B / B = S_min + E_min / B with S_min = D / (B0 + B_crit), E_min = B_crit·S_min.
    ``exact``: batch B is evaluated at E_B(D_j) itself, so every S(B) is exact. Otherwise every batch but the
    reference is evaluated on a shared 2^(1/2) cadence up to 4·D, its loss there found by inverting E_B
    (bisection in log D), and samples_to_target interpolates between evaluations."""
    c = b_crit_at_budget / BUDGET ** gamma

    def needed(b, d):
        return d * (b + c * d ** gamma) / (B0 + c * d ** gamma)

    def loss_at(b, x):
        lo, hi = math.log(x / 100), math.log(x)
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if needed(b, math.exp(mid)) < x else (lo, mid)
        return 100 * math.exp(lo) ** -0.3

    out = {}
    for b in BATCHES:
        if exact or b == B0:
            points = [(needed(b, d), 100 * d ** -0.3) for d in REF_POINTS]
        else:
            points = [(x, loss_at(b, x)) for x in (BUDGET / 64 * 2 ** (k / 2) for k in range(17))]
        out[b] = [[(s, loss * (1 + noise * rng.standard_normal()) if noise else loss) for s, loss in points]
                  for _ in range(seeds)]
    return out


def rung(d, b_crit, sd=0.1, overhead=None):
    """A hand-built rung whose 95 % interval is b_crit·exp(±1.96·sd): its log B_crit has sd ``sd``."""
    ci = None if b_crit is None else (b_crit * math.exp(-1.959964 * sd), b_crit * math.exp(1.959964 * sd))
    return Rung(d, 1.0, {}, b_crit, ci, overhead, None)


def test_rung_readings_by_hand():
    # S(B) = 50 + 1600/B at the rung D = 2400: S = 150, 100, 75 (E = 2400, 3200, 4800 samples), B_crit = 32.
    curves = {
        16: [[(1200, 3.1), (2400, 2.1), (3600, 1.1)], [(1200, 2.9), (2400, 1.9), (3600, 0.9)]],  # mean 3, 2, 1
        # the crossings land on evaluations (interpolation is log–log: between them it would not be linear)
        32: [[(2400, 2.5), (3200, 2.1), (4000, 1.7)], [(2400, 2.3), (3200, 1.9), (4000, 1.5)]],  # 2.0 at 3200
        64: [[(4000, 2.1), (4800, 2.0), (8000, 1.6), (6000, 0.5)],
             [(4000, 2.1), (4800, 2.0), (8000, 1.6)]],  # 2.0 at 4800; 6000 unshared
    }
    first, second, third = rung_readings(curves, bootstrap=200)
    assert [r.samples_seen for r in (first, second, third)] == [1200, 2400, 3600]
    assert second.target_loss == pytest.approx(2.0)
    assert second.steps_by_batch == pytest.approx({16: 150, 32: 100, 64: 75})
    assert second.b_crit == pytest.approx(32)
    assert second.b_crit_ci is None   # 3 batch sizes: too few resamples with 3 distinct ones for a CI
    assert second.overhead_20pct == 16          # 32 needs 3200 > 1.2 · 2400 samples
    # target 3.0: 32 and 64 are already below it at their first evaluation (2400, 4000 samples): left-censored,
    # a bound (they needed at most 75 and 62.5 steps), never a crossing, so no B_crit at that rung
    assert first.steps_by_batch[16] == pytest.approx(75)
    assert math.isnan(first.steps_by_batch[32]) and math.isnan(first.steps_by_batch[64])
    assert first.censored == (32, 64) and first.b_crit is None and second.censored == ()
    # target 1.0: only 16 reaches it (the unshared 0.5 at 6000 is not in the mean)
    assert third.steps_by_batch[16] == pytest.approx(225)
    assert math.isnan(third.steps_by_batch[32]) and math.isnan(third.steps_by_batch[64])
    assert third.b_crit is None and "at least 3" in third.reason
    assert rung_readings(curves, reference_batch=32, bootstrap=0)[0].samples_seen == 2400


def test_the_exponents_standard_error_by_hand():
    """Three points on y = x (slope 1) at x = 1, e, e², each log y with sd 0.1: SE = 0.1 / √Σ(ln x − 1)² = 0.1 / √2;
    points off the line scale it up by √(χ²/(n − 2)), never down."""
    from cbs_ray.maths.ladder import power_law_exponent_se

    x = [1.0, math.e, math.e ** 2]
    assert power_law_exponent_se(x, x, [100.0] * 3) == pytest.approx(0.1 / math.sqrt(2))
    # log y = 0, 1.2, 2: fitted slope 1, residuals -0.0667, 0.1333, -0.0667; χ² = 100·0.02667 = 2.667 on 1 dof
    scattered = power_law_exponent_se(x, [1.0, math.exp(1.2), math.e ** 2], [100.0] * 3)
    assert scattered == pytest.approx(0.1 / math.sqrt(2) * math.sqrt(100 * (2 * 0.2 ** 2 / 9 + 0.4 ** 2 / 9)))
    assert math.isnan(power_law_exponent_se(x[:2], x[:2], [1.0, 1.0]))


def test_a_run_below_the_target_at_its_first_report_is_censored():
    """samples_to_target: reached at the first report is a bound; with censor_first it is NaN, never a crossing."""
    from cbs_ray.maths.tradeoff import samples_to_target

    assert samples_to_target([100, 200], [1.0, 0.5], 2.0, mode="min") == 100            # the old credit
    assert math.isnan(samples_to_target([100, 200], [1.0, 0.5], 2.0, mode="min", censor_first=True))
    assert samples_to_target([100, 200], [3.0, 1.0], 2.0, mode="min", censor_first=True) == 150  # a crossing


def test_interpolation_between_evaluations_is_log_log():
    # 2.4 at 2400 and 1.6 at 4000: the target 2.0 is reached at exp(ln 2400 + t (ln 4000 − ln 2400)),
    # t = ln(2/2.4) / ln(1.6/2.4) = 0.4497: 3019.7 samples (a straight line in samples would say 3200).
    from cbs_ray.maths.ladder import _samples_to_target_loglog

    assert _samples_to_target_loglog([2400, 4000], [2.4, 1.6], 2.0) == pytest.approx(3019.73, abs=0.01)
    # a power law L = 6 D^-0.2 between the points is crossed where it is: exact
    assert _samples_to_target_loglog([1000, 4000], [6 * 1000 ** -0.2, 6 * 4000 ** -0.2], 6 * 2000 ** -0.2) == \
        pytest.approx(2000)


@pytest.mark.parametrize("gamma, truth", [(0.5, 512.0), (0.3, 256.0)])
def test_exact_synthetic_ladder_recovers_the_exponent(gamma, truth):
    rungs = rung_readings(synthetic_curves(gamma, truth), bootstrap=200)
    c = truth / BUDGET ** gamma                     # γ = 0.5: B_crit = 90.5, …, 362 over D/32 … D/2
    # at the first rung every other batch's first evaluation is at the target itself: left-censored (it may have
    # got there sooner), so no B_crit there
    assert rungs[0].b_crit is None and rungs[0].censored == tuple(BATCHES[1:])
    assert [r.b_crit for r in rungs[1:]] == pytest.approx([c * d ** gamma for d in REF_POINTS[1:]], rel=1e-6)
    fit = fit_ladder(rungs, budget_samples=BUDGET)
    assert fit.refusal is None and len(fit.rungs_used) == 5
    # on the line (χ² = 0), every rung's sd floored at 0.05: SE = 0.05 / √Σ(ln D_j − mean)², the D_j a factor 2
    # apart: Σ = (ln 2)² · (4 + 1 + 0 + 1 + 4) = 4.805, SE = 0.02281
    assert fit.exponent_se == pytest.approx(0.05 / math.sqrt(10 * math.log(2) ** 2), rel=1e-6)
    assert fit.exponent == pytest.approx(gamma, abs=1e-6) and fit.constant == pytest.approx(c, rel=1e-5)
    assert fit.exponent_ci[0] < gamma < fit.exponent_ci[1]
    assert fit.b_crit == pytest.approx(truth, rel=1e-5)
    assert fit.interval_90[0] < truth < fit.interval_90[1]


@pytest.mark.parametrize("gamma, truth", [(0.5, 512.0), (0.3, 256.0)])
def test_interpolated_synthetic_ladder_recovers_the_exponent(gamma, truth):
    # Shared cadence: interpolating between evaluations costs ~1 % on each B_crit (γ = 0.5: 63.4 for 64).
    fit = fit_ladder(rung_readings(synthetic_curves(gamma, truth, exact=False), bootstrap=200), budget_samples=BUDGET)
    assert fit.refusal is None
    assert fit.exponent_ci[0] < gamma < fit.exponent_ci[1]
    assert fit.interval_90[0] < truth < fit.interval_90[1]


@pytest.mark.parametrize("seed", [0, 1])
def test_noisy_two_seed_ladder_recovers_the_exponent(seed):
    # 1 % noise on every evaluation's loss, 2 seeds: B_crit per rung off by up to ~3 % (124.7 for 128).
    curves = synthetic_curves(0.5, 512.0, exact=False, seeds=2, noise=0.01, rng=np.random.default_rng(seed))
    fit = fit_ladder(rung_readings(curves, bootstrap=200), budget_samples=BUDGET)
    assert fit.refusal is None and fit.fit_p_value > 0.01
    assert fit.exponent_ci[0] < 0.5 < fit.exponent_ci[1]
    assert fit.interval_90[0] < 512 < fit.interval_90[1]
    assert recommend_batch(fit.interval_90[0]) == 256        # low end ~450


def test_hand_built_rungs_exact_power_law_and_exclusions():
    d = [1000.0 * 4 ** j for j in range(4)]                 # B_crit = 2·D^0.5: 63.2, 126.5, 253, 506
    rungs = [rung(x, 2 * x ** 0.5, overhead=o) for x, o in zip(d, [16, 32, 64, 128])]
    rungs += [Rung(1e6, 1.0, {}, 2000.0, (1500.0, math.inf), None, None),  # unbounded end: excluded
              Rung(2e6, 1.0, {}, 2800.0, None, None, None),                # no interval: excluded
              Rung(3e6, 1.0, {}, None, None, None, "no tradeoff")]
    fit = fit_ladder(rungs, budget_samples=256000.0)
    assert fit.rungs_used == tuple(d)
    assert fit.exponent == pytest.approx(0.5) and fit.constant == pytest.approx(2.0)
    assert fit.b_crit == pytest.approx(1011.93, rel=1e-5)   # 2 · 256000^0.5
    assert fit.interval_90[0] < fit.b_crit < fit.interval_90[1] and fit.exponent_ci[0] > 0
    assert fit.fit_p_value == pytest.approx(1.0)
    # 20 %-rule batches 16 … 128 over D = 1000 … 64000 = 16 · (D/1000)^0.5: 256 at 256000
    assert fit.overhead_exponent == pytest.approx(0.5) and fit.overhead_constant == pytest.approx(16 / 1000 ** 0.5)
    assert fit.overhead_20pct == pytest.approx(256)


def test_refuses_with_fewer_than_three_rungs():
    fit = fit_ladder([rung(1000, 50), rung(2000, 70), rung(4000, None)], budget_samples=1e5)
    assert fit.b_crit is None and fit.interval_90 is None
    assert "at least 3" in fit.refusal and "got 2" in fit.refusal


def test_refuses_a_flat_b_crit():
    # γ = 0: B_crit = 100 · 5 % noise, each rung's sd 0.1; the exponent's 90 % interval straddles 0.
    d = [1000.0 * 2 ** j for j in range(6)]
    b = 100 * np.exp(np.random.default_rng(0).normal(0, 0.05, 6))
    fit = fit_ladder([rung(x, y) for x, y in zip(d, b)], budget_samples=64000.0)
    assert fit.b_crit is None and "includes 0" in fit.refusal and "grow with data" in fit.refusal
    assert fit.exponent_ci[0] < 0 < fit.exponent_ci[1]


def test_refuses_a_b_crit_that_falls_with_data():
    # B_crit = 150 · (D/1000)^-0.7: a clean fit whose exponent's interval lies below 0. Extrapolated it would say
    # 150 · 16^-0.7 = 21 at 16000; a falling power law is not extrapolated
    # (docs/benchmarks-archive.md#issue-27, run 3).
    d = [1000.0 * 2 ** (j / 2) for j in range(5)]
    fit = fit_ladder([rung(x, 150 * (x / 1000) ** -0.7) for x in d], budget_samples=16000.0)
    assert fit.b_crit is None and fit.interval_90 is None and "falls with data" in fit.refusal
    assert fit.exponent == pytest.approx(-0.7) and fit.exponent_ci[1] < 0


def test_refuses_a_poor_fit():
    # V-shaped B_crit (400 … 100 … 400) with 5 % errors: chi-square ~ 500 on 4 degrees of freedom.
    d = [1000.0 * 2 ** j for j in range(6)]
    fit = fit_ladder([rung(x, y, sd=0.05) for x, y in zip(d, [400, 200, 100, 100, 200, 400])], budget_samples=1e5)
    assert fit.b_crit is None and fit.refusal.startswith("poor fit") and fit.fit_p_value < 0.01


def test_chi2_survival_function_known_values():
    # the 5 % critical values of χ² for 1 … 5 degrees of freedom
    for x, dof in [(3.841459, 1), (5.991465, 2), (7.814728, 3), (9.487729, 4), (11.070498, 5)]:
        assert chi2_sf(x, dof) == pytest.approx(0.05, rel=1e-5)
    assert chi2_sf(0.0, 3) == 1.0 and chi2_sf(0.0, 2) == 1.0


def test_fit_power_law():
    assert fit_power_law([1, 2, 4], [3, 6, 12]) == pytest.approx((3.0, 1.0))
    # a zero weight drops the outlier at 8; a non-positive y is dropped too
    assert fit_power_law([1, 2, 4, 8, 16], [3, 6, 12, 100, 0], [1, 1, 1, 0, 1]) == pytest.approx((3.0, 1.0))
    with pytest.raises(ValueError):
        fit_power_law([5, 5], [1, 2])


def test_recommend_batch():
    assert recommend_batch(468.8) == 256 and recommend_batch(512.0) == 512 and recommend_batch(511.9) == 256
    assert recommend_batch(1.5) == 1 and recommend_batch(0.3) == 1
    with pytest.raises(ValueError):
        recommend_batch(math.inf)


def test_baselines_and_log2_error():
    rungs = [rung(1000, 100), rung(4000, 200), rung(8000, None)]   # the largest finite rung: 200 at D = 4000
    assert no_extrapolation(rungs) == 200
    assert borrowed_exponent(rungs, 16000, 0.5) == pytest.approx(400)   # 200 · 4^0.5
    assert borrowed_exponent(rungs, 4000 * 2 ** 10, BORROWED_EXPONENTS[1]) == pytest.approx(200 * 2 ** 4.7)
    assert no_extrapolation([rung(1000, None)]) is None and borrowed_exponent([], 1e5, 0.5) is None
    assert BORROWED_EXPONENTS == (0.383, 0.47, 0.571)
    assert log2_error(400, 100) == 2.0 and log2_error(100, 400) == 2.0 and log2_error(7, 7) == 0.0


def test_closed_form_laws():
    assert closed_form_laws(1e9) == pytest.approx({"step_law": 79878.15})             # 0.58 · 1e9^0.571
    laws = closed_form_laws(1e9, compute_flops=1e20)
    assert laws["deepseek_llm"] == pytest.approx(1.017145e6, rel=1e-6)                # 0.292 · 1e20^0.3271


def test_loss_curve_fit_recovers_a_known_curve():
    from cbs_ray.maths.ladder import fit_loss_curve

    # L = 3 + 40 · s^-0.5 at 8 points, two seeds ±0.001 apart: floor, scale, exponent come back (the exponent grid
    # steps 2.2 %), the crossing of 3.7 (s = (40 / 0.7)² = 3265) within 1 %.
    xs = [400 * 2 ** (k / 2) for k in range(8)]
    points = [(x, 3 + 40 * x ** -0.5 + e) for x in xs for e in (0.001, -0.001)]
    curve = fit_loss_curve(points)
    assert curve.exponent == pytest.approx(0.5, rel=0.025)
    assert curve.floor == pytest.approx(3.0, abs=0.05) and curve.first == 400 and curve.last == xs[-1]
    assert curve.samples_to(3.7) == pytest.approx(3265.3, rel=0.01)
    assert math.isnan(curve.samples_to(5.0)) and curve.censored(5.0)  # below at the first point: a bound only
    assert math.isnan(curve.samples_to(3.55))                # at 5289, past the last point (4525): not read
    # a flat or rising curve is its mean: below it from the start, above it never
    flat = fit_loss_curve([(x, 2.0 + 0.001 * k) for k, x in enumerate(xs)])
    assert flat.scale == 0 and flat.censored(2.1) and math.isnan(flat.samples_to(2.1))
    assert math.isnan(flat.samples_to(1.9)) and not flat.censored(1.9)
    assert fit_loss_curve([(400, 3.0), (800, 2.0), (800, 2.1), (1600, math.nan)]) is None  # 2 distinct points


def test_fitted_curves_read_the_noisy_ladder():
    # 1 % noise, 2 seeds, as the interpolated test, read through fitted curves: the exponent and the prediction
    # come back within their intervals; the rungs' targets are the reference's fitted losses
    from cbs_ray.maths.ladder import fit_loss_curve

    for seed in (0, 1):
        curves = synthetic_curves(0.5, 512.0, exact=False, seeds=2, noise=0.01, rng=np.random.default_rng(seed))
        rungs = rung_readings(curves, bootstrap=200, curve_model="fit")
        ref = fit_loss_curve([pt for run in curves[B0] for pt in run])
        assert [r.target_loss for r in rungs] == pytest.approx([ref.loss(d) for d in REF_POINTS])
        fit = fit_ladder(rungs, budget_samples=BUDGET)
        assert fit.refusal is None
        assert fit.exponent_ci[0] < 0.5 < fit.exponent_ci[1]
        assert fit.interval_90[0] < 512 < fit.interval_90[1]
    # rungs before fit_from are not read, and the points before it are not fitted
    assert [r.samples_seen for r in rung_readings(curves, bootstrap=0, curve_model="fit", fit_from=REF_POINTS[2])] \
        == REF_POINTS[2:]
    with pytest.raises(ValueError, match="curve_model"):
        rung_readings(curves, curve_model="spline")


def test_the_intervals_resample_the_batches_when_the_rungs_carry_their_steps():
    """Rungs read off the same runs (``rung_readings``' rungs carry every batch's steps) get their intervals from
    resampling the batches, the same at every rung: on exact curves (B_crit = c·D^0.5) the truth is inside and the
    exponent's interval is narrower than the same rungs' with their steps dropped, whose errors are drawn
    independently rung by rung."""
    import dataclasses

    rungs = rung_readings(synthetic_curves(0.5, 512.0), bootstrap=200)
    joint = fit_ladder(rungs, budget_samples=BUDGET, bootstrap=300)
    apart = fit_ladder([dataclasses.replace(r, steps_by_batch={}) for r in rungs], budget_samples=BUDGET,
                       bootstrap=300)
    assert joint.exponent_ci[0] < 0.5 < joint.exponent_ci[1] and joint.interval_90[0] < 512 < joint.interval_90[1]
    assert joint.exponent_ci[1] - joint.exponent_ci[0] < apart.exponent_ci[1] - apart.exponent_ci[0]


def test_steps_counted_by_their_lr_read_the_true_b_crit_across_unequal_warmups():
    """Issue 36: batches whose warmups differ in steps (a floor of 8 for the larger ones), each progressing by the LR
    it trained at. Loss = 5·(τ / (1 + 64/B))^−0.4 with τ its LR-weighted steps, so to any loss S_eff(B) =
    K·(1 + 64/B): B_crit = 64 at every rung, exactly, in LR-weighted steps. Counting every step as one reads the
    warmups' deficits (10, 5, 3.5, 3.5, 3.5 steps) as a change of B_crit at the early rungs."""
    from cbs_ray.maths.lr_schedule import lr_weighted_steps

    warmups = {8: 20, 16: 10, 32: 8, 64: 8, 128: 8}

    def loss(b, samples):
        return 5.0 * (lr_weighted_steps(samples / b, warmups[b]) / (1 + 64 / b)) ** -0.4

    grid = [256 * 2 ** (k / 32) for k in range(32 * 8 + 1)]  # dense: log-log interpolation all but exact
    rungs_at = [384, 768, 1536, 3072]
    curves = {b: [[(s, loss(b, s)) for s in (rungs_at if b == 8 else grid)]] for b in warmups}
    weighted = rung_readings(curves, bootstrap=0, warmup_steps=warmups)
    plain = rung_readings(curves, bootstrap=0)
    assert [r.samples_seen for r in weighted] == rungs_at
    for r in weighted:
        assert r.b_crit == pytest.approx(64, rel=0.01)
        assert r.steps_by_batch[8] == pytest.approx(r.samples_seen / 8 - 9.5)
    assert plain[0].b_crit < 0.8 * 64  # the deficits read as a smaller B_crit at the first rung …
    assert plain[-1].b_crit == pytest.approx(64, rel=0.15)  # … less so as the runs grow longer: a spurious exponent
    assert plain[-1].b_crit > plain[0].b_crit * 1.15
