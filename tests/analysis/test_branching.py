"""Branch mode's maths and report (``methods.branch.reading*``, ``methods.branch.report``) on hand-built histories,
the known answer beside each input. No Ray, no torch."""

import base64
import json
import math

import pandas as pd
import pytest

from cbs_ray.analysis.decision import DISAGREE
from cbs_ray.methods.branch.reading import schedule_alpha, summarize_branches
from cbs_ray.methods.branch.reading_points import critical_batch_over_training
from cbs_ray.methods.branch.reading_schedule import (
    control_batches,
    recommend_schedule,
    samples_trained,
    schedule_in_tokens,
    schedule_steps,
    schedule_total_steps,
    t_quantile_975,
    validate_schedule,
)
from cbs_ray.methods.branch.reading_trend import b_simple_over_training, trend
from cbs_ray.methods.branch.report import headline, write_branch_report
from cbs_ray.methods.branch.trainer_snippets import trainer_snippets
from helpers.branch_history import (
    BUDGET,
    LOSSES,
    META,
    TOL,
    TRUNK,
    TRUNK_LOSS,
    WINDOW,
    branch_rows,
    history,
    trunk_rows,
)


def points(losses=LOSSES, tokens=None, **kw):
    frame = kw.pop("frame", None)
    return critical_batch_over_training(history(losses, **kw) if frame is None else frame, trunk_batch=TRUNK,
                                        window_samples=WINDOW, tolerance=TOL, tokens_per_sample=tokens)


def test_every_smaller_batch_is_a_reference_not_the_trunk_alone():
    p1024, p2048, p4096 = points()
    assert [p.samples_seen for p in (p1024, p2048, p4096)] == [1024, 2048, 4096]
    assert (p1024.batch_size, p1024.bound, p1024.interval) == (32, None, [32, 64])
    b64 = p1024.outcome(64)
    assert (b64.reference_batch, b64.reference_loss) == (32, 3.95) and not b64.recovers
    assert b64.excess == pytest.approx(0.02)  # 3.97 − 3.95; against the trunk it would be −0.03 (a pass)
    assert p1024.outcome(32).reference_batch == TRUNK and p1024.outcome(32).excess == pytest.approx(-0.05)
    assert p1024.trunk_loss == 4.0 and p1024.threshold == pytest.approx(4.01) and p1024.trunk_loss_at_start == 5.0
    assert p1024.resolvable and p1024.trunk_improvement == pytest.approx(1.0)
    assert (p2048.batch_size, p2048.bound, p2048.interval) == (128, "lower", [128, None])
    assert (p4096.batch_size, p4096.bound, p4096.interval) == (64, None, [64, 128])
    # Deciding comparisons at 1024: B=32 lies 0.06 under the line, B=64 0.01 over it: not a close call.
    assert p1024.margin == pytest.approx(0.01) and not p1024.close_call
    record = p1024.to_dict()
    assert record["interval"] == [32, 64] and record["resolvable"] is True
    assert record["loss_by_batch"] == {"16": 4.0, "32": 3.95, "64": 3.97, "128": 4.5}
    assert "tokens_seen" not in record


def test_the_paper_takes_the_largest_batch_that_passes():
    # B=64 fails at 1024 but B=128 at 3.955 lies within ε of every smaller batch (best 3.95): k* = 128,
    # and the failure below it is said.
    p = points({**LOSSES, (1024, 128): 3.955})[0]
    assert (p.batch_size, p.bound) == (128, "lower")
    assert "B=64 failed below k*·B=128" in p.note


def test_relative_tolerance_is_an_option():
    frame = history({**LOSSES, (1024, 64): 3.97})
    p = critical_batch_over_training(frame, trunk_batch=TRUNK, window_samples=WINDOW, tolerance=0.01,
                                     relative=True)[0]
    # 3.97 / 3.95 − 1 = 0.51 %: within 1 % relative (0.0395 nats), so B=64 passes; 4.5 fails.
    assert p.batch_size == 64 and p.outcome(64).excess == pytest.approx(3.97 / 3.95 - 1)
    assert p.threshold == pytest.approx(4.04)


def test_upper_bound_when_even_the_smallest_branch_fails():
    p = points({**LOSSES, (1024, 32): 4.2, (1024, 64): 4.3})[0]  # +0.2 over the trunk -> CBS ≤ ... [16, 32]
    assert (p.batch_size, p.bound, p.interval) == (TRUNK, "upper", [TRUNK, 32])


def test_a_point_the_trunk_barely_moves_over_is_not_resolvable():
    trunk = {**TRUNK_LOSS, 4096: 3.215}  # 3.215 -> 3.2 over the window from 4096: 0.015 < 2ε
    p = points(trunk=trunk)[2]
    assert not p.resolvable and p.trunk_improvement == pytest.approx(0.015)
    assert "not resolvable" in p.note
    # Neither the schedule nor the trend reads it.
    assert recommend_schedule([p], trunk_batch=TRUNK, largest_batch=128) == [[0, TRUNK]]
    t = trend(points(trunk=trunk))
    assert [d.to_samples for d in t.decreases] == []  # the 4096 point (64) no longer shows as a decrease


