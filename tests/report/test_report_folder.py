"""A report folder holds one experiment's report (issue 29 row 18)."""

import json

from cbs_ray.report.folder import report_folder


def _a_report_of(directory, experiment):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(json.dumps({"experiment_path": experiment}))
    for name in ("trials.csv", "pareto.png", "notes.txt"):
        (directory / name).write_text("x")


def test_another_experiments_report_is_cleared_and_nothing_else(tmp_path, capsys):
    _a_report_of(tmp_path, "/ray/scratch-1")
    with report_folder(tmp_path, "/ray/branch-2"):
        pass
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["notes.txt"]
    assert "held the report of /ray/scratch-1; its 3 files were removed" in capsys.readouterr().err


def test_the_same_experiments_report_is_rewritten_in_place(tmp_path, capsys):
    _a_report_of(tmp_path, "/ray/scratch-1")
    with report_folder(tmp_path, "/ray/scratch-1") as directory:
        assert (directory / "trials.csv").exists()
    assert capsys.readouterr().err == ""
