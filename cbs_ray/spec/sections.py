"""The search methods' own sections of the spec (``branch:``, ``ladder:``, a registered method's): each method's
folder defines its section, a dataclass with its fields' checks beside them and its rules in ``section_rule(spec)``,
and its registry entry names it (``MethodEntry.section``, ``MethodEntry.settings_module``). ``SearchSpec`` holds one
of each registered method's (``SearchSpec.method_sections``, read with ``SearchSpec.section``); the loader, ``--set``
and the JSON Schema take the keys and classes from here, so that a method registered from outside with its own section
needs no edit of this package. The module is imported by its dotted path when a spec is built (``importlib``): the
spec sits below the methods and never imports them by name.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING, Any

from cbs_ray.records.method_registry import MethodEntry, method_entry, method_names
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.tolerance import Tolerance, resolve_tolerances

if TYPE_CHECKING:  # a type only: the schema imports this module
    from cbs_ray.spec.schema import SearchSpec

__all__ = ["METHOD_SECTIONS", "section_classes", "default_sections", "settings_class", "spec_tolerances"]

METHOD_SECTIONS = "method_sections"
"""``SearchSpec``'s field that holds the methods' sections: in the YAML and ``cbs_spec.json`` each is a key of the
spec's own at this field's place (``branch:`` between ``asha:`` and ``resources:``), never this name."""


def settings_class(entry: MethodEntry) -> type:
    """The dataclass of ``entry``'s section (its settings module's ``SETTINGS``); a ``SpecError`` for a module
    that is missing or defines none."""
    assert entry.settings_module is not None, entry
    try:
        module = importlib.import_module(entry.settings_module)
    except ImportError as e:
        raise SpecError(f"search.method: {entry.name}'s settings module {entry.settings_module} cannot be imported "
                        f"({e})") from None
    cls = getattr(module, "SETTINGS", None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise SpecError(f"search.method: {entry.name}'s settings module {entry.settings_module} defines no SETTINGS "
                        f"dataclass")
    return cls


def section_classes() -> dict[str, type]:
    """Every registered method's section by its key, in the registry's order: the key and its dataclass."""
    entries = (method_entry(name) for name in method_names())
    return {e.section: settings_class(e) for e in entries if e.section is not None}


def default_sections() -> dict[str, Any]:
    """Each section at its defaults (what a spec that leaves the section out holds)."""
    return {key: cls() for key, cls in section_classes().items()}


def spec_tolerances(spec: SearchSpec) -> tuple[Tolerance, Tolerance]:
    """The tolerances (``spec.tolerance.resolve_tolerances``) of a spec's ``search`` section and the section of ε: that
    of the method whose registry entry's answer reads it (``MethodEntry.loss_epsilon``; branch mode's ``branch:``), its
    ``tolerance`` and ``tolerance_relative``. Its section, not the spec's method: for a loss metric the two are one
    whichever method runs (a from-scratch search that its branch search's fair controls read)."""
    s = spec.search
    sections = [method_entry(n).section for n in method_names() if method_entry(n).loss_epsilon]
    epsilon = spec.section(sections[0]) if sections and sections[0] is not None else None
    return resolve_tolerances(metric=s.metric, mode=s.mode, unit=s.tolerance_unit, search_tolerance=s.tolerance,
                              branch_tolerance=getattr(epsilon, "tolerance", None),
                              branch_relative=bool(getattr(epsilon, "tolerance_relative", False)))