def test_diverged_and_missing_branches():
    p = points({**LOSSES, (1024, 64): None})[0]
    assert p.outcome(64).status == "diverged" and p.outcome(64).diverged == 1 and p.batch_size == 32
    assert "B=64: diverged" in p.note
    # B=128's reference skips the diverged B=64: the best of 16 and 32 (3.95).
    p = points({**LOSSES, (1024, 64): None, (1024, 128): 3.955})[0]
    assert p.outcome(128).reference_batch == 32 and p.batch_size == 128
    # A run that stopped early without diverging has not finished: missing; above k* it makes CBS a lower bound.
    frame = history()
    frame.loc[frame["trial_id"] == "b1024_64_0.5_0", "samples_seen"] = 1536
    p = points(frame=frame)[0]
    assert (p.batch_size, p.bound) == (32, "lower") and p.outcome(64).status == "missing"


def test_missing_trunk_report_leaves_the_point_undetermined():
    frame = history()
    frame = frame[~((frame["role"] == "trunk") & (frame["samples_seen"] == 2048))]
    p = points(frame=frame)[0]
    assert p.trunk_loss is None and "not determined" in p.note and p.interval is None
    assert recommend_schedule([p], trunk_batch=TRUNK, largest_batch=128) == [[0, 16]]


def test_close_call_without_repeats_is_half_the_tolerance():
    p = points({**LOSSES, (1024, 64): 3.962})[0]  # 0.012 over 3.95: fails, 0.002 from the line (< 0.005)
    assert p.batch_size == 32 and p.margin == pytest.approx(0.002) and p.close_call


def test_repeats_give_each_comparison_a_standard_error():
    # Three seeds per batch at 1024; the trunk's continuations at B=16 (seeds 1, 2) join the trunk's 4.0.
    losses = {(1024, 16): [None, 4.02, 3.98], (1024, 32): [3.95, 3.96, 3.94], (1024, 64): [3.96, 3.98, 3.97],
              (1024, 128): [4.5, 4.6, 4.4]}
    rows = [r for r in branch_rows(losses) if not (r["batch_size"] == 16 and r["seed_offset"] == 0)]
    frame = pd.DataFrame(trunk_rows() + rows)
    p = points(frame=frame)[0]
    trunk = p.outcome(TRUNK)
    assert trunk.loss == pytest.approx(4.0) and trunk.seeds == 3
    assert trunk.standard_error == pytest.approx(0.02 / math.sqrt(3))  # sd of (4.0, 4.02, 3.98) = 0.02
    b32, b64 = p.outcome(32), p.outcome(64)
    assert b32.loss == pytest.approx(3.95) and b32.standard_error == pytest.approx(0.01 / math.sqrt(3))
    # B=64: 3.97 − 3.95 = 0.02, fails; the difference's standard error √(2 · 0.01²/3) = 0.00816, two of them
    # 0.0163 > |0.02 − 0.01|: a close call (without repeats it would not be: 0.01 ≥ ε/2).
    assert not b64.recovers and b64.close and p.close_call and p.batch_size == 32


def test_the_best_alpha_counts_where_several_were_tried():
    losses = {(1024, 32): (3.99, 3.95), (1024, 64): (3.955, 4.1), (1024, 128): (4.5, 4.6)}
    p = points(losses, alphas=(0.5, 1.0))[0]
    assert p.outcome(32).alpha == 1.0 and p.outcome(32).loss == 3.95 and p.outcome(32).runs == 2
    assert p.outcome(64).alpha == 0.5 and p.batch_size == 64
    assert schedule_alpha([p], [0.5, 1.0], fallback=0.75) == 0.5  # one win each: the gentler LR
    assert schedule_alpha([p], [0.5], fallback=0.75) == 0.5  # one alpha: that one
    assert schedule_alpha([], [0.5, 1.0], fallback=0.75) == 0.75


def test_schedule_doubles_once_per_crossing_by_default():
    p1024, p2048, p4096 = points()  # CBS 32, ≥ 128, 64
    # The paper's rule: 16 -> 32 at 1024 (CBS 32 reaches twice 16), -> 64 at 2048 (CBS ≥ 128), and at 4096 CBS 64
    # does not reach twice 64: one doubling per crossing, never two at one checkpoint.
    assert recommend_schedule([p1024, p2048, p4096], trunk_batch=16, largest_batch=128) == \
        [[0, 16], [1024, 32], [2048, 64]]
    upper = points({**LOSSES, (1024, 32): 4.2, (1024, 64): 4.3})[0]  # CBS ≤ 16 at 1024: the trunk's batch stays
    assert recommend_schedule([upper, p4096], trunk_batch=16, largest_batch=128) == [[0, 16], [4096, 32]]
    with pytest.raises(ValueError, match="unknown schedule rule"):
        recommend_schedule([p1024], trunk_batch=16, largest_batch=128, rule="twice")


