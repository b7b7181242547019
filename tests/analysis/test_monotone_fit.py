"""The turning point read off a fit that never improves with batch size (isotonic regression)."""

import math

import pandas as pd
import pytest

from cbs_ray.maths.critical_batch import monotone_fit, turning_point
from cbs_ray.methods.scratch.headline import headline
from cbs_ray.methods.scratch.reading import summarize

NAN = math.nan


def test_violators_are_pooled_into_their_mean():
    # .80 .82 -> pooled .81; .79 then .81 -> pooled .80; .60 stays: non-increasing, least squares
    assert monotone_fit([16, 32, 64, 128, 256], [0.80, 0.82, 0.79, 0.81, 0.60]) == pytest.approx(
        [0.81, 0.81, 0.80, 0.80, 0.60])


def test_a_curve_that_already_never_improves_is_its_own_fit():
    assert monotone_fit([16, 32, 64], [0.9, 0.85, 0.5]) == [0.9, 0.85, 0.5]


def test_order_follows_batch_size_and_nan_stays_out_of_the_fit():
    # sorted: 16 .80, 32 .82, 64 .79 -> [.81, .81, .79], returned in the input's order
    assert monotone_fit([64, 16, 32], [0.79, 0.80, 0.82]) == pytest.approx([0.79, 0.81, 0.81])
    fitted = monotone_fit([16, 32, 64, 128], [0.8, NAN, 0.82, 0.7])  # the fit is over 16, 64, 128
    assert math.isnan(fitted[1]) and [fitted[0], fitted[2], fitted[3]] == pytest.approx([0.81, 0.81, 0.7])


def test_min_mode_fits_a_loss_that_never_falls_with_batch_size():
    assert monotone_fit([16, 32, 64], [1.0, 0.9, 1.2], mode="min") == pytest.approx([0.95, 0.95, 1.2])


def test_one_unlucky_batch_size_no_longer_ends_the_walk():
    batches, bests = [16, 32, 64, 128, 256, 512], [0.80, 0.80, 0.77, 0.80, 0.79, 0.60]
    # raw: best .80 at 16, 64's .77 is below .784 (2 %) -> 32
    assert turning_point(batches, bests, tolerance=0.02) == 32
    # fit: .80 .80 then 64..256 pooled to .7867 (>= .784), 512 .60 -> 256
    assert turning_point(batches, bests, tolerance=0.02, monotone=True) == 256


def _history(accuracies: dict) -> pd.DataFrame:
    return pd.DataFrame([{"trial_id": f"t{b}", "batch_size": b, "alpha": 0.5, "warmup_fraction": 0.1,
                          "peak_lr": 1e-3, "samples_seen": 4096, "accuracy": acc, "wall_time_s": 4096 / b,
                          "samples_per_s": float(b), "eval_examples": 100000, "diverged": False}
                         for b, acc in accuracies.items()])


def test_summary_reads_the_spec_s_fit_and_keeps_the_other_reading():
    history = _history({16: 0.80, 32: 0.78, 64: 0.80, 128: 0.60})
    # raw: 32's .78 < .784 ends the walk at 16; fit: 32 and 64 pooled to .79 -> 64
    monotone = summarize(history, metric="accuracy", mode="max", budget_samples=4096, tolerance=0.02)
    tp = monotone.critical_batch.turning_point
    assert (monotone.critical_batch.batch_size, tp.raw_batch_size, tp.monotone_batch_size) == (64, 16, 64)
    assert [r["fit_accuracy"] for r in monotone.per_batch] == pytest.approx([0.80, 0.79, 0.79, 0.60])
    # headline()[0] is the decision, [1] the one answer; the turning point's own line follows its cross-checks.
    assert "monotone fit): 64 (read off the raw bests: 16)" in _turning_point_line(monotone)
    assert headline(monotone)[0].startswith("Decision: train at batch 64, ")
    assert headline(monotone)[1].startswith("Critical batch: 64 (turning point within 2 % of the best, monotone fit; "
                                            "resolved;")
    raw = summarize(history, metric="accuracy", mode="max", budget_samples=4096, tolerance=0.02, turning_fit="raw")
    assert raw.critical_batch.batch_size == 16
    # 16 is the smallest batch and the drop comes right after it: an upper bound (issue 17).
    assert "raw bests): ≤ 16 (read off the monotone fit: 64)" in _turning_point_line(raw)


def _turning_point_line(summary) -> str:
    return next(line for line in headline(summary) if line.startswith("Critical batch, turning point"))
