"""Loading a spec: a YAML file (or none: the embedded default) and ``--set key=value`` overrides,
built into the typed sections with every value's type checked; ``spec_to_dict``/``spec_from_dict`` for
``cbs_spec.json``. Loading never starts Ray and never touches the network.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

import yaml

from cbs_ray.spec.checks import admits_none, join_key, type_hints_of
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.paths import expand_user
from cbs_ray.spec.rules import validate
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.spec.sections import METHOD_SECTIONS, section_classes
from cbs_ray.spec.yaml_text import MAX_DEPTH, MAX_SPEC_BYTES, SpecYAMLError, parse

__all__ = ["load_spec", "spec_from_dict", "spec_to_dict", "apply_overrides"]


# ---- loading ---------------------------------------------------------------------------------------

def load_spec(path: str | os.PathLike | None = None, overrides: Sequence[str] = ()) -> SearchSpec:
    """Read a YAML spec (or the embedded default when ``path`` is None), apply ``key=value`` overrides
    and validate. Only safe YAML is parsed."""
    raw = {} if path is None else _read_spec_file(path)
    apply_overrides(raw, overrides)
    _absolute_data_path(raw, Path.cwd())  # a --set data.path: relative to the working folder, stored absolute
    return spec_from_dict(raw)


def _absolute_data_path(raw: dict, base: Path) -> None:
    """``data.path`` (a folder of Parquet shards) made absolute against ``base`` where it is relative, so that
    ``cbs_spec.json`` (and ``--resume`` from another folder) names the same shards. ``~`` paths are left to
    expand where they are read."""
    data = raw.get("data")
    if isinstance(data, dict) and isinstance(data.get("path"), str) and data["path"] \
            and not data["path"].startswith("~") and not Path(data["path"]).is_absolute():
        data["path"] = str((base / data["path"]).resolve())


def _read_spec_file(path: str | os.PathLike) -> dict:
    """The raw mapping of a YAML spec file. An empty file (nothing but whitespace and comments) is an
    error, not the defaults: the user meant to write something there."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"--space: no such file: {path}")
    if p.stat().st_size > MAX_SPEC_BYTES:  # before reading it: a spec is a few KB
        raise SpecError(f"--space: {path} is larger than {MAX_SPEC_BYTES // 1_000_000} MB "
                        f"({p.stat().st_size} bytes); a spec is a few KB")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a UTF-8 text file") from None
    if "\x00" in text:  # binary that happens to decode; YAML's own error would quote the bytes
        raise SpecError(f"{path}: not a UTF-8 text file")
    try:
        raw = parse(text)
    except SpecYAMLError as e:
        raise SpecError(f"--space: {path}: {e}") from None
    except yaml.YAMLError as e:
        raise SpecError(f"--space: {path} is not valid YAML ({str(e).splitlines()[0]})") from None
    if raw is None and not _has_content(text):  # `null` is content; comments and `---` are not
        raise SpecError(f"{path} is empty")
    raw = {} if raw is None else raw  # `null` alone: the defaults; `[]`, `0`, `""` are not a spec
    if not isinstance(raw, dict):
        raise SpecError(f"--space: {path} must hold a mapping at the top level")
    # Relative data files are relative to the spec file, so a spec travels with its data.
    data = raw.get("data")
    if isinstance(data, dict):
        for key in ("train_file", "eval_file"):
            if isinstance(data.get(key), str) and not expand_user(data[key], f"data.{key}").is_absolute():
                data[key] = str((p.parent / data[key]).resolve())
    _absolute_data_path(raw, p.parent)
    return raw


def _has_content(text: str) -> bool:
    markers = (yaml.StreamStartToken, yaml.StreamEndToken, yaml.DocumentStartToken, yaml.DocumentEndToken,
               yaml.DirectiveToken)
    return any(not isinstance(token, markers) for token in yaml.scan(text, Loader=yaml.SafeLoader))


def apply_overrides(raw: dict, overrides: Sequence[str]) -> dict:
    """Apply ``dotted.key=value`` strings (values parsed as YAML scalars/lists) onto a raw spec dict."""
    for item in overrides:
        if "=" not in item:
            raise SpecError(f"--set {item}: expected key=value")
        key, _, text = item.partition("=")
        try:
            value = parse(text)
        except SpecYAMLError as e:
            raise SpecError(f"--set {key}: {e}") from None
        except yaml.YAMLError:
            raise SpecError(f"--set {key}: cannot parse value {text!r}") from None
        node, cls = raw, SearchSpec
        parts = key.strip().split(".")
        if len(parts) > MAX_DEPTH:  # deeper keys ran into RecursionError after --dry-run passed
            raise SpecError(f"--set {key[:60]}...: {len(parts)} levels deep; a spec key has at most {MAX_DEPTH}")
        for part in parts[:-1]:
            if node.get(part) is None:
                # Not given (or an empty section): a section starts empty; a mapping the spec leaves at its
                # default (model.config, search.batch_sizes) starts from that default, so that one key of it
                # can be set.
                node[part] = _default_mapping(cls, part)
            node = node[part]
            cls = _section_class(cls, part)
            if not isinstance(node, dict):
                raise SpecError(f"--set {key}: {part} is not a section")
        node[parts[-1]] = value
    return raw


