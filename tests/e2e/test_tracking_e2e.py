"""Experiment tracking (the spec's ``tracking:``) and the persistent study end to end on a real local Ray:
one tiny search logs to an MLflow file store, TensorBoard and W&B offline, and keeps its Optuna study in
SQLite; each is read back with its own reader (the checks made before Ray starts are in
tests/tune/test_tracking.py)."""

import contextlib
import glob
import io
import json
import os
from pathlib import Path

import pytest

from helpers.training import EARLIER_DEFAULT

# ≈ 85 s on 2 cores (every tracker): CI runs it in its `pytest -m slow` step beside plain
# pytest, which it would take past 10 minutes (issue 25).
pytestmark = pytest.mark.slow

TINY = EARLIER_DEFAULT + ["data.builtin_train_examples=2048", "data.builtin_eval_examples=512",
                          "training.budget_samples=4096", "training.eval_every_samples=2048",
                          "asha.grace_period_samples=2048", "search.batch_sizes=[8, 16]"]


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, shared_ray):
    """Six in-process trials (some stopped by ASHA: the seed is the asha_search's of test_end_to_end.py), every
    tracker on, the study in SQLite. The search command runs in this process on the tests' shared Ray (the command
    in a process of its own, starting its own Ray: test_end_to_end.py), from the search's directory, where the
    relative tracking URIs resolve; the working directory and the environment (W&B's switches) are restored
    after."""
    from cbs_ray.cli import search_main

    root = tmp_path_factory.mktemp("tracked")
    argv = ["--output", str(root / "out")]
    for override in TINY + ["search.num_trials=6", "search.seed=1", f"storage_path={root / 'rr'}",
                            "tracking.mlflow.tracking_uri=file:./mlruns", "tracking.tensorboard=true",
                            "tracking.wandb.mode=offline", "search.study_storage=sqlite:///cbs.db"]:
        argv += ["--set", override]
    environ, cwd, stdout, stderr = dict(os.environ), os.getcwd(), io.StringIO(), io.StringIO()
    os.environ["WANDB_SILENT"] = "true"
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = search_main(argv)
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)
    assert code == 0, stderr.getvalue()[-3000:]
    summary = json.loads((root / "out" / "summary.json").read_text())
    experiment = Path(glob.glob(str(root / "rr" / "*"))[0])
    return root, stdout.getvalue(), summary, experiment


# The tests below share one search on a real local Ray.

def test_mlflow_has_one_run_per_trial_with_params_and_metric_history(tracked, monkeypatch):
    from mlflow.tracking import MlflowClient

    root, stdout, summary, _ = tracked
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient((root / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("tiny-bert-sentiment")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    trials = {t["trial_id"]: t for t in summary["trials"]}
    assert len(children) == len(trials) == 6
    for run in children:
        trial = trials[run.info.run_name.split("_", 1)[1]]  # B<batch>_<trial id>
        params = run.data.params
        assert int(params["batch_size"]) == trial["batch_size"] and float(params["alpha"]) == trial["alpha"]
        assert {"warmup_fraction", "peak_lr", "seed"} <= set(params)
        history = client.get_metric_history(run.info.run_id, "accuracy")
        assert [m.step for m in history] == list(range(2048, trial["samples_seen"] + 1, 2048))  # samples_seen
    assert {"summary.json", "report.html", "metric_vs_batch.png"} <= {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert f"MLflow: the report is in run {parent.info.run_id}" in stdout


def test_tensorboard_events_hold_each_trials_metric(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, stdout, summary, experiment = tracked
    for trial in summary["trials"]:
        (events,) = glob.glob(str(experiment / f"*_{trial['trial_id']}" / "events.out.tfevents.*"))
        reader = EventAccumulator(events)
        reader.Reload()
        steps = [s.step for s in reader.Scalars("ray/tune/accuracy")]
        assert steps == list(range(2048, trial["samples_seen"] + 1, 2048))
    assert f"tensorboard --logdir {experiment}" in stdout


def test_wandb_offline_writes_a_run_directory_per_trial_and_one_for_the_report(tracked):
    _, stdout, summary, experiment = tracked
    for trial in summary["trials"]:
        assert glob.glob(str(experiment / f"*_{trial['trial_id']}" / "wandb" / f"offline-run-*-{trial['trial_id']}"))
    (report_run,) = glob.glob(str(experiment / "wandb" / "offline-run-*"))
    assert f"wandb sync {report_run}" in stdout


def test_the_study_holds_every_trial_pruned_ones_with_their_last_value(tracked):
    import optuna

    root, _, summary, experiment = tracked
    study = optuna.load_study(study_name=experiment.name, storage=f"sqlite:///{root / 'cbs.db'}")
    by_id = {t.user_attrs["tune_trial_id"]: t for t in study.trials}
    assert set(by_id) == {t["trial_id"] for t in summary["trials"]}
    for trial in summary["trials"]:
        told = by_id[trial["trial_id"]]
        if trial["status"] == "stopped":
            assert told.state == optuna.trial.TrialState.PRUNED and told.value == trial["accuracy"]
        else:
            assert told.state == optuna.trial.TrialState.COMPLETE and told.value == trial["accuracy"]
    assert {t["status"] for t in summary["trials"]} == {"completed", "stopped"}
