"""The seam every search method fills (``search.method``: ``scratch``, ``branch``, ``ladder``), after Ray Tune's
shape (a scheduler's pure bracket behind a thin adaptor) and Optuna's (one module per sampler behind
``BaseSampler``): a method is one module under ``tune/`` whose ``METHOD`` satisfies ``SearchMethod``, plus its
entry in ``tune.api.METHODS``; ``tune.driver`` does the Ray choreography once for every method (the session,
the experiment and its metadata, the "if killed" line, each stage's Tune run, resume, summarize, render, print,
trackers) and returns one ``tune.result.SearchResult``.

A method's steps: ``plan_lines`` and ``check`` (pure, before Ray: the plan a user checks first, and what the
prepared data must satisfy), ``run``/``resume`` (its Tune stages, through the driver's ``Stages``: they never
unpack the data nor write metadata themselves), ``summarize`` (pure: the experiment's history and metadata → a
``Reading`` with ``headline()`` and ``to_json()``) and ``render`` (the report's files). Its pure parts live in
``spec``/``analysis``/``report`` as the existing methods' do; methods import no one else's module (the
independence contracts in pyproject.toml), what two share lives in a module both import (``report.same_spec``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol

from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.names import default_report_dir, resume_command
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.tune.tracking import attach_report, enabled

if TYPE_CHECKING:  # pandas loads in a second: a --dry-run never needs it
    import pandas as pd

__all__ = ["SearchMethod", "Reading", "MethodAnswer", "check_batches_fit", "experiment_out", "if_killed_line",
           "attach_to_trackers"]


@dataclass(frozen=True)
class MethodAnswer:
    """The headline's answer of a method whose summary has no ``Answer`` of its own (branch mode, the ladder):
    the batch it stands behind, its bound ("lower": at least, "upper": at most, None: a value) and its line."""

    batch_size: Optional[int]
    bound: Optional[str]
    text: str


@dataclass(frozen=True)
class Reading:
    """What a method's ``summarize`` makes of an experiment: its typed summary (``analysis.summary_record.Summary``,
    ``analysis.branch_summary.BranchSummary`` or ``analysis.ladder_summary.LadderSummary``), the history it read,
    the headline and the answer; ``source`` is what ``render`` writes from (the from-scratch ``report.scratch.
    Report``), ``extras`` the method's other readings (branch mode's schedule experiment)."""

    summary: Any
    history: pd.DataFrame
    lines: tuple[str, ...]
    answer: Any
    source: Any = None
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


class SearchMethod(Protocol):
    """One search method's steps (module docstring)."""

    name: str
    """``search.method``'s value, and ``ExperimentMeta.method`` of the experiments it writes."""
    described: str
    """What the report command calls an experiment of it ("a branch search")."""
    report_flags: tuple[str, ...]
    """The report command's flags it reads beside ``--output`` (others are refused in one line)."""

    def plan_lines(self, spec: SearchSpec, prepared) -> list[str]:
        """The plan a user checks first (``--dry-run``, and printed as a search starts)."""

    def check(self, spec: SearchSpec, prepared) -> None:
        """What the prepared data must satisfy, on the driver before Ray starts (one ``SpecError`` line)."""

    def run(self, spec: SearchSpec, prepared, stages, probe: Optional[SearchSpec]) -> str:
        """The method's Tune stages through ``stages`` (``tune.driver.Stages``); returns the experiment's path."""

    def resume(self, spec: SearchSpec, path: str, meta: ExperimentMeta, stages) -> None:
        """Continue the killed experiment at ``path``: its stages restored, or started if they had not."""

    def summarize(self, path: str, meta: Optional[ExperimentMeta], *, tolerance: Optional[float] = None,
                  target: Optional[float] = None, turning_fit: Optional[str] = None) -> Reading:
        """The experiment's reading (no printing, nothing written)."""

    def render(self, reading: Reading, out: Path) -> Path:
        """The report's files in ``out``; returns the page's path."""

    def run_lines(self, reading: Reading) -> list[str]:
        """Lines a search prints before the headline at its end (the from-scratch per-batch table)."""

    def report_lines(self, page: Path, out: Path, path: str) -> list[str]:
        """What the report command prints after the headline."""


def experiment_out(meta: Optional[ExperimentMeta], output_dir: Optional[str]) -> Path:
    """Where ``python -m cbs_ray.report`` writes an experiment's report: ``output_dir``, else the method's own
    folder (``records.names.default_report_dir``: ``./cbs_results/<name>[-method]``; ``report`` for an experiment
    whose metadata cannot be read)."""
    if meta is None:
        return Path(output_dir or default_report_dir("report"))
    return Path(output_dir or default_report_dir(meta.name or "report", meta.method))


def if_killed_line(path: str, meta: ExperimentMeta) -> str:
    """The line every method prints once its experiment's metadata is written: where it is, and how to continue
    it if killed (from Python with the same objects where it runs on the user's own, else the command line)."""
    return f"experiment: {path}\n  if this run is killed, continue it with: " + (
        f"resume_search({path!r}, model_init=..., train_dataset=..., ...) in Python" if meta.user_objects
        else resume_command(path))


def attach_to_trackers(spec: SearchSpec, experiment_path: str, out: Path, answer: dict, headline: list[str]) -> None:
    """The report's files to each tracker's search run (``tune.tracking.attach_report``); a tracker that fails
    here costs nothing already written (the report is on disk), so it is one printed line."""
    if not enabled(spec.tracking):
        return
    try:
        lines = attach_report(spec, experiment_path, ExperimentMeta.read(experiment_path), out, answer, headline)
    except Exception as e:
        lines = [f"tracking: the report was written but not attached to the trackers: {type(e).__name__}: {e}"]
    print("\n".join(lines), flush=True)


def check_batches_fit(key: str, largest: int, train_examples: int) -> None:
    """Every batch within the training set: a larger one would fail every run at set-up (``key`` names the spec
    key the batches came from)."""
    if largest > train_examples:
        raise SpecError(f"{key}: {largest} is larger than the training set ({train_examples} examples); a batch "
                        f"must fit in it")
