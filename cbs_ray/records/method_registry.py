"""Every search method by its ``search.method`` name, in one registry: the one table that names the
methods. The spec's choice of ``search.method``, the Ray half the search runs (``tune.search_method.method_named``), the
report steps (``report.methods.report_steps``), the report's default folder (``records.names.default_report_dir``)
and the files a report may write (``report.folder``) are all read from it, so that a new method is one entry
here and its two modules, and an unknown name is one ``UnknownMethodError`` line wherever it comes from (a spec,
an experiment's stored metadata).

An entry names its two halves by their dotted module paths, imported only when asked for (``importlib``, in the
layer that runs them): a ``--dry-run`` loads its own method's module and no other's. The shape follows
Python's entry points (``importlib.metadata.EntryPoint``: a name and a module path resolved when loaded).
A method defined outside the package is added with ``register_method``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cbs_ray.records.storage import ReportError

__all__ = ["MethodEntry", "UnknownMethodError", "register_method", "method_entry", "method_names",
           "method_report_files", "BUILT_IN_METHODS", "DEFAULT_METHOD"]

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_SUFFIX = re.compile(r"(-[a-z0-9_]+)?\Z")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class UnknownMethodError(ReportError):
    """A method name no entry has (in a spec, or read back from an experiment's metadata): one line, exit 2."""


@dataclass(frozen=True)
class MethodEntry:
    """One search method: its name, where its report goes, its two halves and what it can do."""

    name: str
    """``search.method``'s value, and ``ExperimentMeta.method`` of the experiments it writes."""
    report_suffix: str
    """Its default report folder after the experiment's name: ``./cbs_results/<name><suffix>`` ("" or "-word"),
    so that one method's report never clears another's of the same spec."""
    search_module: str
    """The dotted path of its Ray half: a module whose ``METHOD`` satisfies ``tune.search_method.SearchMethod``."""
    report_module: str
    """The dotted path of its report half: a module whose ``REPORT`` satisfies ``report.reading.MethodReport``."""
    fixed_grid: bool = False
    """It trains a fixed grid of runs (no sampler chooses them)."""
    supports_study: bool = True
    """It can keep an Optuna study (``search.study_storage``)."""
    auto_batches: bool = True
    """It can take ``search.batch_sizes: auto`` (a probe run chooses the grid first)."""
    report_files: tuple[str, ...] = ()
    """Files its report writes beyond every method's own (``report.folder.COMMON_REPORT_FILES``, which lists the
    built-in ones)."""
    section: str | None = None
    """The spec's key of its own settings (e.g. ``branch:``), whose rules apply to its specs alone and whose validation
    switches need it (``spec.checks.reads_section``); None: it reads none. Set with ``settings_module``."""
    settings_module: str | None = None
    """The dotted path of the module whose ``SETTINGS`` is the dataclass of that section, its fields' checks beside
    them and its rules in its ``section_rule(spec)`` (``spec.sections``: every spec holds it, YAML, ``--set`` and the
    JSON Schema read it)."""
    loss_epsilon: bool = False
    """Its answer compares losses to ε, its section's ``tolerance`` and ``tolerance_relative`` (``branch.tolerance``),
    not to the turning point's ``search.tolerance``; for a loss metric the two are one (``spec.tolerance``). A spec of
    it recorded without ``tolerance_unit`` never used the latter (``spec.tolerance.as_recorded``)."""
    best_per_batch: bool = False
    """Its history gives each batch's best configuration at the budget (branch's control_configurations.py), which
    a schedule validation's fixed-batch controls may train at (``branch.controls_from``)."""

    def problem(self) -> str | None:
        """Why this entry cannot be registered, or None."""
        if not _NAME.match(self.name):
            return f"name must be lower-case letters, digits and _, starting with a letter, got {self.name!r}"
        if not _SUFFIX.match(self.report_suffix):
            return f"report_suffix must be '' or '-' and lower-case letters or digits, got {self.report_suffix!r}"
        bad = [m for m in (self.search_module, self.report_module) if not _MODULE.match(m)]
        if bad:
            return f"module paths must be dotted Python names, got {bad[0]!r}"
        if self.section is not None and not _NAME.match(self.section):
            return f"section must be a spec key (lower-case letters, digits and _), got {self.section!r}"
        if (self.section is None) != (self.settings_module is None):
            return "section and settings_module go together: the key and the module of its settings"
        if self.settings_module is not None and not _MODULE.match(self.settings_module):
            return f"module paths must be dotted Python names, got {self.settings_module!r}"
        bad = [f for f in self.report_files if "/" in f or "\\" in f or f in ("", ".", "..")]
        return f"report_files must be plain file names, got {bad[0]!r}" if bad else None


BUILT_IN_METHODS: tuple[MethodEntry, ...] = (
    MethodEntry("scratch", "", "cbs_ray.methods.scratch.search", "cbs_ray.methods.scratch.report",
                best_per_batch=True),
    MethodEntry("branch", "-branch", "cbs_ray.methods.branch.search", "cbs_ray.methods.branch.report", fixed_grid=True,
                supports_study=False, auto_batches=False, section="branch",
                settings_module="cbs_ray.methods.branch.settings", loss_epsilon=True),
    MethodEntry("ladder", "-ladder", "cbs_ray.methods.ladder.search", "cbs_ray.methods.ladder.report", fixed_grid=True,
                supports_study=False, auto_batches=False, report_files=("ladder.png",), section="ladder",
                settings_module="cbs_ray.methods.ladder.settings"),
)
"""The methods cbs-ray brings (docs/branch-mode.md, docs/ladder.md; scratch is the default)."""

DEFAULT_METHOD = "scratch"
"""``search.method`` where a spec or an experiment's metadata names none: the from-scratch search. The one place
outside the entries that says which method that is; every other module reads this name."""

_REGISTRY: dict[str, MethodEntry] = {entry.name: entry for entry in BUILT_IN_METHODS}


def register_method(entry: MethodEntry) -> None:
    """Add ``entry`` so that specs may name it and its experiments resume and report; registering the same entry
    again does nothing, another entry under a taken name or report suffix is a ``ValueError``."""
    problem = entry.problem()
    if problem:
        raise ValueError(f"register_method: {problem}")
    held = _REGISTRY.get(entry.name)
    if held == entry:
        return
    if held is not None:
        raise ValueError(f"register_method: the name {entry.name!r} is taken by {held}")
    clash = [e.name for e in _REGISTRY.values() if e.report_suffix == entry.report_suffix]
    if clash:
        raise ValueError(f"register_method: the report suffix {entry.report_suffix!r} is {clash[0]}'s")
    clash = [e.name for e in _REGISTRY.values() if entry.section is not None and e.section == entry.section]
    if clash:
        raise ValueError(f"register_method: the section {entry.section!r} is {clash[0]}'s")
    _REGISTRY[entry.name] = entry


def method_names() -> tuple[str, ...]:
    """Every registered method's name, the built-in ones first."""
    return tuple(_REGISTRY)


def method_entry(name: object) -> MethodEntry:
    """The entry of the method ``name``; ``UnknownMethodError`` (one line) for any other name."""
    entry = _REGISTRY.get(name) if isinstance(name, str) else None
    if entry is None:
        raise UnknownMethodError(f"unknown search method {str(name)[:100]!r} (known: {', '.join(_REGISTRY)})")
    return entry


def method_report_files() -> tuple[str, ...]:
    """The files the registered methods' reports write beyond every method's own, each once."""
    return tuple(dict.fromkeys(f for entry in _REGISTRY.values() for f in entry.report_files))
