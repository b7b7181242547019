"""Experiment tracking (the spec's ``tracking:``) and the persistent study, end to end on a real local Ray:
one tiny search logs to an MLflow file store, TensorBoard and W&B offline, and keeps its Optuna study in
SQLite; each is read back with its own reader. The checks made before Ray starts run without Ray."""

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.tracking import check_installed, mlflow_uri, trial_params
from conftest import EARLIER_DEFAULT

TINY = EARLIER_DEFAULT + ["data.builtin_train_examples=2048", "data.builtin_eval_examples=512",
                          "training.budget_samples=4096", "training.eval_every_samples=2048",
                          "asha.grace_period_samples=2048", "search.batch_sizes=[8, 16]"]


def test_trial_params_are_what_the_trial_trains_with():
    spec = load_spec(None, ["training.base_lr=0.001", "training.base_batch=16", "search.seed=3"])
    params = trial_params(spec, 4096, {"log2_batch": 6, "alpha": 0.5, "warmup_fraction": 0.1, "seed_offset": 2})
    # peak LR = base_lr · (B / base_batch) ** alpha = 0.001 · (64 / 16) ** 0.5 = 0.002; seed = 3 + 2
    assert params == {"batch_size": 64, "alpha": 0.5, "warmup_fraction": 0.1, "peak_lr": pytest.approx(0.002),
                      "seed": 5}


def test_a_relative_file_store_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    assert mlflow_uri("file:./mlruns") == (tmp_path / "mlruns").as_uri()
    assert mlflow_uri("mlruns") == (tmp_path / "mlruns").as_uri()
    assert mlflow_uri("sqlite:///mlflow.db") == "sqlite:///mlflow.db"  # MLflow resolves its own databases
    assert mlflow_uri("http://mlflow:5000") == "http://mlflow:5000" and mlflow_uri(None) is None
    assert mlflow_uri("databricks") == "databricks"  # a bare scheme MLflow knows, not a directory


@pytest.mark.parametrize("override,message", [
    ("tracking.mlflow.tracking_uri=file:./mlruns", 'tracking.mlflow: the mlflow package is not installed: '
                                                   'pip install "cbs-ray[mlflow]"'),
    ("tracking.wandb.mode=offline", 'tracking.wandb: the wandb package is not installed: pip install "cbs-ray[wandb]"'),
])
def test_a_tracker_that_is_not_installed_is_named(override, message, monkeypatch):
    spec = load_spec(None, [override])
    check_installed(spec.tracking)  # installed here (the test extra)
    monkeypatch.setitem(sys.modules, message.split(" the ")[1].split()[0], None)  # as if it were not
    with pytest.raises(SpecError) as info:
        check_installed(spec.tracking)
    assert str(info.value) == message


def test_cli_names_a_missing_tracker_in_one_line_before_ray_starts(tmp_path):
    code = ("import sys; sys.modules['wandb'] = None; from cbs_ray.cli import search_main; "
            f"sys.exit(search_main(['--set', 'tracking.wandb.mode=offline', '--set', 'storage_path={tmp_path / 'rr'}']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == 'error: tracking.wandb: the wandb package is not installed: pip install "cbs-ray[wandb]"\n'
    assert not (tmp_path / "rr").exists()


# ---- end to end -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """Four in-process trials (two stopped by ASHA), every tracker on, the study in SQLite."""
    root = tmp_path_factory.mktemp("tracked")
    argv = [sys.executable, "-m", "cbs_ray.search", "--output", str(root / "out")]
    for override in TINY + ["search.num_trials=4", f"storage_path={root / 'rr'}",
                            "tracking.mlflow.tracking_uri=file:./mlruns", "tracking.tensorboard=true",
                            "tracking.wandb.mode=offline", "search.study_storage=sqlite:///cbs.db"]:
        argv += ["--set", override]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=root,
                          env={**os.environ, "WANDB_SILENT": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((root / "out" / "summary.json").read_text())
    experiment = Path(glob.glob(str(root / "rr" / "*"))[0])
    return root, proc.stdout, summary, experiment


e2e = pytest.mark.e2e  # the tests below share one search on a real local Ray


@e2e
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
    assert len(children) == len(trials) == 4
    for run in children:
        trial = trials[run.info.run_name.split("_", 1)[1]]  # B<batch>_<trial id>
        params = run.data.params
        assert int(params["batch_size"]) == trial["batch_size"] and float(params["alpha"]) == trial["alpha"]
        assert {"warmup_fraction", "peak_lr", "seed"} <= set(params)
        history = client.get_metric_history(run.info.run_id, "accuracy")
        assert [m.step for m in history] == list(range(2048, trial["samples_seen"] + 1, 2048))  # samples_seen
    assert {"summary.json", "report.html", "metric_vs_batch.png"} <= {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert f"MLflow: the report is in run {parent.info.run_id}" in stdout


@e2e
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


@e2e
def test_wandb_offline_writes_a_run_directory_per_trial_and_one_for_the_report(tracked):
    _, stdout, summary, experiment = tracked
    for trial in summary["trials"]:
        assert glob.glob(str(experiment / f"*_{trial['trial_id']}" / "wandb" / f"offline-run-*-{trial['trial_id']}"))
    (report_run,) = glob.glob(str(experiment / "wandb" / "offline-run-*"))
    assert f"wandb sync {report_run}" in stdout


@e2e
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
