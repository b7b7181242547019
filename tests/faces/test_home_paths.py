"""Issue 58 finding 16: a path under an unknown user's home (``~nosuchuser/x``) in any field or flag that takes a
user's path was pathlib's "RuntimeError: Could not determine home directory", exit 1; it is one line naming the
field, exit 2, before Ray (``spec.paths.expand_user``, the one expansion)."""

import shutil
from pathlib import Path

import pytest

from cbs_ray.cli import main
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.paths import expand_user

REPO = Path(__file__).resolve().parents[2]
LM = str(REPO / "search_spaces" / "tiny_causal_lm.yaml")
NOBODY = "~cbs-no-such-user-58/x"


def test_expand_user_expands_a_known_home_and_names_the_field_for_an_unknown_one(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    assert expand_user("~/runs", "storage_path") == Path("/home/someone/runs")
    assert expand_user("/abs/runs", "storage_path") == Path("/abs/runs")
    with pytest.raises(SpecError, match=r"^storage_path: ~cbs-no-such-user-58/x: no home folder is known for user"):
        expand_user(NOBODY, "storage_path")


@pytest.mark.parametrize("argv, field", [
    (["search", "--dry-run", "--space", LM, "--set", "data.source=parquet", "--set", f"data.path={NOBODY}"],
     "data.path"),
    (["search", "--dry-run", "--space", LM, "--set", f"storage_path={NOBODY}"], "storage_path"),
    (["search", "--dry-run", "--space", LM, "--output", NOBODY], "--output"),
    (["search", "--dry-run", "--space", LM, "--set", "search.method=branch", "--set",
      f"branch.controls_from={NOBODY}", "--validate-schedule"], "branch.controls_from"),
    (["search", "--resume", NOBODY], "--resume"),
    (["report", NOBODY], "EXPERIMENT_DIR"),
])
def test_an_unknown_home_is_one_line_and_exit_2(argv, field, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CBS_RAY_DEBUG", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}: {NOBODY}: no home folder") and err.count("\n") == 1, err[:500]


def test_a_report_to_an_unknown_home_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    experiment = tmp_path / "golden-scratch-20260101-000000"  # a stored experiment (tests/golden)
    shutil.copytree(REPO / "tests" / "golden" / "experiments" / experiment.name, experiment)
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(experiment), "--output", NOBODY]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --output: {NOBODY}: no home folder") and err.count("\n") == 1, err[:500]
    assert not (tmp_path / "~cbs-no-such-user-58").exists()  # never a folder named after the tilde
