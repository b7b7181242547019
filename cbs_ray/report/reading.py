"""What every search method's report steps make of an experiment, and the steps themselves (``MethodReport``):
the pure half of a method (``tune.search_method.SearchMethod`` is its Ray half). A method's steps read the
experiment's history and metadata into a ``Reading`` (``summarize``), write the report's files (``render``) and
say what to print; ``report.methods`` holds them by ``search.method`` name, for the search's end
(``tune.driver``) and the report command (``report.command``) alike. Light: pandas only for the type."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Optional, Protocol, TypeVar

from cbs_ray.analysis.decision import NextSearch, next_search_base
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.method_registry import DEFAULT_METHOD, UnknownMethodError, method_entry, method_names
from cbs_ray.records.names import default_report_dir
from cbs_ray.spec.paths import expand_user

if TYPE_CHECKING:  # pandas loads in a second: a --dry-run never needs it
    import pandas as pd

__all__ = ["HeadlineAnswer", "MethodAnswer", "Reading", "MethodReport", "experiment_out", "report_and_summary_line",
           "next_search_of"]


class HeadlineAnswer(Protocol):
    """What every method's answer gives (from scratch its ``Summary.answer``, else a ``MethodAnswer``): the batch the
    report stands behind, its bound and the headline's line. The search's end hands these to the trackers."""

    @property
    def batch_size(self) -> Optional[int]: ...

    @property
    def bound(self) -> Optional[str]: ...

    @property
    def text(self) -> str: ...


@dataclass(frozen=True)
class MethodAnswer:
    """The headline's answer of a method whose summary has no ``Answer`` of its own (branch mode, the ladder):
    the batch it stands behind, its bound ("lower": at least, "upper": at most, None: a value) and its line."""

    batch_size: Optional[int]
    bound: Optional[str]
    text: str


class MethodSummary(Protocol):
    """What every method's typed summary gives (``methods.scratch.summary.Summary``,
    ``methods.branch.reading.BranchSummary``, ``methods.ladder.reading.LadderSummary``): summary.json."""

    def to_json(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


SummaryT = TypeVar("SummaryT", bound=MethodSummary)
"""A method's summary type: ``Reading[LadderSummary]`` is the ladder's reading."""


class ReportSource(Protocol):
    """What a method's ``render`` may keep from its ``summarize`` to write from: a report that writes its files."""

    def write(self, directory: str | PathLike) -> Path:
        """Every file of the report in ``directory``; returns the page's path."""
        ...


@dataclass(frozen=True)
class Reading(Generic[SummaryT]):
    """What a method's ``summarize`` makes of an experiment: its typed summary (``methods.scratch.summary.Summary``,
    ``methods.branch.reading.BranchSummary`` or ``methods.ladder.reading.LadderSummary``), the history it read,
    the headline and the answer; ``source`` is what ``render`` writes from, where the method keeps one (from scratch,
    its ``Report``), ``extras`` the method's other readings (branch mode's schedule experiment)."""

    summary: SummaryT
    history: pd.DataFrame
    lines: tuple[str, ...]
    answer: Optional[HeadlineAnswer]
    source: Optional[ReportSource] = None
    extras: dict = field(default_factory=dict)

    def headline(self) -> list[str]:
        """The answer first, then the readings: what the search prints and report.md opens with."""
        return list(self.lines)

    def to_json(self) -> str:
        """summary.json."""
        return self.summary.to_json()

    @property
    def name(self) -> Optional[str]:
        return getattr(self.summary, "name", None)


class MethodReport(Protocol):
    """One search method's report steps (module docstring): pure, no Ray, nothing that trains."""

    name: str
    """``search.method``'s value, and ``ExperimentMeta.method`` of the experiments it writes."""
    described: str
    """What the report command calls an experiment of it ("a branch search")."""
    report_flags: tuple[str, ...]
    """The report command's flags it reads beside ``--output`` (others are refused in one line)."""

    def summarize(self, path: str, meta: Optional[ExperimentMeta], *, tolerance: Optional[float] = None,
                  target: Optional[float] = None, turning_fit: Optional[str] = None) -> Reading:
        """The experiment's reading (no printing, nothing written)."""

    def render(self, reading: Reading, out: Path) -> Path:
        """The report's files in ``out``; returns the page's path."""

    def run_lines(self, reading: Reading) -> list[str]:
        """Lines a search prints after the headline at its end (the from-scratch per-batch table)."""

    def report_lines(self, page: Path, out: Path, path: str) -> list[str]:
        """What the report command prints after the headline."""


def experiment_out(meta: Optional[ExperimentMeta], output_dir: Optional[str]) -> Path:
    """Where ``python -m cbs_ray.report`` writes an experiment's report: ``output_dir``, else the method's own
    folder (``records.names.default_report_dir``: ``./cbs_results/<name>[-method]``; ``report`` for an experiment
    whose metadata cannot be read)."""
    if output_dir:
        return expand_user(output_dir, "--output")
    if meta is None:
        return default_report_dir("report")
    return default_report_dir(meta.name or "report", meta.method)


def report_and_summary_line(page: Path, out: Path, path: str) -> str:
    """Where a report went: its page, its summary.json and the experiment it reads (what every search prints at its
    end, and the report command after a branch or ladder experiment's headline)."""
    return f"Report: {page}\nSummary: {out / 'summary.json'}  (experiment: {path})"


def next_search_of(spec: Optional[Mapping[str, Any]]) -> NextSearch:
    """What the decision's next step keeps of an experiment's recorded ``spec`` (``analysis.decision.next_search_base``
    against the default spec, loaded here: the spec layer sits beside the report, not below the analysis). Of the
    methods' own sections only the experiment's method's is kept (``_others_sections``): a from-scratch search's next
    step does not carry the ladder's settings its space file also holds."""
    if not isinstance(spec, Mapping):
        return next_search_base(None, {})
    import json

    from cbs_ray.spec.load import load_spec, spec_to_dict

    others = _others_sections(spec)
    own = {k: v for k, v in spec.items() if k not in others}
    return next_search_base(own, json.loads(json.dumps(spec_to_dict(load_spec(None, [])))))


def _others_sections(spec: Mapping[str, Any]) -> set[str]:
    """The spec sections of the registered methods other than the one ``spec`` runs (``search.method``); none
    where it names a method not registered."""
    search = spec.get("search")
    method = (search.get("method") if isinstance(search, Mapping) else None) or DEFAULT_METHOD
    try:
        own = method_entry(method).section
    except UnknownMethodError:
        return set()
    return {s for s in (method_entry(n).section for n in method_names()) if s is not None and s != own}
