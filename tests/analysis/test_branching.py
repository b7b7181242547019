"""Branch mode's maths and report (``cbs_ray.branching``, ``cbs_ray.branch_report``) on hand-built histories,
the known answer beside each input. No Ray, no torch."""

import base64
import json
import math

import pandas as pd
import pytest

from cbs_ray.report.branch import headline, trainer_snippets, write_branch_report
from cbs_ray.analysis.branch_points import critical_batch_over_training
from cbs_ray.analysis.branch_schedule import recommend_schedule, samples_trained, schedule_in_tokens, schedule_steps, schedule_total_steps, validate_schedule
from cbs_ray.analysis.branch_summary import summarize_branches
from cbs_ray.analysis.branch_trend import b_simple_over_training, trend

TRUNK, BUDGET, WINDOW, TOL = 16, 8192, 1024, 0.01
CHECKPOINTS = (1024, 2048, 4096)
BATCHES = (32, 64, 128)
ALPHAS = (0.5, 1.0)
# The trunk's eval loss at every 1024 samples; it is 4.0 at 2048, 3.5 at 3072 and 3.2 at 5120: the losses
# the branches from 1024, 2048 and 4096 must reach (threshold × 1.01: 4.04, 3.535, 3.232).
TRUNK_LOSS = {1024: 5.0, 2048: 4.0, 3072: 3.5, 4096: 3.3, 5120: 3.2, 6144: 3.1, 7168: 3.05, 8192: 3.0}
B_SIMPLE = {1024: math.nan, 2048: 20.0, 3072: 30.0, 4096: 40.0, 5120: 50.0, 6144: 60.0, 7168: 70.0, 8192: 80.0}


def trunk_rows():
    return [{"trial_id": "trunk", "role": "trunk", "start_samples": 0, "samples_seen": s, "steps": s // TRUNK,
             "batch_size": TRUNK, "alpha": 0.75, "peak_lr": 1e-3, "eval_loss": loss, "b_simple": B_SIMPLE[s],
             "diverged": False} for s, loss in TRUNK_LOSS.items()]


def branch_rows(losses):
    """``losses``: {(start, batch): (loss at alpha 0.5, loss at alpha 1.0)}; None: that run diverged. Each
    branch reports once, at start + window."""
    rows = []
    for (start, batch), pair in losses.items():
        for alpha, loss in zip(ALPHAS, pair):
            rows.append({"trial_id": f"b{start}_{batch}_{alpha}", "role": "branch", "start_samples": start,
                         "samples_seen": start + WINDOW, "steps": WINDOW // batch, "batch_size": batch,
                         "alpha": alpha, "peak_lr": 1e-3 * (batch / TRUNK) ** alpha,
                         "eval_loss": math.inf if loss is None else loss, "b_simple": math.nan,
                         "diverged": loss is None})
    return rows


# At 1024 (trunk 4.0 at 2048): B=32 recovers only at alpha 1.0 (4.00 vs 4.10: the best alpha counts), B=64's
# best is 4.08 (+2 %, fails), B=128 fails -> CBS 32. Margins: B=32 at +0 % and B=64 at +2 % both lie 1 % from
# the 1 % line: not a close call.
# At 2048 (trunk 3.5 at 3072): every batch recovers -> CBS ≥ 128 (lower bound).
# At 4096 (trunk 3.2 at 5120): B=32, 64 recover, B=128 at +5 % fails -> CBS 64: a decrease from 128, beyond the
# noise (B=128 passed at 2048 by 1 %, failed at 4096 by 4 %: neither within half the tolerance of the line).
LOSSES = {(1024, 32): (4.10, 4.00), (1024, 64): (4.08, 4.20), (1024, 128): (4.50, 4.60),
          (2048, 32): (3.50, 3.51), (2048, 64): (3.50, 3.49), (2048, 128): (3.50, 3.55),
          (4096, 32): (3.20, 3.21), (4096, 64): (3.22, 3.30), (4096, 128): (3.36, 3.40)}


def history(losses=LOSSES, schedule=None):
    rows = trunk_rows() + branch_rows(losses)
    if schedule:
        rows += schedule
    return pd.DataFrame(rows)


