"""Per-batch table, critical batch and Pareto front from a hand-built history of reports."""

import json
import math

import pandas as pd

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