def test_schedule_while_safe_doubles_again_where_each_doubling_is_safe():
    p1024, p2048, p4096 = points()  # CBS 32, ≥ 128, 64
    safe = dict(trunk_batch=16, rule="while_safe")
    # At 2048 CBS ≥ 128: 32 -> 64 (the paper's one doubling), -> 128 as B=128 itself passed, not close.
    assert recommend_schedule([p1024, p2048, p4096], largest_batch=128, **safe) == [[0, 16], [1024, 32], [2048, 128]]
    # B=128 at 2048 within ε/2 of the line (3.508: 0.008 over 3.5, 0.002 from it): one doubling only, to 64;
    # the later CBS 64 does not double again (it needs 128).
    close = points({**LOSSES, (2048, 128): 3.508})
    assert recommend_schedule(close, largest_batch=128, **safe) == [[0, 16], [1024, 32], [2048, 64]]
    assert recommend_schedule([p1024, p2048, p4096], largest_batch=64, **safe) == [[0, 16], [1024, 32], [2048, 64]]
    upper = points({**LOSSES, (1024, 32): 4.2, (1024, 64): 4.3})[0]  # CBS ≤ 16 at 1024: the trunk's batch stays
    # At 4096 CBS 64: 16 -> 32, and -> 64 as B=64 passed there (0.005 over 3.20, not within ε/2 of the line).
    assert recommend_schedule([upper, p4096], largest_batch=128, **safe) == [[0, 16], [4096, 64]]


def test_schedule_in_tokens_and_steps():
    schedule = [[0, 16], [1024, 32], [2048, 128]]
    assert schedule_in_tokens(schedule, 128) == [[0, 2048], [131072, 4096], [262144, 16384]]
    # 1024 samples at 16 = 64 steps; 1024 more at 32 = 32 steps -> 128 starts at step 96.
    assert schedule_steps(schedule) == [[0, 16], [64, 32], [96, 128]]
    assert schedule_total_steps(schedule, 8192) == 96 + 6144 // 128  # 144
    assert schedule_total_steps([[0, 16]], 8192) == 512


def test_trend_flags_a_decrease_beyond_the_noise():
    t = trend(points())
    assert t.verdict == "decreasing" and t.holds is False
    (d,) = t.decreases
    assert (d.from_batch, d.from_samples, d.to_batch, d.to_samples, d.within_noise) == (128, 2048, 64, 4096, False)
    assert "decreases from 128 at 2048 samples to 64 at 4096 samples, beyond its noise" in t.text
    assert "tokens" in trend(points(), tokens_per_sample=128).text


def test_trend_decrease_within_the_noise_is_said_not_hidden():
    # B=128 fails at 4096 by 0.013 over 3.20: 0.003 from the line, within ε/2: the dip may be noise.
    t = trend(points({**LOSSES, (4096, 128): 3.213}))
    assert t.verdict == "decreases_within_noise" and t.holds is True and t.decreases[0].within_noise
    assert "dips from 128 at 2048 samples to 64 at 4096 samples, within its noise" in t.text


def test_trend_increasing_flat_undetermined():
    up = {**LOSSES, (1024, 32): 4.2, (1024, 64): 4.3, (4096, 128): 3.205}  # ≤ 16, ≥ 128, ≥ 128
    t = trend(points(up))
    assert t.verdict == "increasing" and "grows from ≤ 16 at 1024 samples to ≥ 128 at 4096 samples" in t.text
    flat = {**up, (1024, 32): 4.0, (1024, 64): 4.0, (1024, 128): 4.0}
    t = trend(points(flat))
    assert t.verdict == "flat" and "the largest branch batch recovers at every checkpoint" in t.text
    assert trend(points()[:1]).verdict == "undetermined"


def test_b_simple_over_training_leaves_nan_out():
    assert b_simple_over_training(history()) == [[2048, 20.0], [3072, 30.0], [4096, 40.0], [5120, 50.0],
                                                 [6144, 60.0], [7168, 70.0], [8192, 80.0]]


# ---- the schedule's validation ---------------------------------------------------------------------------

SCHEDULE = [[0, 16], [1024, 32], [2048, 128]]  # 144 steps over 8192 samples; budget / 144 = 56.9


def test_controls_are_small_large_and_the_iso_step_bracket():
    assert control_batches(SCHEDULE, BUDGET) == [("small", 16), ("large", 128), ("iso_steps", 32), ("iso_steps", 64),
                                                 ("above", 256)]
    # iso exactly a power of two: one iso batch; one equal to small or large is not repeated.
    assert control_batches([[0, 16], [4096, 32]], BUDGET) == [("small", 16), ("large", 32), ("above", 64)]
    # no control above the training set (or the budget)
    assert control_batches([[0, 16], [4096, 32]], BUDGET, largest_allowed=63) == [("small", 16), ("large", 32)]
    assert "above" not in dict(control_batches([[0, 16], [4096, 8192]], BUDGET))  # 16384 > the budget


