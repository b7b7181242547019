"""Issue 58 finding 21: ``cbs-ray report EXP`` whose ``cbs_spec.json`` holds JSON that is not an object (a list, a
string, a number, null) ended in "AttributeError: 'list' object has no attribute 'get'", exit 1. It is one line
naming the file, exit 2."""

import shutil
from pathlib import Path

import pytest

from cbs_ray.cli import main
from cbs_ray.records.storage import META_FILE, ReportError, read_meta

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text, holds", [("[1, 2]", "an array"), ('"x"', "a string"), ("3", "a number"),
                                         ("null", "null"), ("true", "a boolean")])
def test_metadata_that_is_no_json_object_is_one_line_and_exit_2(text, holds, tmp_path, capsys, monkeypatch):
    experiment = tmp_path / "golden-scratch-20260101-000000"  # a stored experiment (tests/golden)
    shutil.copytree(REPO / "tests" / "golden" / "experiments" / experiment.name, experiment)
    (experiment / META_FILE).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CBS_RAY_DEBUG", raising=False)
    assert main(["report", str(experiment)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {experiment}: {META_FILE} is damaged (it holds {holds}, not the JSON object cbs-ray writes)\n"
    with pytest.raises(ReportError, match=f"{META_FILE} is damaged"):  # every reader of the file, not the report only
        read_meta(str(experiment))
