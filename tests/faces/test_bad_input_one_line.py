"""Issue 40, "bad input that still escapes the one-line rule": each is one line and exit 2, before Ray."""

import json
import sys
from pathlib import Path

import pytest

from cbs_ray.cli import main, schema_main
from cbs_ray.records.storage import META_FILE
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.prepare import as_spec

LM = str(Path(__file__).resolve().parents[2] / "search_spaces" / "tiny_causal_lm.yaml")


@pytest.mark.parametrize("override, says", [
    ("ladder.seeds=100000000", "ladder.seeds: must be from 1 to 100"),
    ("branch.repeats=100000", "branch.repeats: must be from 1 to 100"),
    ("branch.validation_seeds=1000", "branch.validation_seeds: must be from 1 to 100"),
    ("search.repeats=101", "search.repeats: must be from 1 to 100"),
    ("model.config" + ".a" * 5000 + "=1", "levels deep; a spec key has at most 32"),
])
def test_bad_overrides_are_one_line_and_exit_2(override, says, capsys):
    assert main(["search", "--dry-run", "--set", override]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err[:500]


def _experiment(tmp_path, meta_text: str):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / META_FILE).write_text(meta_text)
    return str(exp)


LADDER_META = {"name": "x", "metric": "eval_loss", "mode": "min", "spec": {}, "method": "ladder", "format": 2,
               "ladder_batches": "lots", "ladder_seeds": 2}


@pytest.mark.parametrize("meta_text", [
    json.dumps(LADDER_META),
    "[" * 100_000 + "]" * 100_000,
    json.dumps({**LADDER_META, "ladder_seeds": {"a": 1}}),
])
def test_a_report_on_malformed_metadata_is_one_line(meta_text, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CBS_RAY_DEBUG", raising=False)
    assert main(["report", _experiment(tmp_path, meta_text)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err[:500]


def test_the_schema_to_a_full_device_is_one_line(capsys, monkeypatch):
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        assert schema_main([]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and len(err.strip().splitlines()) == 1


def test_run_search_on_a_missing_file_speaks_to_python_callers(tmp_path):
    with pytest.raises(SpecError) as raised:
        as_spec(str(tmp_path / "missing.yaml"))
    assert "--space" not in str(raised.value) and "missing.yaml" in str(raised.value)


def test_the_token_budget_error_names_the_objects_first():
    with pytest.raises(SpecError, match="never a train_dataset passed to run_search"):
        load_spec(None, ["training.budget_samples=null", "training.budget_tokens=100000"])


@pytest.mark.parametrize("first_rung, rungs", [("0.9", 1), ("0.2", 2)])
def test_a_ladder_plan_that_can_never_predict_is_refused_at_dry_run(first_rung, rungs, capsys):
    # Issue 40 row 10: 1 or 2 rungs passed --dry-run; a fit of B_crit against D needs 3.
    argv = ["search", "--dry-run", "--space", LM, "--set", "search.method=ladder",
            "--set", f"ladder.first_rung={first_rung}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"ladder.first_rung: the plan has {rungs} rung(s)" in err and len(err.strip().splitlines()) == 1


def test_dry_run_with_probe_is_refused_not_ignored(capsys):
    # Issue 40 row 16: `--dry-run --probe` silently ignored --probe.
    assert main(["search", "--dry-run", "--probe"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --probe: ") and "--dry-run starts nothing" in err and len(err.splitlines()) == 1


def test_a_run_refused_after_the_folder_checks_leaves_no_empty_report_folder(tmp_path, monkeypatch, capsys):
    # Issue 40: a search refused on its data (after the checks that the folders can be written) left an empty
    # ./cbs_results/<name>/ and an empty storage folder behind.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text("foo,bar\n1,2\n")
    argv = ["search", "--set", "data.source=files", "--set", "data.train_file=t.csv", "--set", "data.eval_file=t.csv",
            "--set", f"storage_path={tmp_path / 'ray'}"]
    assert main(argv) == 2
    assert "data.text_column: column 'sentence' not in t.csv" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]
