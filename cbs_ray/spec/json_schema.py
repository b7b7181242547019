"""The spec's JSON Schema, generated from its dataclasses (``cbs-ray schema``), for editors that validate
YAML as it is typed (e.g. ``# yaml-language-server: $schema=cbs-spec.schema.json``).

Pydantic (which Ray brings) reads the dataclasses' types, defaults and field docstrings. The schema says
what the loader refuses without running it: unknown keys in every section (``additionalProperties:
false``; the free-form maps such as ``model.config`` stay open), the types, and the choices of each
``Literal``. The checks that compare fields or read the data (``spec/checks.py``, ``spec/rules.py``) are
the loader's alone: a file the schema accepts can still fail ``cbs-ray search --dry-run``.
"""

from __future__ import annotations

import dataclasses
import typing

from cbs_ray.records.method_registry import method_names
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.spec.sections import METHOD_SECTIONS, section_classes

__all__ = ["spec_json_schema"]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _sections(cls) -> list[type]:
    """``cls`` and every dataclass its fields hold, depth first."""
    found, hints = [cls], typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        for arg in (hints[f.name], *typing.get_args(hints[f.name])):
            if dataclasses.is_dataclass(arg) and arg not in found:
                found += [c for c in _sections(arg) if c not in found]
    return found


def _sections_may_be_null(schema: dict) -> None:
    """A section written ``model: null`` (or left empty, ``model:``) takes its defaults in the loader
    (``spec.load``), so every section's definition admits null as well; an error inside a
    section still points at its key."""
    for section in schema.get("$defs", {}).values():
        if section.get("type") == "object":
            section["type"] = ["object", "null"]


def _method_sections_at_their_place(schema: dict, methods: dict[str, type]) -> None:
    """The methods' own sections (``spec.sections``) as the spec's keys where ``SearchSpec.method_sections`` is."""
    properties = {}
    for key, value in schema["properties"].items():
        if key == METHOD_SECTIONS:
            properties.update({k: {"$ref": f"#/$defs/{cls.__name__}"} for k, cls in methods.items()})
        else:
            properties[key] = value
    schema["properties"] = properties
    schema["$defs"] = dict(sorted(schema["$defs"].items()))


def spec_json_schema() -> dict:
    """The JSON Schema of a search-space YAML (``SearchSpec``): sections, keys, types, defaults, docs."""
    from pydantic import ConfigDict, TypeAdapter

    config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    methods = section_classes()
    added = []
    for cls in dict.fromkeys([*_sections(SearchSpec), *(c for m in methods.values() for c in _sections(m))]):
        # Pydantic's documented hook for a standard dataclass's config; set for this call only.
        if "__pydantic_config__" not in vars(cls):
            setattr(cls, "__pydantic_config__", config)
            added.append(cls)
    try:
        schema = TypeAdapter(SearchSpec).json_schema(mode="validation")
        for cls in methods.values():
            own = TypeAdapter(cls).json_schema(mode="validation", ref_template="#/$defs/{model}")
            schema["$defs"].update({**own.pop("$defs", {}), cls.__name__: own})
    finally:
        for cls in added:
            delattr(cls, "__pydantic_config__")
    _method_sections_at_their_place(schema, methods)
    _sections_may_be_null(schema)
    # search.method is a str checked against the registry: its choices are the registered methods'
    schema["$defs"]["SearchSection"]["properties"]["method"]["enum"] = list(method_names())
    return {"$schema": SCHEMA_DIALECT, "title": "cbs-ray search spec",
            "description": "A search-space YAML of cbs-ray (cbs-ray search --space FILE); every key is optional, "
                           "the default fills what is left out.", **{k: v for k, v in schema.items() if k != "title"}}
