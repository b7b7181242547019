"""A search method's own spec section lives in its folder and its registry entry names it (``MethodEntry.section``,
``settings_module``): the spec's YAML, ``--set``, the JSON Schema, ``cbs_spec.json`` and the validation read it from
the registry (``spec.sections``), so that a method registered from outside with its own section needs no edit of
``cbs_ray.spec``. Ray-free."""

import dataclasses

import pytest

from cbs_ray.records import method_registry
from cbs_ray.records.method_registry import MethodEntry, register_method
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.json_schema import spec_json_schema
from cbs_ray.spec.load import load_spec, spec_from_dict, spec_to_dict
from cbs_ray.spec.schema import SearchSpec
from helpers import sectioned_method
from helpers.sectioned_method import NAME, SECTION, SweepSettings


@pytest.fixture
def registry(monkeypatch):
    """The registry as it is, restored after the test (a registered method stays in this test alone)."""
    monkeypatch.setattr(method_registry, "_REGISTRY", dict(method_registry._REGISTRY))


def test_the_built_in_sections_are_their_folders_and_keep_their_keys_and_place():
    spec = SearchSpec()
    assert type(spec.section("branch")).__module__ == "cbs_ray.methods.branch.settings"
    assert type(spec.section("ladder")).__module__ == "cbs_ray.methods.ladder.settings"
    keys = list(spec_to_dict(spec))
    assert keys[keys.index("asha") + 1: keys.index("resources")] == ["branch", "ladder"]  # cbs_spec.json's order
    assert "method_sections" not in keys and "method_sections" not in spec_json_schema()["properties"]
    with pytest.raises(SpecError, match=r"^method_sections: unknown key \(known: asha, branch, data,"):
        load_spec(None, ["method_sections.branch={}"])


def test_a_registered_methods_section_works_with_yaml_set_the_schema_and_its_rules(registry, tmp_path):
    with pytest.raises(SpecError, match=f"^{SECTION}: unknown key"):  # before it is registered: no such key
        load_spec(None, [f"{SECTION}.points=5"])
    sectioned_method.register()
    space = tmp_path / "space.yaml"
    space.write_text(f"search:\n  method: {NAME}\n  batch_sizes: [16, 32]\n  num_trials: 2\n{SECTION}:\n  points: 5\n")
    spec = load_spec(space, [f"{SECTION}.widest=true"])
    assert spec.section(SECTION) == SweepSettings(points=5, widest=True)
    assert spec_to_dict(spec)[SECTION] == {"points": 5, "widest": True}
    assert spec_from_dict(spec_to_dict(spec)).section(SECTION) == SweepSettings(points=5, widest=True)  # --resume
    assert SearchSpec().section(SECTION) == SweepSettings()  # every spec holds it, at its defaults
    # its field check beside its field, its unknown keys, its rule: for its own specs alone
    with pytest.raises(SpecError, match=f"^{SECTION}.points: must be from 1 to 9, got 12"):
        load_spec(space, [f"{SECTION}.points=12"])
    with pytest.raises(SpecError, match=f"^{SECTION}.bogus: unknown key \\(known: points, widest\\)"):
        load_spec(space, [f"{SECTION}.bogus=1"])
    with pytest.raises(SpecError, match=f"^{SECTION}.widest: sweeps search.alpha_range, which is one point"):
        load_spec(space, [f"{SECTION}.widest=true", "search.alpha_range=[0.5, 0.5]"])
    load_spec(None, [f"{SECTION}.widest=true", "search.alpha_range=[0.5, 0.5]"])  # scratch: not its section
    # the shared refusals follow its entry's flags
    with pytest.raises(SpecError, match=f"^search.study_storage: search.method {NAME} keeps no Optuna study"):
        load_spec(space, ["search.study_storage=x.journal"])
    schema = spec_json_schema()
    assert schema["properties"][SECTION] == {"$ref": "#/$defs/SweepSettings"}
    sweep = schema["$defs"]["SweepSettings"]
    assert sweep["properties"]["points"]["description"] == "LR points per batch size (1 to 9)."
    assert sweep["additionalProperties"] is False


@pytest.mark.parametrize("entry,says", [
    (MethodEntry("lonely", "-lonely", "m", "m", section="lonely"), "section and settings_module go together"),
    (MethodEntry("lonely", "-lonely", "m", "m", settings_module="m"), "section and settings_module go together"),
    (MethodEntry("twin", "-twin", "m", "m", section="branch", settings_module="m"), "the section 'branch' is branch's"),
])
def test_an_entry_whose_section_cannot_be_is_refused(registry, entry, says):
    with pytest.raises(ValueError, match=says):
        register_method(entry)


@pytest.mark.parametrize("entry,says", [
    (MethodEntry("taken", "-taken", "m", "m", section="training", settings_module=sectioned_method.__name__),
     "^search.method: a registered method's section 'training' is a key the spec has already"),
    (MethodEntry("gone", "-gone", "m", "m", section="gone", settings_module="no.such.module"),
     "^search.method: gone's settings module no.such.module cannot be imported"),
    (MethodEntry("bare", "-bare", "m", "m", section="bare", settings_module="dataclasses"),
     "^search.method: bare's settings module dataclasses defines no SETTINGS dataclass"),
])
def test_a_section_that_cannot_be_read_is_one_line_when_a_spec_is_loaded(registry, entry, says):
    register_method(entry)
    with pytest.raises(SpecError, match=says):
        load_spec(None, [])


def test_the_schema_reads_every_settings_field_with_its_docstring():
    schema = spec_json_schema()
    for key in ("branch", "ladder"):
        cls = type(SearchSpec().section(key))
        defined = schema["$defs"][schema["properties"][key]["$ref"].rsplit("/", 1)[1]]
        assert set(defined["properties"]) == {f.name for f in dataclasses.fields(cls)}
        assert all(p.get("description") for p in defined["properties"].values()), key
