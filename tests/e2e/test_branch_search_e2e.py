"""Branch mode (search.method: branch) end to end on a real local Ray: the trunk and branches as Tune trials,
summary.json's keys, the schedule run, the report rebuilt and the search resumed (its bad input and its
arithmetic before Ray are in tests/tune/test_branch_search.py)."""

import json

import pytest

from cbs_ray.spec.load import load_spec

# ≈ 2 min on 2 cores (a trunk, 8 branches and a schedule run): CI runs it in its `pytest -m slow` step
# beside plain pytest, which it would take past 10 minutes (issue 25).
pytestmark = pytest.mark.slow

LM = "search_spaces/tiny_causal_lm.yaml"
BRANCH = ["search.method=branch"]

# The tiny causal LM, shrunk: 4096 samples, reports every 1024; trunk B=8, branches at 16 and 32 from 1024
# and 2048 for 1024 samples, alpha 0.5, two seeds each and the trunk's continuation on a second seed (10 branch
# trials); the validation on two seeds; a small eval set.
SMALL = BRANCH + ["training.budget_samples=4096", "training.eval_every_samples=1024",
                  "asha.grace_period_samples=1024", "search.batch_sizes=[8, 16, 32]", "data.builtin_eval_examples=512",
                  "data.builtin_train_examples=4096", "branch.checkpoints=[0.25, 0.5]", "branch.window=0.25",
                  "branch.batch_sizes=[16, 32]", "branch.repeats=2", "branch.validation_seeds=2", "search.repeats=1",
                  "branch.schedule_rule=once_per_crossing"]  # doubles at the two checkpoints: a schedule to validate


@pytest.fixture(scope="module")
def branch_search(tmp_path_factory, shared_ray):
    from cbs_ray import run_search

    root = tmp_path_factory.mktemp("branch")
    spec = load_spec(LM, SMALL + ["branch.validate_schedule=true", f"storage_path={root / 'ray_results'}",
                                  f"output_dir={root / 'out'}"])
    return run_search(spec, verbose=0)


def test_trunk_and_branches_are_trials_of_one_tune_experiment(branch_search):
    from ray.tune import ExperimentAnalysis

    trials = ExperimentAnalysis(branch_search.experiment_path).trials
    roles = sorted(t.config["role"] for t in trials)
    assert roles == ["branch"] * 10 + ["trunk"]
    assert all(t.status == "TERMINATED" for t in trials)
    names = {str(t) for t in trials}
    assert any(n.startswith("trunk_B8_") for n in names) and any(n.startswith("branch_B32_from2048_a0.5_s1_")
                                                                    for n in names)
    assert sum(n.startswith("branch_B8_") for n in names) == 2  # the trunk's continuations, one per checkpoint
    history = branch_search.history
    branches = history[history["role"] == "branch"]
    # Each branch reports at its window's end, in absolute samples.
    ends = branches.groupby("trial_id")["samples_seen"].max()
    starts = branches.groupby("trial_id")["start_samples"].first()
    assert ((ends - starts) == 1024).all() and set(starts) == {1024, 2048}


def test_summary_json_has_the_critical_batch_over_training_and_a_schedule(branch_search):
    summary = json.loads((branch_search.output_dir / "summary.json").read_text())
    points = summary["critical_batch_over_training"]
    assert [p["samples_seen"] for p in points] == [1024, 2048]
    assert all(p["batch_size"] in (8, 16, 32) for p in points)
    schedule = summary["batch_size_schedule"]
    assert schedule[0] == [0, 8] and all(b in (8, 16, 32) for _, b in schedule)
    assert [b for _, b in schedule] == sorted(b for _, b in schedule)  # the batch never shrinks
    assert (branch_search.output_dir / "report.html").is_file()


