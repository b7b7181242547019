"""Report writers write only into the folder they hold, never through a link of any kind, and read back
``summary.json`` only as a regular file of bounded size (issue 47: hard-linked snapshots overwritten, a planted
symlink ``./cbs_results/<name>`` followed, a FIFO hung ``cbs-ray report`` holding the folder lock, a link to
/dev/zero read until memory ran out, a search named ``golden-ladder`` cleared the ladder report of ``golden``)."""

import json
import os
import signal

import pytest

from cbs_ray.report.folder import MAX_SUMMARY_BYTES, FolderError, held_summary, report_folder


def _report(directory, experiment, name=None, method=None):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(json.dumps({"experiment_path": experiment, "name": name,
                                                        **({"method": method} if method else {})}))
    (directory / "report.md").write_text(f"report of {experiment}")
    return directory


@pytest.fixture
def alarm():
    """Fail, instead of hanging the suite, where a read blocks (a FIFO read without O_NONBLOCK)."""
    def timed_out(*_):
        raise TimeoutError("blocked: the writer waited on a FIFO")

    previous = signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_hard_linked_report_file_is_replaced_not_written_through(tmp_path):
    folder = _report(tmp_path / "out", "/ray/exp-1", "exp")
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    os.link(folder / "summary.json", snapshot / "summary.json")  # cp -al out snapshot
    os.link(folder / "report.md", snapshot / "report.md")
    before = {p.name: p.read_text() for p in snapshot.iterdir()}
    with report_folder(folder, "/ray/exp-1", name="exp", method="scratch") as directory:
        (directory / "summary.json").write_text("{}")
        (directory / "report.md").write_text("new")
    assert {p.name: p.read_text() for p in snapshot.iterdir()} == before
    assert (folder / "report.md").read_text() == "new"


def test_a_report_folder_that_is_a_planted_symlink_is_refused_and_its_target_untouched(tmp_path):
    victim = _report(tmp_path / "victim", "/ray/other-1", "other")
    (tmp_path / "cbs_results").mkdir()
    (tmp_path / "cbs_results" / "exp").symlink_to(victim)
    with pytest.raises(FolderError, match="is a symbolic link"):
        with report_folder(tmp_path / "cbs_results" / "exp", "/ray/exp-1", name="exp", method="scratch"):
            pytest.fail("entered a planted link")
    assert (victim / "report.md").read_text() == "report of /ray/other-1"


def test_a_fifo_as_summary_json_neither_blocks_nor_is_written_through(tmp_path, alarm):
    folder = tmp_path / "out"
    folder.mkdir()
    os.mkfifo(folder / "summary.json")
    assert held_summary(folder) is None
    with pytest.raises(FolderError, match="is not a file"):
        with report_folder(folder, "/ray/exp-1", name="exp", method="scratch"):
            pass


def test_a_link_to_dev_zero_as_summary_json_is_not_read(tmp_path, alarm):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "summary.json").symlink_to("/dev/zero")
    assert held_summary(folder) is None
    with report_folder(folder, "/ray/exp-1", name="exp", method="scratch") as directory:
        assert not (directory / "summary.json").exists()  # the link removed; the report writes a file


def test_a_summary_over_the_bound_is_not_read(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    with open(folder / "summary.json", "wb") as f:
        f.truncate(MAX_SUMMARY_BYTES + 1)  # sparse: no disk used
    assert held_summary(folder) is None


def test_a_search_whose_name_ends_like_a_method_does_not_clear_that_methods_report(tmp_path):
    """``golden-ladder`` from scratch and ``golden``'s ladder share ./cbs_results/golden-ladder."""
    folder = _report(tmp_path / "golden-ladder", "/ray/golden-ladder-20260101-000000", "golden", "ladder")
    with pytest.raises(FolderError, match="holds the report of another search"):
        with report_folder(folder, "/ray/golden-ladder-20261203-100000", name="golden-ladder", method="scratch"):
            pytest.fail("entered another search's report folder")
    assert (folder / "report.md").read_text() == "report of /ray/golden-ladder-20260101-000000"


def test_an_earlier_run_of_the_same_search_is_still_cleared(tmp_path, capsys):
    folder = _report(tmp_path / "golden-ladder", "/ray/golden-ladder-20260101-000000", "golden", "ladder")
    with report_folder(folder, "/ray/golden-ladder-20261203-100000", name="golden", method="ladder"):
        pass
    assert not (folder / "report.md").exists()
    assert "held the report of /ray/golden-ladder-20260101-000000" in capsys.readouterr().err


def test_the_metadata_is_replaced_not_written_through_a_hard_link(tmp_path):
    from cbs_ray.records.storage import META_FILE, read_meta, write_meta

    write_meta(str(tmp_path / "exp"), {"name": "first"})
    os.link(tmp_path / "exp" / META_FILE, tmp_path / "snapshot.json")
    write_meta(str(tmp_path / "exp"), {"name": "second"})
    assert json.loads((tmp_path / "snapshot.json").read_text()) == {"name": "first"}
    assert read_meta(str(tmp_path / "exp")) == {"name": "second"}
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == [META_FILE]  # nothing left aside


@pytest.mark.parametrize("plant", ["fifo", "dev_zero"])
def test_metadata_that_is_a_fifo_or_a_device_is_refused_in_one_line(tmp_path, alarm, plant):
    from cbs_ray.records.storage import META_FILE, ReportError, read_meta

    (tmp_path / "exp").mkdir()
    if plant == "fifo":
        os.mkfifo(tmp_path / "exp" / META_FILE)
    else:
        (tmp_path / "exp" / META_FILE).symlink_to("/dev/zero")
    with pytest.raises(ReportError, match="not a regular file"):
        read_meta(str(tmp_path / "exp"))


def test_a_search_that_would_meet_another_searchs_report_is_refused_before_ray(tmp_path):
    from cbs_ray.spec.errors import SpecError
    from cbs_ray.spec.load import load_spec
    from cbs_ray.tune.prepare import check_before_ray

    folder = _report(tmp_path / "golden-ladder", "/ray/golden-ladder-20260101-000000", "golden", "ladder")
    spec = load_spec(None, ["name=golden-ladder", f"storage_path={tmp_path / 'ray'}"])
    with pytest.raises(SpecError, match="holds the report of another search"):
        check_before_ray(spec, folder)
    own = _report(tmp_path / "golden", "/ray/golden-20260101-000000", "golden")
    check_before_ray(load_spec(None, ["name=golden", f"storage_path={tmp_path / 'ray'}"]), own)  # a re-run


def test_a_planted_symlink_as_the_default_report_folder_is_refused_before_ray(tmp_path, monkeypatch):
    from cbs_ray.spec.errors import SpecError
    from cbs_ray.spec.load import load_spec
    from cbs_ray.tune.prepare import check_before_ray

    victim = _report(tmp_path / "victim", "/ray/other-1", "other")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cbs_results").mkdir()
    (tmp_path / "cbs_results" / "exp").symlink_to(victim)
    spec = load_spec(None, ["name=exp", f"storage_path={tmp_path / 'ray'}"])
    assert spec.results_dir == tmp_path / "cbs_results" / "exp"  # the link itself, not its target
    with pytest.raises(SpecError, match="is a symbolic link"):
        check_before_ray(spec, spec.results_dir)
    assert (victim / "report.md").read_text() == "report of /ray/other-1"
