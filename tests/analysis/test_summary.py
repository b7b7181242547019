"""Per-batch table, critical batch and Pareto front from a hand-built history of reports."""

import json
import math

import pandas as pd
import pytest

from cbs_ray.analysis.tables import restarts, trial_table
from cbs_ray.methods.scratch.reading import summarize, write_summary
from helpers.report import SEEDS, issue_28_repeats, perplexity_run

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


def test_each_trial_records_the_node_of_its_last_report():
    # Issue 20: b restarted on another node (its last report wins); c's reports predate node_id (NaN once
    # read back from Tune's CSV): "", as outside Ray.
    h = history()
    h["node_id"] = h["trial_id"].map({"a": "n1", "b": "n1", "d": "n2", "e": "n2", "f": "n1"})
    h.loc[(h["trial_id"] == "b") & (h["samples_seen"] == BUDGET), "node_id"] = "n2"
    trials = trial_table(h, metric="accuracy", budget_samples=BUDGET).set_index("trial_id")
    assert trials["node_id"].to_dict() == {"a": "n1", "b": "n2", "c": "", "d": "n2", "e": "n2", "f": "n1"}


def test_restarts_count_each_continuation_from_a_new_checkpoint():
    # Issue 20. b: its node lost after the 2048 checkpoint (a restart), then after 4096 twice in a row, the
    # second time before its next checkpoint (4096 again: one restart, not two): 2. a: never. c: its first
    # report predates the field (NaN in Tune's CSV), then no restart: 0.
    resumed = {"a": [0, 0, 0, 0], "b": [0, 2048, 4096, 4096], "c": [None, 0, 0, 0]}
    h = pd.DataFrame([{"trial_id": tid, "batch_size": 16, "alpha": 1.0, "warmup_fraction": 0.1, "peak_lr": 1e-3,
                       "samples_seen": 2048 * (i + 1), "accuracy": 0.8, "wall_time_s": 1.0, "samples_per_s": 100.0,
                       "diverged": False, "resumed_from_samples": r}
                      for tid, values in resumed.items() for i, r in enumerate(values)])
    trials = trial_table(h, metric="accuracy", budget_samples=4 * 2048).set_index("trial_id")
    assert trials["restarts"].to_dict() == {"a": 0, "b": 2, "c": 0}
    assert restarts([0, 2048, 2048, 4096]) == 2 and restarts([None, float("nan"), 0]) == 0
    # A history without the field (from before it): 0 for every trial, the column still there.
    assert trial_table(history(), metric="accuracy", budget_samples=BUDGET)["restarts"].eq(0).all()


def test_summary_answers():
    s = summarize(history(), metric="accuracy", mode="max", budget_samples=BUDGET, tolerance=0.01)
    per_batch = {r["batch_size"]: r for r in s.per_batch}
    assert per_batch[16]["best_accuracy"] == 0.82 and per_batch[16]["alpha"] == 1.0
    assert (per_batch[32]["trials"], per_batch[32]["completed"], per_batch[32]["stopped"]) == (2, 1, 1)
    assert per_batch[64]["diverged"] == 1
    assert s.critical_batch.batch_size == 32
    # Fastest completed: e (8 s, 0.79), then c (12 s, 0.815), then b (22 s, 0.82); a is dominated by c.
    assert [p["trial_id"] for p in s.pareto] == ["e", "c", "b"]


def test_diverged_trials_are_listed_with_their_lr_and_failed_trials_are_named():
    h = history()
    h["failed"] = h["trial_id"] == "d"  # d's workers died more often than max_failures
    trials = trial_table(h, metric="accuracy", budget_samples=BUDGET).set_index("trial_id")
    assert trials.loc["d", "status"] == "failed" and trials.loc["f", "status"] == "diverged"
    s = summarize(h, metric="accuracy", mode="max", budget_samples=BUDGET, tolerance=0.01)
    per_batch = {r["batch_size"]: r for r in s.per_batch}
    assert per_batch[64]["diverged_peak_lrs"] == [0.064]  # f: 1e-3 × alpha 1.0 × B 64
    assert (per_batch[32]["stopped"], per_batch[32]["failed"]) == (0, 1)
    from cbs_ray.methods.scratch.headline import headline

    assert "Diverged (non-finite or exploding loss; worst metric recorded): B=64: 1 trial(s), peak lr 0.064" \
        in headline(s)