def test_validate_schedule_compares_the_schedule_with_held_out_controls(branch_search):
    summary = json.loads((branch_search.output_dir / "summary.json").read_text())
    if len(summary["batch_size_schedule"]) < 2:  # the schedule kept the trunk's batch: no run to compare
        assert summary["schedule_validation"] is None and branch_search.schedule_experiment_path is None
        return
    assert branch_search.schedule_experiment_path
    assert (branch_search.history["role"] == "schedule").any()
    validation = summary["schedule_validation"]
    assert validation is not None and validation["held_out"] is True
    assert set(validation["non_inferiority"]) >= {"difference_mean", "upper_95", "margin", "holds"}
    assert validation["below_frontier"]["holds"] in (True, False, None) and validation["frontier_band"]
    assert validation["criterion"].startswith("paired by validation seed")
    schedule = next(c for c in validation["controls"] if c["name"] == "schedule")
    small = next(c for c in validation["controls"] if c["name"] == "small")
    assert schedule["seeds"] == 2 and small["seeds"] == 2 and small["batch_size"] == 8
    # Held out: seed offsets 1 and 2 for every run, the trunk's (0) not among them.
    assert set(small["final_losses"]) == set(schedule["final_losses"]) == {"1", "2"}
    assert len(schedule["final_loss_ci95"]) == 2 and validation["frontier"]
    # Issue 50: a fixed batch above the schedule's largest (within the 4096-example training set), and iso-loss
    # steps read on the two seeds
    large = max(b for _, b in summary["batch_size_schedule"])
    assert {c["name"]: c["batch_size"] for c in validation["controls"]}.get("above") == 2 * large
    iso = validation["iso_loss_steps"]
    assert iso["seeds"] == 2 and set(iso["per_seed"]) == {"1", "2"} and 2 * large in iso["frontier_batches"]
    points = summary["critical_batch_over_training"]
    assert all(p["branches"][0]["seeds"] == 2 for p in points)  # the trunk and its continuation
    assert all(isinstance(p["resolvable"], bool) and p["interval"][0] == p["batch_size"] for p in points)


def test_the_report_command_rebuilds_a_branch_report(branch_search, tmp_path, capsys):
    from cbs_ray.cli import report_main

    assert report_main([branch_search.experiment_path, "--output", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    first = json.loads((branch_search.output_dir / "summary.json").read_text())
    assert again["critical_batch_over_training"] == first["critical_batch_over_training"]
    assert again["batch_size_schedule"] == first["batch_size_schedule"]
    assert "Report:" in capsys.readouterr().out


def test_resume_of_a_finished_branch_search_reports_it_again(branch_search, tmp_path):
    from cbs_ray.tune.api import resume_search

    result = resume_search(branch_search.experiment_path, output_dir=str(tmp_path / "resumed"), verbose=0)
    assert result.experiment_path == branch_search.experiment_path
    assert result.schedule_experiment_path == branch_search.schedule_experiment_path
    assert result.batch_size_schedule == branch_search.batch_size_schedule
    assert len(result.history) == len(branch_search.history)  # nothing trained again


def test_a_ladder_on_the_same_spec_carries_branch_modes_schedule(branch_search, tmp_path):
    # The same model, data and budget as a ladder (4 batches, one seed, runs to a quarter: ≈ 1 min), into the same
    # storage: its prediction carries the branch search's schedule, as branch mode reported it.
    from pathlib import Path

    from cbs_ray import run_search

    root = Path(branch_search.experiment_path).parent
    spec = load_spec(LM, SMALL[1:] + ["search.method=ladder", "search.batch_sizes=[8, 16, 32, 64]", "ladder.seeds=1",
                                      f"storage_path={root}", f"output_dir={tmp_path / 'ladder'}"])
    run_search(spec, verbose=0)
    carried = json.loads((tmp_path / "ladder" / "summary.json").read_text())["prediction"]["batch_size_schedule"]
    first = json.loads((branch_search.output_dir / "summary.json").read_text())
    assert carried["experiment"] == branch_search.experiment_path
    assert carried["batch_size_schedule"] == first["batch_size_schedule"]
    assert (carried["validated"] is None) == (first["schedule_validation"] is None)
