"""The one registry of search methods (issue 46): every name table reads it, an unknown name is one line wherever
it comes from (a spec, an experiment's stored metadata), and a method defined outside the package is added with
``register_method`` (``tests/helpers/renamed_method.py``)."""

import json
from pathlib import Path

import pytest

from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.method_registry import (
    DEFAULT_METHOD,
    MethodEntry,
    UnknownMethodError,
    method_entry,
    method_names,
    method_report_files,
    register_method,
)
from cbs_ray.records.names import default_report_dir
from cbs_ray.records.storage import META_FILE, ReportError
from helpers import renamed_method

META = {"name": "lm", "metric": "accuracy", "mode": "max", "spec": {"name": "lm"}}


def test_the_built_in_methods_and_their_report_folders():
    assert method_names()[:3] == ("scratch", "branch", "ladder")
    assert [default_report_dir("x", m) for m in ("scratch", "branch", "ladder")] == \
        [Path("cbs_results/x"), Path("cbs_results/x-branch"), Path("cbs_results/x-ladder")]
    assert method_entry("ladder").report_files == ("ladder.png",) and "ladder.png" in method_report_files()
    assert (method_entry("branch").auto_batches, method_entry("scratch").auto_batches) == (False, True)


def test_the_rules_that_depend_on_the_method_read_its_entry():
    """The default method, the section each reads, whose answer reads ε, whose history gives a best configuration
    per batch: what the spec's rules, ``--resume`` and branch's fair controls ask of an entry (issue 46)."""
    from cbs_ray.spec.schema import SearchSpec

    assert DEFAULT_METHOD == method_names()[0] == SearchSpec().search.method == ExperimentMeta.from_dict(META).method
    assert {n: method_entry(n).section for n in ("scratch", "branch", "ladder")} == \
        {"scratch": None, "branch": "branch", "ladder": "ladder"}
    assert [n for n in method_names()[:3] if method_entry(n).loss_epsilon] == ["branch"]
    assert [n for n in method_names()[:3] if method_entry(n).best_per_batch] == ["scratch"]


@pytest.mark.parametrize("name", ["../evil", "scratch2", "", None, 3, "Scratch"])
def test_an_unknown_name_is_one_line_and_never_steers_a_report_path(name):
    """Issue 47 defect 3: ``REPORT_SUFFIX.get(method, '-' + method)`` put a tampered metadata's method in the path."""
    with pytest.raises(UnknownMethodError, match=r"^unknown search method .* \(known: scratch, branch, ladder"):
        default_report_dir("x", name)
    with pytest.raises(UnknownMethodError) as caught:
        ExperimentMeta.from_dict({**META, "method": name})
    assert isinstance(caught.value, ReportError) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("the experiment's metadata names an unknown search method")


@pytest.mark.parametrize("entry, says", [
    (MethodEntry("Bad", "-bad", "m", "m"), "name must be lower-case"),
    (MethodEntry("bad", "/../x", "m", "m"), "report_suffix must be"),
    (MethodEntry("bad", "-bad", "m/x", "m"), "module paths must be dotted"),
    (MethodEntry("bad", "-bad", "m", "m", report_files=("../x",)), "report_files must be plain"),
    (MethodEntry("bad", "-bad", "m", "m", section="branch.tolerance"), "section must be a spec key"),
    (MethodEntry("scratch", "-other", "m", "m"), "the name 'scratch' is taken"),
    (MethodEntry("other", "-ladder", "m", "m"), "the report suffix '-ladder' is ladder's"),
])
def test_an_entry_that_cannot_be_registered_is_refused_and_nothing_changes(entry, says):
    before = method_names()
    with pytest.raises(ValueError, match=says):
        register_method(entry)
    assert method_names() == before


def test_a_method_defined_outside_the_package_is_resolved_by_every_lookup(monkeypatch):
    from cbs_ray.report.folder import report_files
    from cbs_ray.report.methods import report_steps
    from cbs_ray.spec.errors import SpecError
    from cbs_ray.spec.json_schema import spec_json_schema
    from cbs_ray.spec.load import load_spec
    from cbs_ray.tune.api import method_named

    name = renamed_method.NAME
    with pytest.raises(SpecError, match=f"search.method: must be one of scratch, branch, ladder.*got '{name}'"):
        load_spec(None, [f"search.method={name}"])
    renamed_method.register()
    renamed_method.register()  # the same entry again: nothing changes
    assert method_names().count(name) == 1 and method_entry(name) is renamed_method.ENTRY
    assert method_named(name) is renamed_method.METHOD and report_steps(name) is renamed_method.REPORT
    assert default_report_dir("x", name) == Path("cbs_results/x-renamed") and "renamed.txt" in report_files()
    spec = load_spec(None, [f"search.method={name}"])
    assert spec.results_dir.name == f"{spec.name}-renamed"
    assert name in spec_json_schema()["$defs"]["SearchSection"]["properties"]["method"]["enum"]
    assert ExperimentMeta.from_dict({**META, "method": name}).method == name
    # its capability flags: no probe-chosen grid, no Optuna study (the generic rule speaks for it)
    with pytest.raises(SpecError, match=f"search.batch_sizes: auto is not available with search.method {name}"):
        load_spec(None, [f"search.method={name}", "search.batch_sizes=auto"])
    with pytest.raises(SpecError, match=f"search.study_storage: search.method {name} keeps no Optuna study"):
        load_spec(None, [f"search.method={name}", "search.study_storage=x.journal"])


def test_a_tampered_method_in_stored_metadata_is_exit_2_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from cbs_ray.cli import main

    experiment = tmp_path / "exp"
    experiment.mkdir()
    (experiment / META_FILE).write_text(json.dumps({**META, "method": "../../outside"}))
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(experiment)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown search method '../../outside'" in err and "nothing was written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"] and sorted(os_names(experiment)) == [META_FILE]
    assert main(["search", "--resume", str(experiment)]) == 2
    assert "unknown search method '../../outside'" in capsys.readouterr().err


def os_names(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir()]