def test_nothing_completed_gives_a_reason_not_a_number():
    h = history()
    h = h[h["samples_seen"] < BUDGET]
    s = summarize(h, metric="accuracy", mode="max", budget_samples=BUDGET)
    assert s.critical_batch.batch_size is None
    assert "no batch size" in s.critical_batch.reason
    assert s.pareto == []


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
    per_batch = {r["batch_size"]: r for r in s.per_batch}
    assert per_batch[16]["b_simple_early"] == 10.0
    assert per_batch[16]["b_simple_mean"] == pytest.approx(25.0 / 1.5)   # ratio of means, not mean of ratios
    assert per_batch[32]["b_simple_mean"] == 20.0
    assert s.noise_scale.early == pytest.approx(15.0)              # (10+20)/2 ÷ (1+1)/2
    per_trial = {t["trial_id"]: t for t in s.trials}
    assert per_trial["a"]["b_simple_early"] == 10.0 and per_trial["a"]["b_simple_mean"] == pytest.approx(25 / 1.5)
    assert s.noise_scale.mean == pytest.approx(22.5 / 1.25)


def test_noise_scale_not_measurable_is_said():
    h = history().assign(b_simple=math.nan, grad_sq=math.nan, trace_sigma=math.nan,
                         noise_scale_note="off or not measurable: one worker")
    s = summarize(h, metric="accuracy", mode="max", budget_samples=BUDGET)
    assert s.noise_scale.mean is None and "not measurable" in s.noise_scale.note


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
    per_batch = {r["batch_size"]: r for r in s.per_batch}
    # B=16: best search trial 0.82 plus repeats 0.80, 0.81 -> mean 0.81, sd 0.01, se = max(0.01, eval se) / √3
    assert per_batch[16]["runs"] == 3 and per_batch[16]["mean_accuracy"] == pytest.approx(0.81)
    eval_se = math.sqrt(0.82 * 0.18 / 1000)
    assert per_batch[16]["se_accuracy"] == pytest.approx(max(0.01, eval_se) / math.sqrt(3))
    assert per_batch[16]["best_accuracy"] == 0.82                     # repeats never pick the best config
    unc = s.critical_batch.turning_point.uncertainty
    assert unc.verdict.resolved is False and unc.range[0] <= unc.range[1]
    assert "repeats" in unc.verdict.text


def test_one_run_of_eval_loss_has_no_noise_estimate():
    h = history().assign(eval_loss=lambda d: 1 - d["accuracy"])
    s = summarize(h, metric="eval_loss", mode="min", budget_samples=BUDGET)
    assert "set search.repeats >= 2" in s.critical_batch.turning_point.uncertainty.reason


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
    turning = summarize(h, metric="accuracy", mode="max", budget_samples=1024).critical_batch.turning_point
    assert turning.batch_size == 8
    assert turning.uncertainty.range == [8, 8]


def test_one_accuracy_run_without_its_evaluation_set_size_has_no_noise_estimate():
    # Without eval_examples the accuracy's evaluation error is unknown: one run per batch size gives no
    # standard error (not 0, which would make any difference look resolved).
    h = pd.DataFrame(_run("a", 8, [0.80, 0.80]) + _run("c", 32, [0.79, 0.79])).drop(columns=["eval_examples"])
    s = summarize(h, metric="accuracy", mode="max", budget_samples=1024)
    assert [row["se_accuracy"] for row in s.per_batch] == [None, None]  # NaN, written as null
    uncertainty = s.critical_batch.turning_point.uncertainty
    assert uncertainty.verdict is None and "search.repeats >= 2" in uncertainty.reason