def _section_class(cls, name: str):
    """The dataclass of section ``name`` of ``cls`` (None: not a section, or ``cls`` is not one); a search method's
    own section of the spec is its registry entry's (``spec.sections``)."""
    if cls is None or not dataclasses.is_dataclass(cls):
        return None
    if cls is SearchSpec and name in section_classes():
        return section_classes()[name]
    return _section_of(typing.get_type_hints(cls).get(name))


def _section_of(hint: Any):
    """The dataclass a field's type hint names, also when the section is optional (``Optional[MlflowSpec]``:
    absent or null turns it off, a mapping, even an empty one, turns it on); None for a plain field."""
    if dataclasses.is_dataclass(hint):
        return hint
    inner = [a for a in typing.get_args(hint) if a is not type(None)] if admits_none(hint) else []
    return inner[0] if len(inner) == 1 and dataclasses.is_dataclass(inner[0]) else None


def _default_mapping(cls: Optional[type], name: str) -> dict:
    """What an override into ``name`` of ``cls`` starts from: {} for a section, a copy of a mapping-valued
    field's default, {} otherwise."""
    if cls is None or not dataclasses.is_dataclass(cls) or _section_class(cls, name) is not None:
        return {}
    default = getattr(cls(), name, None) if name in {f.name for f in dataclasses.fields(cls)} else None
    return copy.deepcopy(default) if isinstance(default, dict) else {}


def spec_from_dict(raw: dict) -> SearchSpec:
    spec = _build(SearchSpec, raw, "", _method_sections())
    validate(spec)
    return spec


def _method_sections() -> dict[str, type]:
    """The registered methods' sections (``spec.sections``); a ``SpecError`` for one whose key is the spec's own."""
    sections = section_classes()
    taken = sorted(set(sections) & {f.name for f in dataclasses.fields(SearchSpec)})
    if taken:
        raise SpecError(f"search.method: a registered method's section {taken[0]!r} is a key the spec has already; "
                        f"register it under another")
    return sections


def spec_to_dict(spec: SearchSpec) -> dict:
    """The spec's mapping (``cbs_spec.json``): every section by its key, the methods' own at their place."""
    out: dict[str, Any] = {}
    for key, value in dataclasses.asdict(spec).items():
        out.update(value if key == METHOD_SECTIONS else {key: value})
    return out


def _build(cls, raw: Any, where: str, method_sections: Optional[dict[str, type]] = None):
    """``cls`` built from ``raw``; for the whole spec, ``method_sections`` are the methods' own sections' keys and
    classes, which ``SearchSpec.method_sections`` holds."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SpecError(f"{where or 'spec'}: expected a mapping, got {type(raw).__name__}")
    hints = type_hints_of(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    sections = method_sections or {}
    if method_sections is not None:
        names = (names - {METHOD_SECTIONS}) | set(sections)
    unknown = sorted(set(raw) - names)
    if unknown:
        raise SpecError(f"{join_key(where, unknown[0])}: unknown key (known: {', '.join(sorted(names))})")
    values: dict[str, Any] = {}
    built: dict[str, Any] = {}
    for key, value in raw.items():
        path = join_key(where, key)
        if key in sections:
            built[key] = _build(sections[key], value, path)
            continue
        hint = hints[key]
        section = _section_of(hint)
        if section is not None and value is None and admits_none(hint):
            values[key] = None
        elif section is not None:
            values[key] = _build(section, value, path)
        else:
            values[key] = _check_type(value, hint, path)
    if method_sections is not None:
        values[METHOD_SECTIONS] = {key: built[key] if key in built else section() for key, section in sections.items()}
    return cls(**values)


def _check_type(value: Any, hint: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _check_type(value, inner[0], path)
    if origin is Literal:
        if value not in args:
            raise SpecError(f"{path}: must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise SpecError(f"{path}: expected true/false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{path}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string; users mean a number
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"{path}: expected a number, got {value!r}")
        if not math.isfinite(value):  # NaN passes every comparison the validation makes
            raise SpecError(f"{path}: expected a finite number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise SpecError(f"{path}: expected a string, got {value!r}")
        return value
    if hint in (list, dict):
        if not isinstance(value, hint):
            raise SpecError(f"{path}: expected a {'list' if hint is list else 'mapping'}, got {value!r}")
        return value
    return value