def points(losses=LOSSES, tokens=None):
    return critical_batch_over_training(history(losses), trunk_batch=TRUNK, window_samples=WINDOW, tolerance=TOL,
                                        tokens_per_sample=tokens)


def test_cbs_per_checkpoint_best_alpha_and_bounds():
    p1024, p2048, p4096 = points()
    assert [p.samples_seen for p in (p1024, p2048, p4096)] == [1024, 2048, 4096]
    assert (p1024.batch_size, p1024.bound) == (32, None)
    assert p1024.trunk_loss == 4.0 and p1024.threshold == pytest.approx(4.04)
    assert p1024.trunk_loss_at_start == 5.0
    b32 = p1024.outcome(32)
    assert b32.loss == 4.00 and b32.alpha == 1.0 and b32.recovers and b32.runs == 2  # the better alpha counts
    assert p1024.outcome(64).loss == 4.08 and p1024.outcome(64).excess == pytest.approx(0.02)
    assert not p1024.outcome(64).recovers
    assert p1024.margin == pytest.approx(0.01) and not p1024.close_call
    assert (p2048.batch_size, p2048.bound) == (128, "lower")  # the largest recovers: CBS ≥ 128
    assert (p4096.batch_size, p4096.bound) == (64, None)
    record = p1024.to_dict()
    assert record["samples_seen"] == 1024 and record["batch_size"] == 32
    assert record["loss_by_batch"] == {"32": 4.0, "64": 4.08, "128": 4.5}
    assert record["alpha_by_batch"] == {"32": 1.0, "64": 0.5, "128": 0.5}
    assert "tokens_seen" not in record


def test_upper_bound_when_even_the_smallest_branch_fails():
    losses = {**LOSSES, (1024, 32): (4.30, 4.20)}  # +5 %: fails -> CBS(1024) ≤ 16, the trunk's batch
    p = points(losses)[0]
    assert (p.batch_size, p.bound) == (TRUNK, "upper")
    assert p.margin == pytest.approx(0.04)  # only the first failing batch decides: 5 % vs the 1 % line


def test_diverged_branches_fail_and_a_recovery_above_them_is_noise():
    # At 1024, both B=64 runs diverge; B=128 at 4.03 recovers above them: CBS stays 32.
    losses = {**LOSSES, (1024, 64): (None, None), (1024, 128): (4.03, None)}
    p = points(losses)[0]
    assert (p.batch_size, p.bound) == (32, None)
    assert p.outcome(64).status == "diverged" and p.outcome(64).diverged == 2 and p.outcome(64).loss is None
    assert p.outcome(128).loss == 4.03 and p.outcome(128).diverged == 1  # the diverged alpha is skipped
    assert "B=64: diverged" in p.note and "B=128 recovered above" in p.note
    # A diverged run stops where it diverged, before the window's end: it still counts as diverged.
    frame = history(losses)
    early = (frame["role"] == "branch") & (frame["start_samples"] == 1024) & (frame["batch_size"] == 64)
    frame.loc[early, "samples_seen"] = 1024 + 256
    p = critical_batch_over_training(frame, trunk_batch=TRUNK, window_samples=WINDOW, tolerance=TOL)[0]
    assert p.batch_size == 32 and p.outcome(64).status == "diverged" and p.outcome(64).runs == 2
    # A run that stopped early without diverging has not finished: missing, and it ends the walk.
    frame = history()
    frame.loc[(frame["trial_id"] == "b1024_32_0.5") | (frame["trial_id"] == "b1024_32_1.0"), "samples_seen"] = 1536
    p = critical_batch_over_training(frame, trunk_batch=TRUNK, window_samples=WINDOW, tolerance=TOL)[0]
    assert (p.batch_size, p.bound) == (16, "lower") and p.outcome(32).status == "missing"  # ≥ 16: not measured
    assert "B=32: missing" in p.note
    # One alpha diverged, the other recovers: the batch recovers.
    p = points({**LOSSES, (1024, 32): (None, 4.0)})[0]
    assert p.batch_size == 32 and p.outcome(32).alpha == 1.0