def test_an_empty_history_summarizes_to_no_answer():
    s = summarize(pd.DataFrame(), metric="accuracy", mode="max", budget_samples=64)
    assert s.critical_batch.turning_point.reason == "no batch size has a trial that reached the full budget"


# ---- summary.json's schema -----------------------------------------------------------------------------
# The key tree of summary.json as the dict-building summarize() of commit 1baada0 wrote it (captured by
# running that code on the two histories below), plus experiment_path, name and spec, which report.analyze
# added before writing it. 'a.b' is a key of an object, 'a[].b' a column of a table. The schema may only be
# extended: add keys here, never take one away.

def _under(prefix: str, names: str) -> set[str]:
    return {f"{prefix}.{n}" if prefix else n for n in names.split()}


TOP = _under("", "metric mode budget_samples target target_source critical_batch noise_scale recommendation "
                 "per_batch pareto pareto_projected trials experiment_path name spec")
CRITICAL_BATCH = _under("critical_batch", "batch_size turning_point tradeoff overhead_20pct tolerance reason "
                        "tolerance_unit tolerance_in_metric_units")
TURNING_POINT = _under("critical_batch.turning_point",
                       "batch_size fit raw_batch_size monotone_batch_size tolerance reason uncertainty")
UNCERTAINTY = (_under("critical_batch.turning_point.uncertainty", "range level share verdict noise_se_max reason")
               | _under("critical_batch.turning_point.uncertainty.verdict",
                        "resolved noise tolerance_abs repeats repeats_needed text"))
TRADEOFF = _under("critical_batch.tradeoff", "b_crit left_out ci95 s_min e_min points reason")
OVERHEAD = _under("critical_batch.overhead_20pct", "batch_size reason")
NOISE = _under("noise_scale", "early mean note")
RECOMMENDATION = _under("recommendation", "batch_size alpha peak_lr warmup_fraction warmup_steps warmup_samples budget_samples "
                                          "optimizer_steps accuracy projected_time_s trial_id")
FRONT_ROW = "trial_id batch_size alpha warmup_fraction peak_lr wall_time_s projected_time_s accuracy"
PER_BATCH_ROW = "batch_size trials completed stopped diverged failed diverged_peak_lrs best_accuracy runs " \
                "mean_accuracy se_accuracy"
TRIAL_ROW = "trial_id batch_size alpha warmup_fraction peak_lr samples_seen accuracy wall_time_s samples_per_s " \
            "repeat restarts status"  # restarts: issue 20, continued from a checkpoint (a node lost)

# Added by issue 17: the one answer on top, and a bound on each reading (keys always written, null when none).
ANSWER = _under("", "answer") | _under("answer", "batch_size bound reading resolved cross_checks_agree cross_checks "
                                                 "next_batch_range notes text")
BOUNDS = (_under("critical_batch.turning_point", "bound unequal_effort")
          | _under("critical_batch.tradeoff", "bound b_crit_bound") | _under("critical_batch.overhead_20pct", "bound"))
# Added by issue 18: parameter importance (always written; ``params`` null where there are too few trials).
IMPORTANCE = (_under("", "importance") | _under("importance", "evaluator overall per_batch_size")
              | _under("importance.overall", "trials params note")
              | _under("importance.per_batch_size[]", "batch_size trials params note"))
# ... and where there are enough: each parameter's share.
IMPORTANCE_PARAMS = (_under("importance.overall.params", "batch_size alpha warmup_fraction")
                     | _under("importance.per_batch_size[].params", "alpha warmup_fraction"))

# Issue 59: what to train the run at (analysis.decision), first in summary.json.
DECISION = {"decision"} | _under("decision", "batch_size lr warmup_samples schedule for_budget_samples confidence "
                                             "because disagreements next_step text")
# No trial completed: no uncertainty, no recommendation, no fronts, no target.
KEYS_NOTHING_COMPLETED = (TOP | DECISION | CRITICAL_BATCH | TURNING_POINT | TRADEOFF | OVERHEAD | NOISE | ANSWER | BOUNDS
                          | IMPORTANCE | _under("per_batch[]", PER_BATCH_ROW) | _under("trials[]", TRIAL_ROW))