def run(control, batch, seed, loss, steps):
    return {"trial_id": f"{control}{batch}_{seed}", "role": "schedule", "start_samples": 0, "samples_seen": BUDGET,
            "steps": steps, "batch_size": batch, "alpha": 0.5, "eval_loss": loss, "diverged": False,
            "control": control, "seed_offset": seed}


def validation_rows(iso64=(3.03, 3.04, 3.05), schedule=(3.00, 3.02, 3.01)):
    rows = [run("schedule", 128, s, v, 144) for s, v in enumerate(schedule)]
    rows += [run("small", 16, s, v, 512) for s, v in ((1, 3.02), (2, 3.01))]  # seed 0: the trunk (3.0)
    rows += [run("large", 128, s, v, 64) for s, v in enumerate((3.10, 3.12, 3.11))]
    rows += [run("iso_steps", 32, s, v, 256) for s, v in enumerate((3.00, 3.01, 3.02))]
    rows += [run("iso_steps", 64, s, v, 128) for s, v in enumerate(iso64)]
    return rows


def test_t_quantiles():
    assert t_quantile_975(2) == pytest.approx(4.303, abs=1e-3) and t_quantile_975(30) == pytest.approx(2.042, abs=1e-3)
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_validation_of_an_older_experiment_counts_the_trunk_as_seed_0():
    # validation_rows: the layout before issue 37, the schedule on seeds 0-2 and the small batch's seed 0 the trunk.
    v = validate_schedule(history(schedule=validation_rows()), budget_samples=BUDGET)
    by = {(c.name, c.batch_size): c for c in v.controls}
    small = by[("small", 16)]
    assert not v.held_out and "not held out" in v.text
    assert small.seeds == 3 and small.final_losses == {0: 3.0, 1: 3.02, 2: 3.01}  # the trunk is seed 0
    assert small.final_loss_mean == pytest.approx(3.01)
    half = 4.302653 * 0.01 / math.sqrt(3)  # t(0.975, 2) · sd 0.01 / √3
    assert small.final_loss_ci95 == pytest.approx([3.01 - half, 3.01 + half])
    assert by[("schedule", None)].steps == 144 and by[("large", 128)].steps == 64
    assert v.frontier == [[64, pytest.approx(3.11)], [128, pytest.approx(3.04)], [256, pytest.approx(3.01)],
                          [512, pytest.approx(3.01)]]
    # Paired with the small batch: differences 0, 0, 0 -> non-inferior at ε = 0.01.
    assert v.non_inferiority.holds is True and v.non_inferiority.difference_mean == pytest.approx(0.0)
    # 144 steps between B=64 (128) and B=32 (256): per seed the frontier is 3.03 − 0.03 w + 0.01 s, the schedule
    # 0.025 below on average, sd 0.01: below beyond the noise.
    w = math.log2(144 / 128)
    assert v.below_frontier.between == [64, 32]
    assert v.below_frontier.frontier_loss == pytest.approx((1 - w) * 3.04 + w * 3.01)
    assert v.below_frontier.difference_mean == pytest.approx(3.01 - ((1 - w) * 3.04 + w * 3.01))
    assert v.below_frontier.holds is True
    # No fixed batch but the small one is non-inferior to it (B=32: differences 0, −0.01, +0.01, bound 0.017).
    assert v.steps_saved.against_batch == 16 and v.steps_saved.fraction == pytest.approx(1 - 144 / 512)
    assert v.steps_saved.interval == pytest.approx([1 - 144 / 256, 1 - 144 / 512])
    assert v.steps_saved_vs_small == pytest.approx(1 - 144 / 512)
    assert "Below the fixed-batch frontier: yes" in v.text and "Non-inferior to the small batch: yes" in v.text
    assert v.criterion.startswith("paired by validation seed")
    assert [round(p["steps"]) for p in v.frontier_band][:3] == [64, 69, 75] and \
        any(p["steps"] == 144 for p in v.frontier_band)
    # Iso-loss steps, seed by seed (the schedule: 144 steps), the frontier read through PCHIP in log2(steps).
    # Seed 0: 3.00 is B=32's loss (256 steps; B=16's 3.00 at 512 is no lower): saved 1 − 144/256 = 0.4375.
    # Seed 1: the Pareto points (6, 3.12), (7, 3.04), (8, 3.01) in log2-steps; secants −0.08, −0.03; Fritsch–Carlson
    # slopes 2/(1/−0.08 + 1/−0.03) = −0.043636 at 7 and (3·(−0.03) + 0.08)/2 = −0.005 at 8; the Hermite cubic on
    # [7, 8] reaches 3.02 at t = 0.50521: 128 · 2^0.50521 = 181.674 steps, saved 1 − 144/181.674 = 0.20737 (the
    # chord's 2/3 of the way, 203.19 steps, would say 0.29129). Seed 2: 3.01 is B=16's (512 steps): saved 0.71875.
    # Mean 0.45454.
    iso = v.iso_loss_steps
    assert iso.per_seed == {0: pytest.approx(0.4375), 1: pytest.approx(0.20737, abs=1e-5),
                            2: pytest.approx(0.71875)}
    assert iso.saved_fraction == pytest.approx(0.45454, abs=1e-5) and iso.seeds == 3 and iso.censored == {}
    assert iso.frontier_batches == [16, 32, 64, 128] and iso.schedule_steps == 144
    assert iso.interpolation == "pchip" and iso.bound is None
    # The primary test leads (issue 60): against the best fixed batch, the lowest mean final loss: B=16 and B=32
    # tie at 3.01 and the smaller wins; against B=16 the differences are 0, 0, 0: mean 0, bound 0 < ε = 0.01.
    # Every control trained at the trunk's configuration: the best is not a tuned one, and the text says so.
    vs = v.non_inferiority_vs_tuned
    assert vs.best_fixed_batch == 16 and vs.difference == pytest.approx(0.0) and vs.holds is True
    assert vs.tuned is False
    assert v.text.startswith("Non-inferior to the best fixed batch (not every control tuned")
    assert "Iso-loss steps: the schedule reaches its final loss in 144 optimizer steps, 45% fewer" in v.text
    assert v.frontier_controls.batches == [16, 32, 64, 128] and v.frontier_controls.interpolation == "pchip"
    # B=64 reaching 3.00 in 128 steps, fewer than the schedule's 144: not below.
    v = validate_schedule(history(schedule=validation_rows(iso64=(3.00, 3.00, 3.00))), budget_samples=BUDGET)
    assert v.below_frontier.holds is False and "Below the fixed-batch frontier: no" in v.text
    # A schedule 0.05 nats worse than the small batch: not non-inferior.
    v = validate_schedule(history(schedule=validation_rows(schedule=(3.05, 3.06, 3.07))), budget_samples=BUDGET)
    assert v.non_inferiority.holds is False and "Non-inferior to the small batch: no" in v.text
    assert validate_schedule(history()) is None


