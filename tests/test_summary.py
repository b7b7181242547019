"""Per-batch table, critical batch and Pareto front from a hand-built history of reports."""

import json
import math

import pandas as pd
import pytest

from cbs_ray.summary import summarize, trial_table, write_summary

BUDGET = 4096


def history():
    rows = []

    def trial(tid, b, alpha, accs, wall, diverged=False):
        for i, acc in enumerate(accs, start=1):
            rows.append({"trial_id": tid, "batch_size": b, "alpha": alpha, "warmup_fraction": 0.1,
                         "peak_lr": 1e-3 * alpha * b, "samples_seen": 2048 * i, "accuracy": acc,
                         "wall_time_s": wall * i / len(accs), "samples_per_s": 4096 / wall,
                         "diverged": diverged and i == len(accs)})

    trial("a", 16, 0.5, [0.70, 0.80], 20.0)   # completed
    trial("b", 16, 1.0, [0.72, 0.82], 22.0)   # completed, best at 16
    trial("c", 32, 0.5, [0.66, 0.815], 12.0)  # completed: within 1 % of 0.82 (>= 0.8118)
    trial("d", 32, 1.0, [0.60], 6.0)          # stopped by ASHA
    trial("e", 64, 0.5, [0.60, 0.79], 8.0)    # completed: out of tolerance
    trial("f", 64, 1.0, [0.0], 1.0, diverged=True)
    return pd.DataFrame(rows)


def test_trial_table_status():
    trials = trial_table(history(), metric="accuracy", budget_samples=BUDGET).set_index("trial_id")
    assert trials["status"].to_dict() == {"a": "completed", "b": "completed", "c": "completed",
                                          "d": "stopped", "e": "completed", "f": "diverged"}


def test_summary_answers():
    s = summarize(history(), metric="accuracy", mode="max", budget_samples=BUDGET, tolerance=0.01)
    per_batch = {r["batch_size"]: r for r in s["per_batch"]}
    assert per_batch[16]["best_accuracy"] == 0.82 and per_batch[16]["alpha"] == 1.0
    assert (per_batch[32]["trials"], per_batch[32]["completed"], per_batch[32]["stopped"]) == (2, 1, 1)
    assert per_batch[64]["diverged"] == 1
    assert s["critical_batch"]["batch_size"] == 32
    # Fastest completed: e (8 s, 0.79), then c (12 s, 0.815), then b (22 s, 0.82); a is dominated by c.
    assert [p["trial_id"] for p in s["pareto"]] == ["e", "c", "b"]


def test_diverged_trials_are_listed_with_their_lr_and_failed_trials_are_named():
    h = history()
    h["failed"] = h["trial_id"] == "d"  # d's workers died more often than max_failures
    trials = trial_table(h, metric="accuracy", budget_samples=BUDGET).set_index("trial_id")
    assert trials.loc["d", "status"] == "failed" and trials.loc["f", "status"] == "diverged"
    s = summarize(h, metric="accuracy", mode="max", budget_samples=BUDGET, tolerance=0.01)
    per_batch = {r["batch_size"]: r for r in s["per_batch"]}
    assert per_batch[64]["diverged_peak_lrs"] == [0.064]  # f: 1e-3 × alpha 1.0 × B 64
    assert (per_batch[32]["stopped"], per_batch[32]["failed"]) == (0, 1)
    from cbs_ray.report import headline

    assert "Diverged (non-finite or exploding loss; worst metric recorded): B=64: 1 trial(s), peak lr 0.064" \
        in headline(s)


def test_nothing_completed_gives_a_reason_not_a_number():
    h = history()
    h = h[h["samples_seen"] < BUDGET]
    s = summarize(h, metric="accuracy", mode="max", budget_samples=BUDGET)
    assert s["critical_batch"]["batch_size"] is None
    assert "no batch size" in s["critical_batch"]["reason"]
    assert s["pareto"] == []


def test_written_summary_is_strict_json(tmp_path):
    h = history()
    h.loc[h["trial_id"] == "f", "accuracy"] = math.inf
    s = summarize(h, metric="accuracy", mode="max", budget_samples=BUDGET)
    write_summary(s, h, tmp_path)
    loaded = json.loads((tmp_path / "summary.json").read_text())
    assert {"critical_batch", "pareto", "per_batch"} <= set(loaded)
    assert len(pd.read_csv(tmp_path / "trials.csv")) == 6


def test_noise_scale_early_and_over_training():
    rows = [("a", 16, 2048, 1.0, 10.0), ("a", 16, 4096, 2.0, 40.0),
            ("b", 32, 2048, 1.0, 20.0), ("b", 32, 4096, 1.0, 20.0)]
    h = pd.DataFrame([{"trial_id": t, "batch_size": b, "samples_seen": s, "grad_sq": g, "trace_sigma": tr,
                       "b_simple": tr / g, "alpha": 1.0, "warmup_fraction": 0.0, "peak_lr": 1e-3,
                       "accuracy": 0.5, "wall_time_s": 1.0, "samples_per_s": 100.0, "diverged": False}
                      for t, b, s, g, tr in rows])
    s = summarize(h, metric="accuracy", mode="max", budget_samples=BUDGET)
    per_batch = {r["batch_size"]: r for r in s["per_batch"]}
    assert per_batch[16]["b_simple_early"] == 10.0
    assert per_batch[16]["b_simple_mean"] == pytest.approx(25.0 / 1.5)   # ratio of means, not mean of ratios
    assert per_batch[32]["b_simple_mean"] == 20.0
    assert s["noise_scale"]["early"] == pytest.approx(15.0)              # (10+20)/2 ÷ (1+1)/2
    per_trial = {t["trial_id"]: t for t in s["trials"]}
    assert per_trial["a"]["b_simple_early"] == 10.0 and per_trial["a"]["b_simple_mean"] == pytest.approx(25 / 1.5)
    assert s["noise_scale"]["mean"] == pytest.approx(22.5 / 1.25)