# Issue 28: the recommendation's runs (always), and the mean and its standard error over them where its
# configuration was repeated (the figure the headline quotes).
RECOMMENDATION_RUNS = _under("recommendation", "runs mean_accuracy se_accuracy")
# Every section filled, and every key that is only written when it has a value.
KEYS_EVERYTHING = (KEYS_NOTHING_COMPLETED | UNCERTAINTY | RECOMMENDATION | {"recommendation.note"} | RECOMMENDATION_RUNS
                   | {"critical_batch.overhead_20pct.left_out", "noise_scale.reports", "noise_scale.reports_not_positive"}
                   | _under("pareto[]", FRONT_ROW) | _under("pareto_projected[]", FRONT_ROW)
                   | _under("per_batch[]", "alpha warmup_fraction peak_lr wall_time_s samples_per_s trial_id "
                                           "dev_accuracy steps_to_target samples_to_target target_at_first_report "
                                           "fit_accuracy b_simple_early b_simple_mean")
                   | _under("trials[]", "eval_examples dev_accuracy steps_to_target target_at_first_report "
                                        "b_simple_early b_simple_mean")
                   | _under("trials[]", "node_id"))  # issue 20: the Ray node of the trial's (rank 0) worker


def key_tree(value, path: str = "") -> set[str]:
    """Every key path in a JSON value. The turning-point range's ``share`` is keyed by batch size: data,
    not schema, so its keys are not listed."""
    if isinstance(value, list):
        return set().union(*(key_tree(v, path + "[]") for v in value))
    if not isinstance(value, dict):
        return set()
    paths = set()
    for key, v in value.items():
        p = f"{path}.{key}" if path else key
        paths |= {p} | (key_tree(v, p) if not p.endswith(".share") else set())
    return paths


def everything_history() -> pd.DataFrame:
    """history() with a dev set, repeats, the noise-scale estimates and reports that failed nothing."""
    h = history().assign(failed=False, eval_examples=1000)
    h["dev_accuracy"] = h["accuracy"] - 0.01
    repeats = [{"trial_id": tid, "batch_size": b, "alpha": 1.0, "warmup_fraction": 0.1, "peak_lr": 1e-3,
                "samples_seen": 2048 * i, "accuracy": acc, "wall_time_s": 10.0 * i, "samples_per_s": 400.0,
                "diverged": False, "failed": False, "eval_examples": 1000, "dev_accuracy": acc, "repeat": True}
               for tid, b, final in (("r16", 16, 0.80), ("r32", 32, 0.80), ("r64", 64, 0.78))
               for i, acc in enumerate((0.6, final), start=1)]
    h = pd.concat([h.assign(repeat=False), pd.DataFrame(repeats)], ignore_index=True)
    return h.assign(grad_sq=1.0, trace_sigma=h["batch_size"].astype(float), b_simple=h["batch_size"].astype(float),
                    node_id=h["batch_size"].map(lambda b: "node-a" if b <= 32 else "node-b"))


def test_summary_json_keeps_its_schema(tmp_path):
    # Target 0.65: B=16 and 32 reach it by their first report (left out of both rules), B=64 later.
    s = summarize(everything_history(), metric="accuracy", mode="max", budget_samples=BUDGET, target=0.65)
    write_summary(s, everything_history(), tmp_path)
    assert key_tree(json.loads((tmp_path / "summary.json").read_text())) == KEYS_EVERYTHING
    h = history()
    nothing = summarize(h[h["samples_seen"] < BUDGET], metric="accuracy", mode="max", budget_samples=BUDGET)
    assert key_tree(json.loads(nothing.to_json())) == KEYS_NOTHING_COMPLETED
    # Enough completed trials for every importance reading: 2 batch sizes × 3 alphas × 3 warmups.
    grid = pd.DataFrame([{"trial_id": f"{b}-{a}-{w}", "batch_size": b, "alpha": a, "warmup_fraction": w,
                          "peak_lr": 1e-3, "samples_seen": BUDGET, "accuracy": 0.5 + a / 4 + w, "wall_time_s": 1.0,
                          "samples_per_s": 100.0, "diverged": False}
                         for b in (16, 32) for a in (0.5, 0.75, 1.0) for w in (0.0, 0.1, 0.2)])
    filled = key_tree(json.loads(summarize(grid, metric="accuracy", mode="max", budget_samples=BUDGET).to_json()))
    assert {k for k in filled if k.startswith("importance")} == IMPORTANCE | IMPORTANCE_PARAMS


