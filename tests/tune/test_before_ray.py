"""Everything checkable is checked before Ray, and --dry-run makes the same checks (issue 29 rows 8, 10, 11):
one line, exit 2, nothing started."""

import pytest

from cbs_ray import load_spec, run_search
from cbs_ray.search import main
from cbs_ray.spec.errors import SpecError
from cbs_ray.tune.prepare import as_spec


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("not a directory")
    return path


def test_an_output_that_is_a_file_or_an_unwritable_store_is_refused_in_the_dry_run(a_file, capsys):
    cases = [(["--output", str(a_file)], f"--output: {a_file} is a file, not a directory"),
             (["--set", "storage_path=/proc/ray_results"], "storage_path: cannot write to /proc/ray_results"),
             (["--set", "search.study_storage=/proc/cbs.journal"], "search.study_storage: cannot open")]
    for argv, says in cases:
        assert main(argv + ["--dry-run"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err


def test_the_dry_run_leaves_no_directory_behind(tmp_path, capsys):
    out = tmp_path / "not" / "yet"
    assert main(["--output", str(out), "--set", f"storage_path={tmp_path / 'store'}", "--dry-run"]) == 0
    assert not (tmp_path / "not").exists() and not (tmp_path / "store").exists()


def test_run_search_validates_the_spec_it_is_given_before_ray_starts(a_file):
    import ray

    spec = load_spec(None)
    spec.training.budget_samples = -512  # changed after loading
    with pytest.raises(SpecError, match="training.budget_samples"):
        run_search(spec)
    with pytest.raises(SpecError, match="expected a SearchSpec .* or the path of a spec file, got dict"):
        run_search({"training": {"budget_samples": 512}})
    with pytest.raises(SpecError, match="--output: .* is a file"):
        run_search(load_spec(None), output_dir=str(a_file))
    assert not ray.is_initialized()


def test_a_path_is_loaded_and_a_given_spec_is_never_changed(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("name: from-a-file\n")
    assert as_spec(str(path)).name == "from-a-file"
    spec = load_spec(None)
    assert as_spec(spec) is not spec and as_spec(spec) == spec
    with pytest.raises(SpecError, match="no such file"):
        run_search(str(tmp_path / "missing.yaml"))


def test_two_searches_of_one_name_in_one_second_get_two_experiments(tmp_path, monkeypatch):
    from cbs_ray.tune import runner

    monkeypatch.setattr(runner.time, "strftime", lambda fmt: "20261201-101010")  # the same second
    spec = load_spec(None, [f"storage_path={tmp_path}"])
    first, second = runner.new_experiment(spec), runner.new_experiment(spec)
    assert [first[0], second[0]] == ["tiny-bert-sentiment-20261201-101010", "tiny-bert-sentiment-20261201-101010-2"]
    assert all((tmp_path / name).is_dir() for name, _ in (first, second))
    assert runner.new_experiment(spec, "branch")[0] == "tiny-bert-sentiment-branch-20261201-101010"
