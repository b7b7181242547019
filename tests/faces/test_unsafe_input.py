"""Issue 40: bad input on the command lines ends in one line and exit 2 before Ray starts, a name is one
safe folder name, the printed resume command is shell-quoted, and every method has its own report folder."""

import json
import shlex
import subprocess

import pytest

from cbs_ray.cli import main
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.names import default_report_dir, name_problem, resume_command
from cbs_ray.records.storage import META_FILE, ReportError
from cbs_ray.spec.load import load_spec


@pytest.mark.parametrize("argv, says", [
    (["search", "--dry-run", "--set", "name=.."], "name: must be one folder name"),
    (["search", "--dry-run", "--set", "name=."], "name: must be one folder name"),
    (["search", "--dry-run", "--set", "name=" + "x" * 300], "name: must be one folder name"),
    (["search", "--dry-run", "--set", "name=a\x00b"], "name"),
    (["search", "--dry-run", "--set", "name=a/b"], "name: must be one folder name"),
    (["search", "--dry-run", "--set", "name=a\tb"], "name"),
    (["search", "--dry-run", "--output", "o" * 5000], "--output: "),
    (["search", "--dry-run", "--output", "a\x00b"], "--output: contains a NUL"),
    (["report", "nowhere", "--output", "o" * 5000], "--output: "),
])
def test_unsafe_names_and_paths_are_one_line_and_exit_2(argv, says, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "cbs_results").exists()


@pytest.mark.parametrize("name, safe", [
    ("tiny-bert", True), ("x" * 100, True), ("x" * 101, False), ("..", False), (".", False), ("", False),
    ("../../x", False), ("a\\b", False), ("a\x00b", False), ("a\nb", False), (None, False),
])
def test_a_name_is_one_safe_folder_name(name, safe):
    assert (name_problem(name) is None) == safe


def _experiment(tmp_path, name):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / META_FILE).write_text(json.dumps({"name": name, "metric": "accuracy", "mode": "max", "spec": {}}))
    return exp


@pytest.mark.parametrize("name", ["../../x", "..", "a/b", "x" * 300])
def test_metadata_naming_a_path_is_refused_by_the_report(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exp = _experiment(tmp_path, name)
    with pytest.raises(ReportError, match="name must"):
        ExperimentMeta.read(str(exp))
    assert main(["report", str(exp)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]  # nothing written anywhere


def test_every_method_has_its_own_default_report_folder():
    folders = {method: default_report_dir("same", method) for method in ("scratch", "branch", "ladder")}
    assert len(set(folders.values())) == 3
    assert str(folders["scratch"]) == "cbs_results/same"
    for method in ("branch", "ladder"):
        spec = load_spec(None)
        spec.search.method = method  # results_dir reads only the name and the method
        assert spec.results_dir.name == f"{spec.name}-{method}"
    assert load_spec(None).results_dir.name == load_spec(None).name


@pytest.mark.parametrize("path", ["/ray/x$(touch PWNED)", "/my results/exp-1", "/ray/a'b", "/ray/plain-1"])
def test_the_resume_command_is_shell_quoted(path, tmp_path):
    command = resume_command(path)
    assert command.startswith("cbs-ray search --resume ")
    assert shlex.split(command) == ["cbs-ray", "search", "--resume", path]
    subprocess.run(["bash", "-n", "-c", command], check=True)  # parses as one simple command
    assert not (tmp_path / "PWNED").exists()


def test_help_and_the_ctrl_c_hint_name_the_cbs_ray_command(capsys):
    assert main(["search", "--help"]) == 0
    assert "python -m cbs_ray.search" not in capsys.readouterr().out


def test_the_ctrl_c_hint_is_cbs_rays_own_and_quoted(monkeypatch, capsys):
    from cbs_ray.tune import api, runner

    def interrupted(*_, **__):
        raise runner.SearchInterrupted("/ray/x$(touch PWNED)")

    monkeypatch.setattr(api, "run_search", interrupted)
    assert main(["search"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == ("interrupted: finished trials and checkpoints are kept; continue with: "
                           "cbs-ray search --resume '/ray/x$(touch PWNED)'")