def test_summary_json_is_the_typed_summary_s_serialisation():
    s = summarize(everything_history(), metric="accuracy", mode="max", budget_samples=BUDGET, target=0.65)
    loaded = json.loads(s.to_json())
    cb = loaded["critical_batch"]
    assert cb["batch_size"] == s.critical_batch.batch_size == s.critical_batch.turning_point.batch_size
    uncertainty = s.critical_batch.turning_point.uncertainty
    assert cb["turning_point"]["uncertainty"]["verdict"]["text"] == uncertainty.verdict.text
    assert cb["overhead_20pct"]["left_out"] == s.critical_batch.tradeoff.left_out is not None
    # The recommendation's metric is written under the metric's own name.
    assert loaded["recommendation"]["accuracy"] == s.recommendation.metric_value
    assert "metric_value" not in loaded["recommendation"] and "metric" not in loaded["recommendation"]
    assert loaded["per_batch"] == s.per_batch and loaded["noise_scale"]["reports"] == s.noise_scale.reports


# ---- issue 17: bounds, the one answer, unequal effort, the capped recommendation -----------------------------

def _final(accuracies: dict, *, trials_per_batch: dict | None = None, eval_examples: int = 100_000) -> pd.DataFrame:
    """One trial per batch size (or ``trials_per_batch[b]``, the extra ones 0.05 worse): reports at 512 and
    1024 samples, the first at 90 % of the final accuracy. Wall time 1024/B s: larger batches are faster."""
    rows = []
    for b, acc in accuracies.items():
        for k in range((trials_per_batch or {}).get(b, 1)):
            final = acc - 0.05 * (k > 0)
            rows += [{"trial_id": f"t{b}_{k}", "batch_size": b, "alpha": 1.0, "warmup_fraction": 0.1, "peak_lr": 1e-3,
                      "samples_seen": s, "accuracy": a, "eval_examples": eval_examples, "diverged": False,
                      "wall_time_s": 1024 / b, "samples_per_s": float(b)}
                     for s, a in ((512, 0.9 * final), (1024, final))]
    return pd.DataFrame(rows)


def test_a_turning_point_at_the_largest_batch_is_a_lower_bound_with_a_next_range():
    # Every batch at 0.80: no drop on 8…128, so "≥ 128"; the tradeoff and the 20 % rule see perfect scaling
    # (equal samples to the target), a lower bound each, and agree.
    s = summarize(_final({b: 0.80 for b in (8, 16, 32, 64, 128)}), metric="accuracy", mode="max", budget_samples=1024)
    cb, answer = s.critical_batch, s.answer
    assert (cb.turning_point.batch_size, cb.turning_point.bound) == (128, "lower")
    assert (cb.tradeoff.b_crit, cb.tradeoff.bound, cb.tradeoff.b_crit_bound) == (None, "lower", 512.0)
    assert (cb.overhead_20pct.batch_size, cb.overhead_20pct.bound) == (128, "lower")
    assert answer.next_batch_range == [64, 1024] and answer.cross_checks_agree is True
    assert answer.text == ("Critical batch: ≥ 128 (turning point within 1 % of the best, monotone fit: the drop was not reached; "
                           "search 64…1024 next; resolved; cross-checks agree within one grid step)")
    assert answer.cross_checks == ("Cross-checks: tradeoff B_crit ≥ 512 agrees within one grid step; "
                                   "20% rule ≥ 128 agrees within one grid step")
    loaded = json.loads(s.to_json())
    assert loaded["answer"]["bound"] == loaded["critical_batch"]["turning_point"]["bound"] == "lower"
    assert loaded["answer"]["next_batch_range"] == [64, 1024]