def test_missing_trunk_report_leaves_the_point_undetermined():
    frame = history()
    frame = frame[~((frame["role"] == "trunk") & (frame["samples_seen"] == 2048))]
    p = critical_batch_over_training(frame, trunk_batch=TRUNK, window_samples=WINDOW, tolerance=TOL)[0]
    assert p.trunk_loss is None and "not determined" in p.note
    # ...and the schedule ignores it rather than reading its placeholder batch.
    assert recommend_schedule([p], trunk_batch=TRUNK, largest_batch=128) == [[0, 16]]


def test_close_call_when_a_deciding_branch_lies_within_half_the_tolerance():
    p = points({**LOSSES, (1024, 64): (4.05, 4.06)})[0]  # +1.25 %: fails, 0.25 % from the line (< 0.5 %)
    assert p.batch_size == 32 and p.margin == pytest.approx(0.0025) and p.close_call


def test_schedule_doubles_where_cbs_crosses_it_never_down_never_beyond_the_largest():
    p1024, p2048, p4096 = points()  # CBS 32, ≥ 128, 64
    assert recommend_schedule([p1024, p2048, p4096], trunk_batch=16, largest_batch=128) == \
        [[0, 16], [1024, 32], [2048, 128]]  # two doublings at once at 2048; the later 64 does not go down
    assert recommend_schedule([p1024, p2048, p4096], trunk_batch=16, largest_batch=64) == \
        [[0, 16], [1024, 32], [2048, 64]]
    upper = points({**LOSSES, (1024, 32): (4.3, 4.2)})[0]  # CBS ≤ 16 at 1024: the trunk's batch stays
    assert recommend_schedule([upper, p4096], trunk_batch=16, largest_batch=128) == [[0, 16], [4096, 64]]
    # CBS 48 (not a power-of-two multiple) reaches 32 but not 64.
    assert recommend_schedule([p1024.__class__(**{**p1024.__dict__, "batch_size": 48})], trunk_batch=16,
                              largest_batch=128) == [[0, 16], [1024, 32]]


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
    assert len(t.decreases) == 1
    d = t.decreases[0]
    assert (d.from_batch, d.from_samples, d.to_batch, d.to_samples, d.within_noise) == (128, 2048, 64, 4096, False)
    assert "decreases from 128 at 2048 samples to 64 at 4096 samples, beyond its noise" in t.text
    assert "(32 → ≥ 128 → 64)" in t.text
    assert "tokens" in trend(points(), tokens_per_sample=128).text  # 262144 tokens


def test_trend_decrease_within_the_noise_is_said_not_hidden():
    # B=128 fails at 4096 by only +1.25 % (0.25 % from the 1 % line): the dip may be noise.
    t = trend(points({**LOSSES, (4096, 128): (3.24, 3.30)}))
    assert t.verdict == "decreases_within_noise" and t.holds is True
    assert t.decreases[0].within_noise
    assert "dips from 128 at 2048 samples to 64 at 4096 samples, within its noise" in t.text


def test_trend_increasing_flat_undetermined():
    up = {**LOSSES, (1024, 32): (4.3, 4.2), (4096, 128): (3.2, 3.3)}  # ≤ 16, ≥ 128, ≥ 128
    t = trend(points(up))
    assert t.verdict == "increasing" and t.holds is True
    assert "grows from ≤ 16 at 1024 samples to ≥ 128 at 4096 samples" in t.text
    flat = {**up, (1024, 32): (4.0, 4.0), (1024, 64): (4.0, 4.0), (1024, 128): (4.0, 4.0)}
    t = trend(points(flat))
    assert t.verdict == "flat" and "the largest branch batch recovers at every checkpoint" in t.text
    assert trend(points()[:1]).verdict == "undetermined"


def test_b_simple_over_training_leaves_nan_out():
    assert b_simple_over_training(history()) == [[2048, 20.0], [3072, 30.0], [4096, 40.0], [5120, 50.0],
                                                 [6144, 60.0], [7168, 70.0], [8192, 80.0]]


def schedule_run(final_loss, steps=144):
    # The schedule [[0,16],[1024,32],[2048,128]] over 8192 samples: 144 steps (test above).
    return [{"trial_id": "schedule", "role": "schedule", "start_samples": 0, "samples_seen": 4096, "steps": 80,
             "batch_size": 128, "alpha": 0.75, "eval_loss": 3.3, "diverged": False},
            {"trial_id": "schedule", "role": "schedule", "start_samples": 0, "samples_seen": 8192, "steps": steps,
             "batch_size": 128, "alpha": 0.75, "eval_loss": final_loss, "diverged": False}]


