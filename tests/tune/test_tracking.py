"""Experiment tracking (the spec's ``tracking:``) and the persistent study, end to end on a real local Ray:
one tiny search logs to an MLflow file store, TensorBoard and W&B offline, and keeps its Optuna study in
SQLite; each is read back with its own reader. The checks made before Ray starts run without Ray."""

import sys

import pytest

from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.train.trial_plans import SearchedPlans
from cbs_ray.tune.tracking import check_installed, mlflow_uri, trial_params
from helpers.training import EARLIER_DEFAULT

TINY = EARLIER_DEFAULT + ["data.builtin_train_examples=2048", "data.builtin_eval_examples=512",
                          "training.budget_samples=4096", "training.eval_every_samples=2048",
                          "asha.grace_period_samples=2048", "search.batch_sizes=[8, 16]"]


def test_trial_params_are_what_the_trial_trains_with():
    spec = load_spec(None, ["training.base_lr=0.001", "training.base_batch=16", "search.seed=3"])
    plan = SearchedPlans(spec, 4096).plan({"log2_batch": 6, "alpha": 0.5, "warmup_fraction": 0.1, "seed_offset": 2})
    params = trial_params(spec, 4096, plan)
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


def test_cli_names_a_missing_tracker_in_one_line_before_ray_starts(tmp_path, monkeypatch, capsys):
    # In this process, wandb made unimportable (a subprocess cost 6 s: issue 25's quick tier).
    import ray

    from cbs_ray.cli import search_main

    monkeypatch.setitem(sys.modules, "wandb", None)
    try:
        rc = search_main(["--set", "tracking.wandb.mode=offline", "--set", f"storage_path={tmp_path / 'rr'}"])
        assert not ray.is_initialized()
    finally:
        ray.shutdown()
    assert rc == 2
    assert capsys.readouterr().err == 'error: tracking.wandb: the wandb package is not installed: pip install "cbs-ray[wandb]"\n'
    assert not (tmp_path / "rr").exists()