def test_a_turning_point_at_the_smallest_batch_with_the_drop_right_after_is_an_upper_bound():
    s = summarize(_final({8: 0.80, 16: 0.70, 32: 0.65}), metric="accuracy", mode="max", budget_samples=1024)
    assert s.critical_batch.turning_point.bound == "upper" and s.answer.next_batch_range == [1, 16]
    assert s.answer.text.startswith("Critical batch: ≤ 8 (turning point within 1 % of the best, monotone fit: the drop comes right after "
                                    "the smallest batch measured; search 1…16 next; resolved;")
    # With 4 workers per trial the next range stops at 4, and says so.
    four = summarize(_final({8: 0.80, 16: 0.70, 32: 0.65}), metric="accuracy", mode="max", budget_samples=1024,
                     min_batch_size=4)
    assert four.answer.next_batch_range == [4, 16]
    assert "search 4…16 next (not below 4, the workers per trial)" in four.answer.text
    at_floor = summarize(_final({8: 0.80, 16: 0.70}), metric="accuracy", mode="max", budget_samples=1024,
                         min_batch_size=8)
    assert at_floor.answer.next_batch_range is None
    assert "no smaller batch to search (8 is the workers per trial)" in at_floor.answer.text


def test_a_walk_ended_by_a_batch_nobody_measured_is_a_lower_bound_without_a_next_range():
    h = pd.DataFrame(_run("a", 8, [0.80, 0.80]) + _run("b", 16, [0.0], diverged=True) + _run("c", 32, [0.80, 0.80]))
    s = summarize(h, metric="accuracy", mode="max", budget_samples=1024)
    assert (s.answer.batch_size, s.answer.bound, s.answer.next_batch_range) == (8, "lower", None)
    assert s.answer.text.startswith("Critical batch: ≥ 8 (turning point within 1 % of the best, monotone fit: batch size 16 has no "
                                    "completed trial and ends the walk; resolved; no cross-check determined")


def test_a_value_inside_the_grid_is_no_bound_and_a_thin_cross_check_says_so():
    # Plateau 8…32, drop at 64: 32. Target 0.60 (the worst best): only B=128 reaches it after its first report.
    s = summarize(_final({8: 0.80, 16: 0.80, 32: 0.799, 64: 0.70, 128: 0.60}), metric="accuracy", mode="max",
                  budget_samples=1024)
    assert (s.answer.batch_size, s.answer.bound, s.answer.resolved) == (32, None, True)
    assert s.answer.text == "Critical batch: 32 (turning point within 1 % of the best, monotone fit; resolved; a cross-check differs (below))"
    assert s.answer.cross_checks_agree is False
    assert s.answer.cross_checks.endswith("20% rule 128 differs from 32 by more than one grid step (thin data: "
                                          "1 batch size reached the target after its first report)")


def test_nothing_completed_has_an_answer_that_says_why():
    h = history()
    s = summarize(h[h["samples_seen"] < BUDGET], metric="accuracy", mode="max", budget_samples=BUDGET)
    assert s.answer.text == ("Critical batch: not determined (no batch size has a trial that reached the full "
                             "budget)")
    assert (s.answer.batch_size, s.answer.bound, s.answer.resolved, s.answer.next_batch_range) == (None,) * 4