def test_validation_on_held_out_seeds_leaves_the_trunk_out():
    rows = [run("schedule", 128, s, v, 144) for s, v in ((1, 3.00), (2, 3.02), (3, 3.01))]
    rows += [run("small", 16, s, v, 512) for s, v in ((1, 3.01), (2, 3.02), (3, 3.00))]
    v = validate_schedule(history(schedule=rows), budget_samples=BUDGET)
    assert v.held_out and v.control("small").final_losses == {1: 3.01, 2: 3.02, 3: 3.00}  # not the trunk's 3.0
    assert v.non_inferiority.differences == pytest.approx({1: -0.01, 2: 0.0, 3: 0.01})
    # A relative margin: ε × the small batch's mean loss.
    v = validate_schedule(history(schedule=rows), budget_samples=BUDGET, margin=0.01, relative=True)
    assert v.non_inferiority.margin == pytest.approx(0.0301)


def test_samples_trained_per_role():
    # trunk 8192; 3 checkpoints × 3 batches of 1024 = 9216; the validation: 14 runs of 8192 (3 schedule,
    # 2 small (the trunk is the third), 3 large, 3 + 3 iso-steps).
    assert samples_trained(history(schedule=validation_rows())) == {"trunk": 8192, "branch": 9216,
                                                                    "schedule": 14 * 8192}


def test_summary_json_carries_the_issue_keys():
    d = json.loads(summarize_branches(history(schedule=validation_rows()), META).to_json())
    assert d["method"] == "branch"
    assert [(r["samples_seen"], r["batch_size"], r["bound"], r["interval"], r["resolvable"])
            for r in d["critical_batch_over_training"]] == \
        [(1024, 32, None, [32, 64], True), (2048, 128, "lower", [128, None], True), (4096, 64, None, [64, 128], True)]
    assert d["batch_size_schedule"] == SCHEDULE and d["schedule_alpha"] == 0.5
    sv = d["schedule_validation"]
    assert sv["below_frontier"]["holds"] is True and len(sv["frontier"]) == 4
    assert set(sv["non_inferiority"]) >= {"difference_mean", "upper_95", "margin", "holds"}
    assert set(sv["steps_saved"]) >= {"fraction", "interval", "against_batch"}
    assert sv["frontier_band"] and set(sv["frontier_band"][0]) == {"steps", "loss", "standard_error", "low", "high"}
    assert sv["non_inferiority"]["margin"] == TOL
    assert set(sv["iso_loss_steps"]) >= {"saved_fraction", "interval_95", "seeds", "frontier_batches"}
    schedule = next(c for c in sv["controls"] if c["name"] == "schedule")
    assert schedule["batch_size"] is None and schedule["seeds"] == 3 and len(schedule["final_loss_ci95"]) == 2
    assert schedule["final_losses"] == {"0": 3.0, "1": 3.02, "2": 3.01}  # by seed
    assert {c["name"] for c in sv["controls"]} == {"schedule", "small", "large", "iso_steps"}
    assert d["trunk"] == {"batch_size": 16, "peak_lr": 1e-3, "final_eval_loss": 3.0, "samples_seen": 8192, "steps": 512}
    assert len(d["branches"]) == 9 and d["deviations"] == META["deviations"]
    # Cost: trunk + branches 8192 + 9216 against a from-scratch search of (3 × 1 + 1) × 8192 = 32768.
    assert d["scratch_samples"] == 32768 and d["cost_ratio"] == pytest.approx(17408 / 32768)


