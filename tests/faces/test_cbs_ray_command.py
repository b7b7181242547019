"""The ``cbs-ray`` console script: its subcommands reach the same command lines, a bad one is one line
and exit 2, and ``cbs-ray schema`` prints a JSON Schema that the shipped spaces pass and a misspelt key or
a wrong type fails (validated with the ``jsonschema`` library)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import tomllib
import yaml

from cbs_ray.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_the_console_script_is_declared():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"cbs-ray": "cbs_ray.cli:main"}


def test_help_lists_the_three_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"cbs-ray {c}" in out for c in ("search", "report", "schema"))


@pytest.mark.parametrize("argv, rc, message", [
    ([], 2, "usage: cbs-ray"),
    (["serach"], 2, "error: unknown command 'serach': choose search, report, schema, predict or plan"),
    (["search", "--bogus"], 2, "error: unrecognized arguments: --bogus"),
    (["report"], 2, "error: the following arguments are required: experiment_dir"),
    (["schema", "extra"], 2, "error: unrecognized arguments: extra"),
])
def test_a_bad_command_line_is_short_and_exits_2(argv, rc, message, capsys):
    assert main(argv) == rc
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_subcommand_help_names_the_console_script(capsys):
    assert main(["search", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: cbs-ray search") and "--verbose" in out


def _schema(capsys) -> dict:
    assert main(["schema"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_shipped_space_passes_the_schema(capsys):
    validator = jsonschema.Draft202012Validator(_schema(capsys))
    spaces = sorted((ROOT / "search_spaces").glob("*.yaml"))
    assert spaces
    for space in spaces:
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(yaml.safe_load(space.read_text()))]
        assert errors == [], space.name


@pytest.mark.parametrize("document, where", [
    ({"trainig": {"budget_samples": 1024}}, []),                    # a misspelt section
    ({"training": {"budget_sample": 1024}}, ["training"]),          # a misspelt key
    ({"training": {"budget_samples": "many"}}, ["training", "budget_samples"]),  # a wrong type
    ({"data": {"source": "ftp"}}, ["data", "source"]),               # not one of the choices
])
def test_the_schema_refuses_what_the_loader_refuses(document, where, capsys):
    errors = list(jsonschema.Draft202012Validator(_schema(capsys)).iter_errors(document))
    assert errors and any(list(e.path) == where for e in errors)


def test_free_form_maps_stay_open(capsys):
    config = {"model": {"config": {"model_type": "gpt2", "n_layer": 2, "anything_hf_takes": True}}}
    assert list(jsonschema.Draft202012Validator(_schema(capsys)).iter_errors(config)) == []


def test_keys_carry_their_docstrings(capsys):
    training = _schema(capsys)["$defs"]["TrainingSpec"]["properties"]
    assert training["budget_samples"]["description"]


@pytest.mark.skipif(shutil.which("cbs-ray") is None, reason="the package is not installed in this environment")
def test_the_installed_script_runs():
    done = subprocess.run(["cbs-ray", "schema"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout)["title"] == "cbs-ray search spec"
    done = subprocess.run([sys.executable, "-m", "cbs_ray.search", "--bogus"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2


@pytest.mark.parametrize("document", [{"model": None}, {"training": None, "asha": None}, {"ladder": None}])
def test_the_schema_accepts_a_null_section_as_the_loader_does(document, capsys):
    # Issue 40 row 16: the loader reads `model: null` as the section's defaults; the schema refused it.
    from cbs_ray.spec.load import spec_from_dict

    spec_from_dict(dict(document))
    assert list(jsonschema.Draft202012Validator(_schema(capsys)).iter_errors(document)) == []