def test_schedule_validation_against_the_fixed_small_batch():
    v = validate_schedule(history(schedule=schedule_run(3.02)))
    # trunk: 512 steps, loss 3.0; schedule: 144 steps (1 - 144/512 = 71.9 % fewer), 3.02 (+0.67 %): met.
    assert (v.schedule_steps, v.trunk_steps) == (144, 512)
    assert v.steps_saved == pytest.approx(0.71875) and v.loss_difference == pytest.approx(0.02 / 3)
    assert v.target_met and "72% fewer" in v.text and "met" in v.text
    v = validate_schedule(history(schedule=schedule_run(3.06)))  # +2 %: worse than the 1 % allowed
    assert not v.target_met and v.loss_difference == pytest.approx(0.02)
    v = validate_schedule(history(schedule=schedule_run(3.0, steps=400)))  # 21.9 % fewer: under 25 %
    assert not v.target_met
    assert validate_schedule(history()) is None


def test_samples_trained_per_role():
    # trunk 8192; 3 checkpoints × 3 batches × 2 alphas branches of 1024 each = 18432; the schedule 8192.
    assert samples_trained(history(schedule=schedule_run(3.0))) == {"trunk": 8192, "branch": 18432, "schedule": 8192}
    # Without trial ids, runs are told apart by role (and a branch by its checkpoint, batch and alpha).
    no_ids = history(schedule=schedule_run(3.0)).drop(columns="trial_id")
    assert samples_trained(no_ids) == {"trunk": 8192, "branch": 18432, "schedule": 8192}


META = {"trunk_batch": TRUNK, "window_samples": WINDOW, "checkpoints": list(CHECKPOINTS),
        "branch_batches": list(BATCHES), "alphas": list(ALPHAS), "tolerance": TOL, "budget_samples": BUDGET,
        "tokens_per_sample": None, "metric": "eval_loss", "trunk_peak_lr": 1e-3, "name": "tiny"}


def test_summary_json_carries_the_issue_keys():
    s = summarize_branches(history(schedule=schedule_run(3.02)), META)
    d = json.loads(s.to_json())
    assert d["method"] == "branch"
    assert [(r["samples_seen"], r["batch_size"], r["bound"]) for r in d["critical_batch_over_training"]] == \
        [(1024, 32, None), (2048, 128, "lower"), (4096, 64, None)]
    assert d["batch_size_schedule"] == [[0, 16], [1024, 32], [2048, 128]]
    assert "batch_size_schedule_tokens" not in d and "tokens_per_sample" not in d
    assert d["trend"]["verdict"] == "decreasing"
    assert d["b_simple_over_training"][0] == [2048, 20.0]
    assert d["schedule_validation"]["target_met"] is True
    assert d["trunk"] == {"batch_size": 16, "peak_lr": 1e-3, "final_eval_loss": 3.0, "samples_seen": 8192, "steps": 512}
    assert len(d["branches"]) == 18 and d["branches"][0]["eval_loss"] == 4.10
    # Cost: trunk + branches 8192 + 18432 = 26624 against a from-scratch search of (3 × 2 + 1) × 8192 = 57344.
    assert d["total_samples"] == 26624 + 8192 and d["scratch_samples"] == 57344
    assert d["cost_ratio"] == pytest.approx(26624 / 57344)


def test_summary_with_a_token_budget():
    s = summarize_branches(history(), {**META, "tokens_per_sample": 128})
    d = s.to_dict()
    assert d["batch_size_schedule_tokens"] == [[0, 2048], [131072, 4096], [262144, 16384]]
    assert d["budget_tokens"] == BUDGET * 128
    assert d["critical_batch_over_training"][0]["tokens_seen"] == 1024 * 128
    assert d["schedule_validation"] is None


def test_summary_rejects_another_metric():
    with pytest.raises(ValueError, match="eval_loss"):
        summarize_branches(history(), {**META, "metric": "accuracy"})


