"""A tracking URI is checked before Ray starts, in --dry-run too (issue 29 row 7): one line, exit 2, at once."""

import time

import pytest

from cbs_ray.search import main

CASES = {
    "an unknown scheme": ("foo://bar", "unknown scheme 'foo'"),
    "a server nobody runs": ("http://127.0.0.1:9", "no MLflow server answers at 127.0.0.1:9"),
    "a SQLite file in no folder": ("sqlite:////nonexistent_dir/mlflow.db", "folder /nonexistent_dir does not exist"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_tracking_uri_that_cannot_work_is_refused_before_ray(case, capsys):
    uri, says = CASES[case]
    started = time.monotonic()
    assert main(["--set", f"tracking.mlflow.tracking_uri={uri}", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tracking.mlflow.tracking_uri: " in err and says in err, err
    assert time.monotonic() - started < 30  # (MLflow's own retries took 264 s)


def test_a_local_store_and_a_sqlite_file_beside_it_pass(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for uri in ("sqlite:///mlflow.db", f"file://{tmp_path}/mlruns", "./mlruns"):
        assert main(["--set", f"tracking.mlflow.tracking_uri={uri}", "--dry-run"]) == 0, capsys.readouterr().err