def test_unequal_search_effort_is_flagged():
    from cbs_ray.methods.scratch.batch_table import unequal_effort
    from cbs_ray.methods.scratch.headline import headline

    # B=16 is the best of 4 trials, 8 and 32 of 1 each (the held-out causal-LM run of issue 17).
    h = _final({8: 0.80, 16: 0.81, 32: 0.80, 64: 0.70}, trials_per_batch={16: 4})
    s = summarize(h, metric="accuracy", mode="max", budget_samples=1024)
    note = ("B=16's best is the best of 4 trials, its neighbours' of 1: the best of more trials is "
            "biased upward; use search.balance_batches: true or the grid's reading")
    assert s.critical_batch.turning_point.unequal_effort == note and s.answer.notes == [note]
    assert s.answer.text.endswith("; unequal search effort (below))")
    assert headline(s)[3] == f"Unequal search effort: {note}"  # after the decision, the answer, its cross-checks
    # Even effort, or less than 2× a neighbour's: no note.
    assert summarize(_final({8: 0.80, 16: 0.81, 32: 0.80}), metric="accuracy", mode="max",
                     budget_samples=1024).answer.notes == []
    assert unequal_effort([8, 16, 32], [2, 3, 2], check=[16]) is None
    # Neighbours with different counts are named; a batch size with none completed is not a neighbour.
    assert unequal_effort([8, 16, 32, 64], [1, 6, 0, 3], check=[16]).startswith(
        "B=16's best is the best of 6 trials, its neighbours' of 1 (B=8) and 3 (B=64):")
    assert unequal_effort([8, 16], [1, 2], check=[8, 16]).startswith("B=16's best is the best of 2 trials, its "
                                                                        "neighbour's of 1:")
    # A balanced search whose trials ASHA stopped unevenly is even effort: 2 trials per batch size, B=8's and
    # B=32's second stopped at the first report, so B=16 has 2 completed trials and its neighbours 1.
    balanced = _final({8: 0.80, 16: 0.81, 32: 0.80}, trials_per_batch={8: 2, 16: 2, 32: 2})
    balanced = balanced[~(balanced["trial_id"].isin(["t8_1", "t32_1"]) & (balanced["samples_seen"] == 1024))]
    s_balanced = summarize(balanced, metric="accuracy", mode="max", budget_samples=1024)
    assert [r["completed"] for r in s_balanced.per_batch] == [1, 2, 1] and s_balanced.answer.notes == []


def test_the_recommendation_never_passes_the_critical_batch_silently():
    # Raw walk: 32's 0.78 < 0.784 (2 % of 0.80) ends it at 16, an upper bound. B=64 is faster and as good as
    # the best, but past it: the recommendation stays at 16 and says why.
    h = _final({16: 0.80, 32: 0.78, 64: 0.80, 128: 0.60})
    raw = summarize(h, metric="accuracy", mode="max", budget_samples=1024, tolerance=0.02, turning_fit="raw")
    assert raw.answer.batch_size == 16 and raw.recommendation.batch_size == 16
    assert raw.recommendation.note == ("B=64 (trial t64_0) is the fastest within tolerance of the best, but past "
                                       "the critical batch ≤ 16: recommended instead the fastest at or below it")
    assert json.loads(raw.to_json())["recommendation"]["note"] == raw.recommendation.note
    # On 1000 evaluation examples the noise is larger than the tolerance: the note says so.
    noisy = summarize(_final({16: 0.80, 32: 0.78, 64: 0.80, 128: 0.60}, eval_examples=1000), metric="accuracy",
                      mode="max", budget_samples=1024, tolerance=0.02, turning_fit="raw")
    assert "past the critical batch ≤ 16, which is not resolved: recommended instead" in noisy.recommendation.note
    # The monotone fit pools 32 and 64 (0.79): the critical batch is 64, and so is the recommendation.
    monotone = summarize(h, metric="accuracy", mode="max", budget_samples=1024, tolerance=0.02)
    assert (monotone.answer.batch_size, monotone.recommendation.batch_size, monotone.recommendation.note) == \
        (64, 64, None)


# ---- issue 28: the figure the recommendation rests on; alpha and warmup the search never chose ----------

