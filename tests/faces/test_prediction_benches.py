"""Issue 49's benches: the validation's protocol is printed before anything runs, its pairing and endpoints score
hand-built runs whose answer is known, and the development evaluation runs on its stored figures."""

import math
import subprocess
import sys

import pytest

from helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import prediction_validation as pv  # noqa: E402


def test_the_dry_run_prints_the_protocol_and_runs_nothing():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "prediction_validation.py"), "--dry-run"],
                          capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and all(line.startswith("PROTOCOL") for line in lines)
    assert "a1s2" in lines[0] and "a2s3" in lines[0] and "data.markov_seed=4049" in lines[0]
    assert "16 runs" in lines[3]


def run(setting, seed, predicted, measured, interval=None, batch=64):
    return {"setting": setting, "seed": seed, "budget": 16384, "predicted": predicted,
            "interval_90": interval or [predicted / 2, predicted * 2], "source": "rungs", "exponent": 0.5,
            "exponent_sd": 0.05, "rungs_exponent": 0.5, "rungs_exponent_se": 0.05, "batch_size": batch,
            "refusal": None, "rungs": [[3200, 40.0]], "last_rung": [3200, 40.0], "measured": measured,
            "power_law": None}


def test_each_prediction_is_judged_on_the_next_seeds_measurement():
    rows = [run("x", 1, 100.0, 80.0), run("x", 2, 90.0, 128.0)]
    pairs = pv.pair(rows)
    assert [(p["seed"], p["measured_seed"], p["measured_at_d"]) for p in pairs] == [(1, 2, 128.0), (2, 1, 80.0)]
    assert pairs[0]["error"] == pytest.approx(abs(math.log2(100 / 128)))
    # 0.452 from the last rung (40 at 3200): 40 · 5.12^0.452
    assert pairs[0]["borrowed"]["kaplan_2020"] == pytest.approx(abs(math.log2(40 * 5.12 ** (0.095 / 0.21) / 128)))
    assert pairs[0]["decision"] is False and pairs[1]["decision"] is True  # 2^floor(log2 80) = 64


def test_the_endpoints_read_better_never_worse_or_missed():
    # every prediction exact, the borrowed exponents off: "better", coverage 1 (above 97 %: not met)
    rows = [run(s, seed, 40 * 5.12 ** 0.9, 40 * 5.12 ** 0.9, batch=2 ** math.floor(math.log2(40 * 5.12 ** 0.9)))
            for s in ("a", "b", "c", "d") for seed in (1, 2)]
    verdict = pv.judge(pv.pair(rows))
    assert verdict["primary"] == "better" and verdict["mean_difference"] < -0.1 and verdict["ci95"][1] <= 0
    assert verdict["coverage"] == 1.0 and not verdict["coverage_met"] and verdict["decision_met"]
    # predictions a factor 4 off: missed
    rows = [run(s, seed, 4 * 40 * 5.12 ** 0.45, 40 * 5.12 ** 0.45) for s in ("a", "b", "c", "d") for seed in (1, 2)]
    assert pv.judge(pv.pair(rows))["primary"] == "missed"


def test_the_development_bench_runs_on_its_stored_figures():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "prediction_development.py")],
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert done.returncode == 0, done.stderr
    pooled = [line for line in done.stdout.splitlines() if line.startswith("POOLED")]
    # issue 36's 18 runs, issue 49's 16 rows (development data since issue 57), all of them
    assert len(pooled) == 3 and "(18 scored, 0 refused)" in pooled[0] and "coverage" in pooled[0]
    assert "(14 scored, 2 refused)" in pooled[1]
    assert sum(line.startswith("ROW") for line in done.stdout.splitlines()) == 21 + 16
    fits = [line for line in done.stdout.splitlines() if line.startswith("FIT")]
    assert any("transfer sd" in line and "(package TRANSFER_SD 0.24)" in line and ": 0.24" in line for line in fits)
