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


# ---- issue 40 rows 2 and the full folder: no writer follows a link it did not make ----------------------

import errno  # noqa: E402

import pytest  # noqa: E402

from cbs_ray.records.storage import ReportError  # noqa: E402
from cbs_ray.report.folder import LOCK_FILE, FolderError  # noqa: E402


@pytest.mark.parametrize("name", [LOCK_FILE, "summary.json", "report.md", "report.html", "trials.csv", "pareto.png"])
def test_a_link_in_the_report_folder_is_never_followed(name, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    with report_folder(out, "/ray/exp-1") as directory:
        (directory / name).write_text("report")  # what a writer does with the name
    assert victim.read_text() == "keep me"
    assert not (out / name).is_symlink()


def test_a_full_report_folder_names_the_path_and_how_to_rebuild(tmp_path):
    with pytest.raises(FolderError) as raised:
        with report_folder(tmp_path / "out", "/ray/my exp-1"):
            raise OSError(errno.ENOSPC, "No space left on device")
    message = str(raised.value)
    assert isinstance(raised.value, ReportError) and len(message.splitlines()) == 1
    assert str(tmp_path / "out") in message and "No space left on device" in message
    assert "cbs-ray report '/ray/my exp-1'" in message
