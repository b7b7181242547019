"""The ladder (search.method: ladder) end to end on a real local Ray: every (batch, seed) run a Tune trial
with its geometric evaluations, summary.json's keys, the validation's runs to 2·D, the report rebuilt and the
search resumed (its bad input before Ray is in tests/tune/test_ladder_search.py)."""

import json

import pytest

from cbs_ray.spec.load import load_spec

# ≈ 1 min on 2 cores (4 runs of 4096 samples): the slow tier, which CI runs as its own step.
pytestmark = pytest.mark.slow

LM = "search_spaces/tiny_causal_lm.yaml"
# The tiny causal LM at D = 2048 samples: batches 8…64, one seed, the smallest to half of D (16 steps at B=64) for
# the ladder (its rungs from twice the warmup, 256, on) and to D for the validation, every other until it reaches
# the smallest one's loss there or 4·D = 8192; evaluations from 128 at every factor √2.
SMALL = ["search.method=ladder", "training.budget_samples=2048", "training.eval_every_samples=1024",
         "asha.grace_period_samples=1024", "search.batch_sizes=[8, 16, 32, 64]", "data.builtin_eval_examples=512",
         "data.builtin_train_examples=4096", "ladder.fraction=0.5", "ladder.seeds=1", "ladder.first_rung=0.0625",
         "ladder.validate=true", "search.repeats=1"]


@pytest.fixture(scope="module")
def ladder(tmp_path_factory, shared_ray):
    from cbs_ray import run_search

    root = tmp_path_factory.mktemp("ladder")
    spec = load_spec(LM, SMALL + [f"storage_path={root / 'ray_results'}", f"output_dir={root / 'out'}"])
    return run_search(spec, verbose=0), root / "out"


def test_every_batch_is_a_trial_evaluated_on_the_geometric_cadence(ladder):
    summary, out = ladder
    from ray.tune import ExperimentAnalysis

    trials = ExperimentAnalysis(summary.experiment_path).trials
    assert sorted(2 ** t.config["log2_batch"] for t in trials) == [8, 16, 32, 64]
    assert all(t.status == "TERMINATED" and t.config["ladder_stop_samples"] == 8192 for t in trials)
    history = json.loads((out / "summary.json").read_text())
    curves = history["curves"]
    assert [s for s, _ in curves["8"]] == [128, 192, 256, 384, 512, 704, 1024, 1472, 2048]  # stopped at D


def test_summary_json_has_the_ladder_the_prediction_and_its_validation(ladder):
    _, out = ladder
    d = json.loads((out / "summary.json").read_text())
    assert d["method"] == "ladder"
    assert [r["samples_seen"] for r in d["ladder"]["rungs"]] == [256, 384, 512, 704, 1024]  # the ladder's own
    assert {"exponent", "exponent_ci", "refusal"} <= set(d["ladder"])
    p = d["prediction"]
    assert p["budget_samples"] == 2048
    assert (p["b_crit"] is None) == (p["refusal"] is not None)  # a prediction, or the reason there is none
    v = d["prediction_validation"]
    assert 0 < v["samples_ratio"] < 1 and d["ladder"]["reading"] == "ewa" and "exponent_se" in d["ladder"]
    assert {"measured_b_crit", "within_interval", "log2_error", "baselines"} <= set(v)
    for name in ("report.html", "report.md", "ladder.png", "history.csv"):
        assert (out / name).stat().st_size > 0


def test_the_report_command_rebuilds_it_and_a_resume_trains_nothing(ladder, tmp_path, capsys):
    from cbs_ray import resume_search
    from cbs_ray.cli import report_main

    summary, out = ladder
    assert report_main([summary.experiment_path, "--output", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert again["ladder"] == json.loads((out / "summary.json").read_text())["ladder"]
    assert report_main([summary.experiment_path, "--tolerance", "0.02"]) == 2  # not a ladder's flag
    assert "--tolerance: applies to a from-scratch experiment" in capsys.readouterr().err
    resumed = resume_search(summary.experiment_path, output_dir=str(tmp_path / "resumed"))
    # nothing trained again: the same rungs (compared as summary.json has them: a NaN is never equal to itself)
    assert json.loads(resumed.to_json())["ladder"] == json.loads(summary.to_json())["ladder"]