def test_an_old_experiment_reads_its_tolerance_as_relative():
    old = {k: v for k, v in META.items() if k != "tolerance_relative"}
    s = summarize_branches(history(), old)
    assert s.tolerance_relative is True


def test_summary_with_a_token_budget():
    d = summarize_branches(history(), {**META, "tokens_per_sample": 128}).to_dict()
    assert d["batch_size_schedule_tokens"] == [[0, 2048], [131072, 4096], [262144, 16384]]
    assert d["budget_tokens"] == BUDGET * 128 and d["critical_batch_over_training"][0]["tokens_seen"] == 1024 * 128
    assert d["schedule_validation"] is None


def test_iso_loss_text_says_a_loss_and_a_bound():
    from cbs_ray.methods.branch.reading_schedule import IsoLossSteps, iso_loss_text

    lost = IsoLossSteps(-0.25, [-0.4, -0.1], 3, [8, 16, 32], 640, {1: -0.2, 2: -0.3, 3: -0.25}, {3: "below"})
    text = iso_loss_text(lost)
    assert "640 optimizer steps, 25% more than the fixed-batch frontier" in text and "saved -25%" in text
    assert "on 1 seed(s) the schedule's loss was above the highest of the frontier, the figure there a bound (at most)" in text
    assert ". " not in text  # the report splits the verdicts at ". "
    assert iso_loss_text(IsoLossSteps(None, None, 0, [], 640, {}, {})).startswith("Iso-loss steps: not read")


def test_fitted_and_seesaw_rules_read_the_summary_s_points():
    # CBS 32 at 1024, 128 at 2048, 64 at 4096. The cap (lowest CBS from the latest checkpoint on): 32 from 1024,
    # 64 from 2048. fitted: log2 points (10, 5), (11, 7), (12, 6): b = 0.5, a = √2; one batch below the fit:
    # 1024: 45.25 / 2 -> 16 (32 needs s = (64/√2)² = 2048); 2048: 64 / 2 -> 32 (64 needs 8192: the budget)
    fitted = summarize_branches(history(), {**META, "schedule_rule": "fitted"})
    assert fitted.batch_size_schedule == [[0, 16], [2048, 32]] and fitted.schedule_rule == "fitted"
    # seesaw: the trunk's linear decay over 512 steps, no warmup, halves at steps 256, 384, 448 (samples 4096,
    # 6144, 7168): 32 at 4096, 64 at 6144, 128 held at 64 by the cap
    seesaw = summarize_branches(history(), {**META, "schedule_rule": "seesaw", "lr_decay": "linear"})
    assert seesaw.batch_size_schedule == [[0, 16], [4096, 32], [6144, 64]]
    with pytest.raises(ValueError, match="needs the budget"):
        recommend_schedule(points(), trunk_batch=TRUNK, largest_batch=128, rule="fitted")


def test_seesaw_starts_from_the_first_resolvable_cbs_or_the_tuned_batch():
    # issue 60, the same halvings (samples 4096, 6144, 7168) and caps (32 from 1024, 64 from 2048 on).
    # cbs: the first resolvable checkpoint (1024) reads CBS 32: start at 32; 4096 -> 64; 6144 would be 128 > 64
    seesaw = {**META, "schedule_rule": "seesaw", "lr_decay": "linear"}
    cbs = summarize_branches(history(), {**seesaw, "seesaw_start": "cbs"})
    assert cbs.batch_size_schedule == [[0, 32], [4096, 64]]
    # tuned: the best tuned fixed batch recorded when the validation was decided (64): it starts there and the
    # cap (64) holds every doubling; without a record it is read as cbs
    tuned = summarize_branches(history(), {**seesaw, "seesaw_start": "tuned", "schedule": {"start_batch": 64}})
    assert tuned.batch_size_schedule == [[0, 64]]
    assert summarize_branches(history(), {**seesaw, "seesaw_start": "tuned"}).batch_size_schedule == \
        cbs.batch_size_schedule
    # the late switch at 0.8 of the budget: int(0.8 · 8192) = 6553, up to a whole 128 (the largest batch): 6656.
    # From the trunk's 16 (an experiment that recorded no seesaw_start); the halvings at 4096 and 6144 are both
    # taken there: 16 -> 64, the cap
    late = summarize_branches(history(), {**seesaw, "seesaw_first_doubling": 0.8})
    assert late.batch_size_schedule == [[0, 16], [6656, 64]]


def test_summary_rejects_another_metric():
    with pytest.raises(ValueError, match="eval_loss"):
        summarize_branches(history(), {**META, "metric": "accuracy"})