def test_noise_scale_not_measurable_is_said():
    h = history().assign(b_simple=math.nan, grad_sq=math.nan, trace_sigma=math.nan,
                         noise_scale_note="off or not measurable: one worker")
    s = summarize(h, metric="accuracy", mode="max", budget_samples=BUDGET)
    assert s["noise_scale"]["mean"] is None and "not measurable" in s["noise_scale"]["note"]


def test_repeats_give_a_mean_a_standard_error_and_a_verdict():
    h = history()
    h["eval_examples"] = 1000
    extra = []
    for tid, b, acc in (("r16a", 16, 0.80), ("r16b", 16, 0.81), ("r32a", 32, 0.80), ("r32b", 32, 0.79),
                        ("r64a", 64, 0.78), ("r64b", 64, 0.80)):
        for i, value in enumerate((0.6, acc), start=1):
            extra.append({"trial_id": tid, "batch_size": b, "alpha": 1.0, "warmup_fraction": 0.1, "peak_lr": 1e-3,
                          "samples_seen": 2048 * i, "accuracy": value, "wall_time_s": 10.0 * i,
                          "samples_per_s": 400.0, "diverged": False, "eval_examples": 1000, "repeat": True})
    h = pd.concat([h.assign(repeat=False), pd.DataFrame(extra)], ignore_index=True)
    s = summarize(h, metric="accuracy", mode="max", budget_samples=BUDGET, tolerance=0.01)
    per_batch = {r["batch_size"]: r for r in s["per_batch"]}
    # B=16: best search trial 0.82 plus repeats 0.80, 0.81 -> mean 0.81, sd 0.01, se = max(0.01, eval se) / √3
    assert per_batch[16]["runs"] == 3 and per_batch[16]["mean_accuracy"] == pytest.approx(0.81)
    eval_se = math.sqrt(0.82 * 0.18 / 1000)
    assert per_batch[16]["se_accuracy"] == pytest.approx(max(0.01, eval_se) / math.sqrt(3))
    assert per_batch[16]["best_accuracy"] == 0.82                     # repeats never pick the best config
    unc = s["critical_batch"]["turning_point"]["uncertainty"]
    assert unc["verdict"]["resolved"] is False and unc["range"][0] <= unc["range"][1]
    assert "repeats" in unc["verdict"]["text"]


def test_one_run_of_eval_loss_has_no_noise_estimate():
    h = history().assign(eval_loss=lambda d: 1 - d["accuracy"])
    s = summarize(h, metric="eval_loss", mode="min", budget_samples=BUDGET)
    assert "set search.repeats >= 2" in s["critical_batch"]["turning_point"]["uncertainty"]["reason"]


def _run(trial_id, batch, accuracies, *, budget=1024, diverged=False, eval_examples=100_000):
    """Reports of one trial at 512 and 1024 samples (a diverged one stops after the first)."""
    return [{"trial_id": trial_id, "batch_size": batch, "alpha": 1.0, "warmup_fraction": 0.1, "peak_lr": 1e-3,
             "samples_seen": budget // 2 * (i + 1), "accuracy": acc, "eval_loss": 1 - acc,
             "diverged": diverged and i == len(accuracies) - 1, "eval_examples": eval_examples,
             "wall_time_s": 10.0, "samples_per_s": 100.0} for i, acc in enumerate(accuracies)]


def test_the_turning_point_range_stops_at_a_batch_size_nobody_measured_as_the_headline_does():
    # B=8 and B=32 both reach 0.80 on 100 000 examples (standard error 0.0013); B=16 diverged. The walk
    # up from 8 stops at the gap, so the answer is 8, and the redraws must not jump the gap to 32.
    h = pd.DataFrame(_run("a", 8, [0.80, 0.80]) + _run("b", 16, [0.0], diverged=True) + _run("c", 32, [0.80, 0.80]))
    turning = summarize(h, metric="accuracy", mode="max", budget_samples=1024)["critical_batch"]["turning_point"]
    assert turning["batch_size"] == 8
    assert turning["uncertainty"]["range"] == [8, 8]


def test_one_accuracy_run_without_its_evaluation_set_size_has_no_noise_estimate():
    # Without eval_examples the accuracy's evaluation error is unknown: one run per batch size gives no
    # standard error (not 0, which would make any difference look resolved).
    h = pd.DataFrame(_run("a", 8, [0.80, 0.80]) + _run("c", 32, [0.79, 0.79])).drop(columns=["eval_examples"])
    s = summarize(h, metric="accuracy", mode="max", budget_samples=1024)
    assert [row["se_accuracy"] for row in s["per_batch"]] == [None, None]  # NaN, written as null
    uncertainty = s["critical_batch"]["turning_point"]["uncertainty"]
    assert uncertainty["verdict"] is None and "search.repeats >= 2" in uncertainty["reason"]


def test_an_empty_history_summarizes_to_no_answer():
    s = summarize(pd.DataFrame(), metric="accuracy", mode="max", budget_samples=64)
    assert s["critical_batch"]["turning_point"]["reason"] == "no batch size has a trial that reached the full budget"