def test_the_recommendation_quotes_the_mean_over_the_repeats_not_the_luckiest_run():
    # The issue's B=8: the search's best trial 4.951, its two repeats 4.854 (the fastest) and 4.904: mean 4.903.
    # The recommendation is the fastest run within tolerance, the 4.854 repeat; its line quotes the mean.
    s = summarize(issue_28_repeats(), metric="perplexity", mode="min", budget_samples=1024)
    rec = s.recommendation
    assert (rec.trial_id, rec.metric_value, rec.runs) == ("r8a", 4.854, 3)
    assert rec.metric_mean == pytest.approx(4.903) == {r["batch_size"]: r for r in s.per_batch}[8]["mean_perplexity"]
    loaded = json.loads(s.to_json())["recommendation"]
    assert (loaded["perplexity"], loaded["mean_perplexity"], loaded["runs"]) == (4.854, rec.metric_mean, 3)
    # One run of it (no repeats): its own figure, as before.
    single = summarize(pd.DataFrame(perplexity_run("s8", 8, 4.951) + perplexity_run("s16", 16, 5.6)),
                       metric="perplexity", mode="min", budget_samples=1024)
    assert single.recommendation.metric_mean is None and single.recommendation.runs == 1
    assert "mean_perplexity" not in json.loads(single.to_json())["recommendation"]


def test_a_recommended_seed_whose_proposals_never_finished_says_alpha_and_warmup_were_not_searched():
    # Two trials per batch size: each batch size's proposal stopped by ASHA at its first report, so the seeds
    # are the only completed trials and B=8's seed wins unopposed.
    runs = {"seed8": perplexity_run("seed8", 8, 4.9, warmup=0.075),
            "tpe8": perplexity_run("tpe8", 8, 9.0, alpha=0.55, warmup=0.18, reports=(512,)),
            "seed16": perplexity_run("seed16", 16, 6.0),
            "tpe16": perplexity_run("tpe16", 16, 9.0, alpha=0.7, warmup=0.02, reports=(512,))}

    def recommendation(seeds=SEEDS, **changed):
        rows = [row for run in {**runs, **changed}.values() for row in run]
        return summarize(pd.DataFrame(rows), metric="perplexity", mode="min", budget_samples=1024,
                         seeds=seeds).recommendation

    rec = recommendation()
    assert rec.trial_id == "seed8" and rec.unsearched == (
        "alpha and warmup were not searched: the recommendation is B=8's seeded configuration (alpha 0.625, warmup "
        "0.075), the search's starting point, not chosen by it, and none of the 1 proposed configuration at B=8 "
        "reached the full budget (1 stopped early); give each batch size more trials (search.num_trials) or a "
        "longer asha.grace_period_samples")
    # The proposal finished and lost: the seed's configuration, and what it beat.
    beat = recommendation(tpe8=perplexity_run("tpe8", 8, 5.2, alpha=0.55, warmup=0.18)).unsearched
    assert beat.startswith("alpha and warmup are B=8's seeded configuration (alpha 0.625, warmup 0.075)")
    assert beat.endswith("it beat the 1 proposed configuration that reached the full budget at B=8")
    # The proposal won: nothing to say; nor without seeds (a grid seeds nothing).
    assert recommendation(tpe8=perplexity_run("tpe8", 8, 4.5, alpha=0.55, warmup=0.18)).unsearched is None
    assert recommendation(seeds=None).unsearched is None


# ---- issue 40 row 8: a recommendation below the critical batch says why ---------------------------------

def test_a_recommendation_below_the_critical_batch_says_why():
    h = _final({16: 0.80, 32: 0.80, 64: 0.80, 128: 0.60})
    h.loc[h.batch_size == 64, "samples_per_s"] = 10.0  # B=64 measured slow (a loaded machine): B=32 is faster
    s = summarize(h, metric="accuracy", mode="max", budget_samples=1024, tolerance=0.02)
    assert (s.answer.batch_size, s.recommendation.batch_size) == (64, 32)
    assert s.recommendation.note.startswith("B=32 is below the critical batch 64 (the largest batch that costs no "
                                            "quality): it was the fastest within tolerance on this machine (")
    assert "s for B=64)" in s.recommendation.note
    assert json.loads(s.to_json())["recommendation"]["note"] == s.recommendation.note