def test_the_ema_training_loss_is_the_paper_s_alternative():
    frame = history()
    frame["train_loss_ema"] = frame["eval_loss"] + 0.5  # a constant offset: the same readings
    frame.loc[frame["trial_id"] == "b1024_64_0.5_0", "train_loss_ema"] = 3.9 + 0.5  # B=64 now passes
    p = critical_batch_over_training(frame, trunk_batch=TRUNK, window_samples=WINDOW, tolerance=TOL,
                                     loss="train_ema")[0]
    assert p.batch_size == 64 and p.trunk_loss == pytest.approx(4.5)
    assert points(frame=frame)[0].batch_size == 32  # the eval loss says otherwise
    # The summary reads both, side by side, whichever branch.loss chose.
    for loss in ("eval", "train_ema"):
        compared = summarize_branches(frame, {**META, "loss": loss}).loss_comparison
        assert [(c.samples_seen, c.eval.batch_size, c.train_ema.batch_size, c.agree)
                for c in compared] == [(1024, 32, 64, False), (2048, 128, 128, True), (4096, 64, 64, True)]
    assert summarize_branches(history(), META).loss_comparison is None  # no training loss recorded


def test_the_schedule_rule_is_recorded_and_an_older_experiment_keeps_its_own():
    assert summarize_branches(history(), {**META, "schedule_rule": "once_per_crossing"}).batch_size_schedule == \
        [[0, 16], [1024, 32], [2048, 64]]
    assert summarize_branches(history(), META).batch_size_schedule == SCHEDULE  # no key: while_safe, as it ran


def test_trainer_snippets_follow_the_schedule():
    s = summarize_branches(history(), META)
    snippets = trainer_snippets(s)
    olmo = snippets["OLMo-core (BatchSizeSchedulerCallback)"][1]
    assert "batch_sizes=[16 * SEQUENCE_LENGTH, 32 * SEQUENCE_LENGTH, 128 * SEQUENCE_LENGTH]" in olmo
    assert "units: tokens" in olmo
    levanter = snippets["Levanter (trainer.train_batch_size)"][1]
    assert "- start: 64" in levanter and "- start: 96" in levanter and "num_train_steps: 144" in levanter
    megatron, note = snippets["Megatron-LM (--step-batch-size-schedule)"][1:]
    assert megatron == '--step-batch-size-schedule "0:16 1024:32 2048:128" --train-samples 8192\n'
    assert "in samples" in note and "1.41" in note
    tokens = trainer_snippets(summarize_branches(history(), {**META, "tokens_per_sample": 128}))
    assert "batch_sizes=[2048, 4096, 16384]" in tokens["OLMo-core (BatchSizeSchedulerCallback)"][1]
    assert tokens["Megatron-LM (--step-batch-size-schedule)"][1] == \
        '--step-batch-size-schedule "0:16 131072:32 262144:128" --train-samples 8192 --seq-length 128\n'


def test_report_writes_every_file(tmp_path):
    frame = history(schedule=validation_rows())
    s = summarize_branches(frame, META)
    page = write_branch_report(s, frame, tmp_path)
    assert page == tmp_path / "report.html"
    for name in ("summary.json", "history.csv", "cbs_over_training.png", "schedule_frontier.png", "report.md",
                 "report.html"):
        assert (tmp_path / name).stat().st_size > 0, name
    md = (tmp_path / "report.md").read_text()
    assert "decreases from 128 at 2048 samples to 64 at 4096 samples" in md
    assert "--step-batch-size-schedule" in md and "Criterion (fixed before the runs)" in md
    assert "## Deviations from the paper" in md and "EMA train loss" in md
    html = (tmp_path / "report.html").read_text()
    for png in ("cbs_over_training.png", "schedule_frontier.png"):
        assert base64.b64encode((tmp_path / png).read_bytes()).decode()[:200] in html  # embedded
    decision, *lines = headline(s)  # the decision first (issue 59): the schedule
    assert decision.startswith("Decision: train with the batch schedule 16 from 0")
    assert "ε = 0.01 nats absolute" in lines[0]
    assert lines[1].startswith("  at 1024 samples: CBS 32, interval [32, 64] (trunk loss 4 at +1024")
    assert "B=64 +0.0200 vs B=32 (fails)" in lines[1]
    assert any(line.startswith("Recommended batch-size schedule: 16 from 0, then 32 from 1024, then 128 from 2048")
               and "LR × 1.41 per doubling" in line for line in lines)
    assert any(line.startswith("Deviation from the paper:") for line in lines)