def test_trainer_snippets_follow_the_schedule():
    s = summarize_branches(history(), META)
    snippets = trainer_snippets(s)
    olmo = snippets["OLMo-core (BatchSizeSchedulerCallback)"][1]
    assert "batch_sizes=[16 * SEQUENCE_LENGTH, 32 * SEQUENCE_LENGTH, 128 * SEQUENCE_LENGTH]" in olmo
    assert "Duration.tokens(1024 * SEQUENCE_LENGTH)" in olmo
    levanter = snippets["Levanter (trainer.train_batch_size)"][1]
    assert "- start: 64" in levanter and "- start: 96" in levanter and "num_train_steps: 144" in levanter
    megatron, note = snippets["Megatron-LM (--rampup-batch-size)"][1:]
    # Linear from 16 to 128 by 16: 7 increments. Staying under the schedule asks for one every 1024 samples
    # (still 16 until 1024, at most 32 until 2048), so the ramp reaches 128 at 7 × 1024 = 7168 samples.
    assert megatron.startswith("--rampup-batch-size 16 16 7168 --global-batch-size 128 --train-samples 8192")
    assert "7 increments of 16, one every 1024 samples" in note

    def megatron_batch(consumed):  # Megatron-LM's ramp-up rule, for these flags
        return min(128, 16 + 16 * int(consumed // (7168 / 7)))

    def schedule_batch(consumed):
        return max(b for start, b in s.batch_size_schedule if consumed >= start)

    assert all(megatron_batch(c) <= schedule_batch(c) for c in range(0, BUDGET, 16))
    assert megatron_batch(7168) == 128
    tokens = trainer_snippets(summarize_branches(history(), {**META, "tokens_per_sample": 128}))
    assert "batch_sizes=[2048, 4096, 16384]" in tokens["OLMo-core (BatchSizeSchedulerCallback)"][1]


def test_report_writes_every_file(tmp_path):
    s = summarize_branches(history(schedule=schedule_run(3.02)), META)
    page = write_branch_report(s, history(schedule=schedule_run(3.02)), tmp_path)
    assert page == tmp_path / "report.html"
    for name in ("summary.json", "history.csv", "cbs_over_training.png", "report.md", "report.html"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert json.loads((tmp_path / "summary.json").read_text())["method"] == "branch"
    assert len(pd.read_csv(tmp_path / "history.csv")) == 8 + 18 + 2
    md = (tmp_path / "report.md").read_text()
    assert "decreases from 128 at 2048 samples to 64 at 4096 samples" in md
    assert "BatchSizeSchedulerCallback" in md and "train_batch_size" in md and "--rampup-batch-size" in md
    assert "![cbs_over_training](cbs_over_training.png)" in md
    html = (tmp_path / "report.html").read_text()
    png = (tmp_path / "cbs_over_training.png").read_bytes()
    assert base64.b64encode(png).decode()[:200] in html  # the plot embedded
    lines = headline(s)
    assert lines[0].startswith("Critical batch over training (branches from the trunk at B=16")
    assert lines[1].startswith("  at 1024 samples: CBS 32 (trunk eval_loss 4 at +1024")
    assert any(line.startswith("Recommended batch-size schedule: 16 from 0, then 32 from 1024, then 128 from 2048")
               for line in lines)
    assert any("Schedule validation: 144 optimizer steps" in line for line in lines)
    assert any(line.startswith("Cost: 34816 samples trained") and "0.46 of a from-scratch" in line for line in lines)


def test_report_with_tokens_and_no_branches(tmp_path):
    s = summarize_branches(history(), {**META, "tokens_per_sample": 128})
    write_branch_report(s, history(), tmp_path / "tokens")
    assert "tokens" in (tmp_path / "tokens" / "report.md").read_text()
    trunk_only = pd.DataFrame(trunk_rows())
    s = summarize_branches(trunk_only, META)
    assert s.critical_batch_over_training == () and s.batch_size_schedule == [[0, 16]]
    assert s.trend.verdict == "undetermined"
    write_branch_report(s, trunk_only, tmp_path / "empty")
    assert (tmp_path / "empty" / "report.html").exists()
    assert "no branch reported" in "\n".join(headline(s))
