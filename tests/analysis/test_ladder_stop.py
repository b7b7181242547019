"""Where a ladder run stops (``methods.ladder.reading_stop``), and the ladder read through ``ladder.reading``, on curves
built by hand. No Ray, no torch."""

import math

import pandas as pd
import pytest

from cbs_ray.methods.ladder.reading import summarize_ladder
from cbs_ray.methods.ladder.reading_stop import LadderStop, ladder_cuts, samples_trained
from helpers.ladder_curves import history_rows


def test_the_stop_rule_by_hand():
    """The reference (B=8) stops at 1024, where its two seeds read 2.0 and 3.0: the target is 2.5. B=16 stops once
    both its seeds have reached it (seed 1 at 2048; seed 0, which got there at 1536, at its next report)."""
    rule = LadderStop(reference_batch=8, reference_stop=1024, seeds=2)
    assert not rule.observe(16, 0, 512, 2.4)          # below 2.5, but the target is not known yet
    assert not rule.observe(8, 0, 512, 4.0) and rule.target is None
    assert rule.observe(8, 0, 1024, 2.0) and rule.target is None
    assert rule.observe(8, 1, 1024, 3.0) and rule.target == 2.5
    assert not rule.observe(16, 0, 1536, 2.4)         # seed 0 there; seed 1 not yet
    assert not rule.observe(16, 1, 1536, 2.7) and not rule.observe(16, 1, 1792, math.nan)
    assert rule.observe(16, 1, 2048, 2.5)             # at the target counts
    assert rule.observe(16, 0, 2048, 2.3)
    assert not rule.observe(32, 0, 2048, 2.6)


def test_ladder_cuts_by_hand():
    """Target: the reference's seed-mean at 1024 = 2.5. B=16's seeds first reach it at 1536 and 2048: cut at 2048;
    B=32's second seed never does by the cap (4096): cut at the cap."""
    curves = {8: [[(512, 4.0), (1024, 2.0)], [(512, 4.2), (1024, 3.0)]],
              16: [[(1024, 2.8), (1536, 2.4), (2048, 2.3)], [(1024, 3.1), (1536, 2.7), (2048, 2.5), (4096, 2.0)]],
              32: [[(2048, 2.6), (4096, 2.4)], [(2048, 2.9), (4096, 2.6), (8192, 2.0)]]}
    cuts = ladder_cuts(curves, reference_stop=1024, cap=4096)
    assert cuts == {8: 1024, 16: 2048, 32: 4096}
    # trained: 1024·2 + (2048 + 4096) + (4096 + 8192) = 20480; up to the cuts: 1024·2 + 2048·2 + 4096·2 = 14336
    assert samples_trained(curves) == 20480 and samples_trained(curves, cuts) == 14336


BATCHES, EVALS = (8, 16, 32, 64), (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
META = {"ladder_batches": list(BATCHES), "ladder_seeds": 2, "ladder_alpha": 0.5, "warmup_fraction": 0.1,
        "budget_samples": 8192, "ladder_stop_samples": 2048, "ladder_evaluations": list(EVALS),
        "ladder_validate": True, "tokens_per_sample": None, "base_lr": 0.002, "base_batch": 16, "max_seq_length": 32,
        "ladder_reading": "ewa", "ladder_metric": "eval_loss", "ladder_cap": 4.0, "ladder_run_stop": 32768}


def test_the_ladder_reads_the_average_and_each_batch_up_to_its_own_stop():
    """The known curves (B_crit = 2·D^0.5) are the average's (``ewa_eval_loss``); the raw column sits on a noise floor
    that grows with the batch (+0.05·log2 B), which would bend the reading. Read through the average the prediction
    is the known 181; each batch's runs are read up to where it reached the last rung's target."""
    frame = pd.DataFrame(history_rows(BATCHES, EVALS))
    frame["ewa_eval_loss"] = frame["eval_loss"]
    frame["eval_loss"] = frame["ewa_eval_loss"] + 0.05 * frame["batch_size"].map(math.log2)
    s = summarize_ladder(frame, META, bootstrap=300)
    true = 2.0 * 8192 ** 0.5
    assert s.ladder.reading == "ewa" and s.ladder.column == "ewa_eval_loss"
    assert s.prediction.interval_90[0] <= true <= s.prediction.interval_90[1]
    assert s.ladder.exponent_se is not None and s.ladder.exponent == pytest.approx(0.5, abs=0.1)
    assert s.prediction_validation.measured_b_crit == pytest.approx(true, rel=0.03)
    cuts = s.ladder.cuts
    assert cuts["8"] == 2048 and 2048 < cuts["16"] <= cuts["32"] <= cuts["64"] <= 8192
    assert s.cost.ladder_samples < s.prediction_validation.measurement_samples
    raw = summarize_ladder(frame, {**META, "ladder_reading": "raw"}, bootstrap=300)
    assert raw.ladder.column == "eval_loss" and raw.ladder.rungs != s.ladder.rungs