def test_report_says_the_verdicts_the_paired_differences_and_draws_the_band(tmp_path, monkeypatch):
    import cbs_ray.methods.branch.report as branch_report

    frame = history(schedule=validation_rows())
    frame["train_loss_ema"] = frame["eval_loss"]
    s = summarize_branches(frame, META)
    drawn, save = {}, branch_report.save_figure

    def keep(fig, path):
        ax = fig.axes[0]
        drawn.setdefault("labels", []).append([t.get_text() for t in ax.get_legend().get_texts()])
        drawn.setdefault("titles", []).append(ax.get_title())
        return save(fig, path)

    monkeypatch.setattr(branch_report, "save_figure", keep)
    write_branch_report(s, frame, tmp_path)
    frontier_legend = drawn["labels"][1]
    assert "fixed-batch frontier (interpolated in log-steps)" in frontier_legend and "its 95 % band" in frontier_legend
    assert drawn["titles"][1].startswith("The schedule below the fixed-batch frontier (paired: -0.02")
    md = (tmp_path / "report.md").read_text()
    assert "- Non-inferior to the small batch: yes — paired difference +0.0000 nats" in md
    assert "- Below the fixed-batch frontier: yes — at its 144 steps the frontier (B=64–32" in md
    assert "- Secondary, thresholded: steps saved against B=16 (512 steps" in md and "72%, interval [44%, 72%]" in md
    # the schedule against the best fixed batch leads the validation's section (issue 60), iso-loss steps next
    section = md[md.index("## Schedule validation"):]
    assert section.index("- Non-inferior to the best fixed batch") < section.index("- Iso-loss steps: the schedule "
                                                                                   "reaches its final loss in 144") \
        < section.index("- Non-inferior to the small batch")
    # The paired table: seed 1's schedule 3.02, small 3.02, frontier 3.04 − 0.03 w.
    w = math.log2(144 / 128)
    row = next(r for r in branch_report.paired_rows(s) if r["seed"] == 1)
    assert row["schedule_minus_small"] == "+0.0000"
    assert row["frontier_at_schedule_steps"] == pytest.approx(3.04 - 0.03 * w)
    assert "| seed | schedule | small | schedule_minus_small |" in md
    assert "## CBS(t) on the eval loss and on the training loss (EMA)" in md
    html = (tmp_path / "report.html").read_text()
    assert "<li>Below the fixed-batch frontier: yes" in html and "schedule_minus_frontier" in html


def test_report_with_tokens_and_no_branches(tmp_path):
    s = summarize_branches(history(), {**META, "tokens_per_sample": 128})
    write_branch_report(s, history(), tmp_path / "tokens")
    assert "tokens" in (tmp_path / "tokens" / "report.md").read_text()
    assert not (tmp_path / "tokens" / "schedule_frontier.png").exists()  # no validation: no frontier
    trunk_only = pd.DataFrame(trunk_rows())
    s = summarize_branches(trunk_only, META)
    assert s.critical_batch_over_training == () and s.batch_size_schedule == [[0, 16]]
    assert s.trend.verdict == "undetermined"
    write_branch_report(s, trunk_only, tmp_path / "empty")
    assert (tmp_path / "empty" / "report.html").exists()
    assert "no branch reported" in "\n".join(headline(s))


def test_the_plot_shows_the_points_that_are_not_resolvable(tmp_path, monkeypatch):
    # The 4096 point (the trunk moves 0.015 < 2ε) is drawn greyed with its own legend entry, not left out.
    import cbs_ray.methods.branch.report as branch_report

    drawn = {}

    def keep(fig, path):
        drawn["labels"] = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        drawn["lines"] = {line.get_label(): list(line.get_xdata()) for line in fig.axes[0].get_lines()}
        return path

    monkeypatch.setattr(branch_report, "save_figure", keep)
    s = summarize_branches(history(trunk={**TRUNK_LOSS, 4096: 3.215}), META)
    branch_report.cbs_over_training_plot(s, tmp_path / "p.png")
    label = "not resolvable (the trunk moved < 2ε)"
    assert label in drawn["labels"] and drawn["lines"][label] == [4096]
    branch_report.cbs_over_training_plot(summarize_branches(history(), META), tmp_path / "q.png")
    assert label not in drawn["labels"]  # every point resolvable: no such entry


def test_a_schedule_that_loses_to_the_best_tuned_fixed_batch_hands_the_decision_to_that_batch():
    # Every control tuned (source scratch); the schedule (3.05, 3.06, 3.07) is 0.05 worse than B=16 and B=32 (mean
    # 3.01 each: the tie goes to the smaller, B=16, whose seed 0 is the trunk's 3.0 in this layout).
    configs = [{"batch_size": b, "alpha": 0.5, "warmup_fraction": 0.1, "source": "scratch"} for b in (16, 32, 64, 128)]
    rows = [{**r, "peak_lr": 1e-3 * (r["batch_size"] / 16) ** 0.5} for r in validation_rows(schedule=(3.05, 3.06, 3.07))]
    meta = {**META, "warmup_fraction": 0.1,
            "schedule": {"margin": 0.01, "controls_from": "scratch", "control_configurations": configs}}
    s = summarize_branches(history(schedule=rows), meta)
    vs = s.schedule_validation.non_inferiority_vs_tuned
    assert (vs.tuned, vs.best_fixed_batch, vs.holds) == (True, 16, False)
    d = s.decision
    # B=16 at its reported peak LR; warmup 0.1 of its 8192 / 16 = 512 steps = 51 steps (whole) of 16 samples.
    assert (d.batch_size, d.lr, d.schedule, d.confidence) == (16, pytest.approx(1e-3), None, DISAGREE)
    assert d.warmup_samples == 51 * 16 and "best tuned fixed batch 16" in d.because
