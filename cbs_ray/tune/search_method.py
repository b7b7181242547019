"""The seam every search method fills (``search.method``: ``scratch``, ``branch``, ``ladder``), after Ray Tune's
shape (a scheduler's pure bracket behind a thin adaptor) and Optuna's (one module per sampler behind
``BaseSampler``). A method has two halves, both named by its entry in the one registry
(``records.method_registry``; ``register_method`` adds one defined elsewhere): its Ray half, a module whose
``METHOD`` satisfies ``SearchMethod`` (``method_named``), and its pure report steps,
``report.reading.MethodReport`` in its report module (``report.methods.report_steps``), which the
report command reads without importing anything of Tune's. ``tune.driver`` does the Ray choreography once for
every method (the session, the experiment and its metadata, the "if killed" line, each stage's Tune run,
resume, then the report steps' summarize, render and print, and the trackers) and returns one
``tune.result.SearchResult``.

The Ray half's steps: ``outline_lines`` and ``check`` (pure, before Ray: the outline a user checks first, and what the
prepared data must satisfy) and ``stages``: its Tune stages in order (``Stage``: the search, then the repeats or
the schedule run), each able to start afresh and to restore its Tune experiment. The driver runs them, records
before each starts which stage runs and its experiment (``ExperimentMeta.stages``) with what the stage decided
(``Launch.fields``), and resumes any method the same way from that record; a stage never writes metadata, never
opens a Ray session and never unpacks the data itself. The probe of ``batch_sizes: auto`` is the driver's own
step before the stages. Methods import no one else's module (the independence contracts in pyproject.toml);
what two share lives in a module both import (``methods.branch.same_spec``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol, Sequence, Union, cast

from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.method_registry import method_entry
from cbs_ray.records.names import resume_command
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.tune.tracking import attach_report, enabled

if TYPE_CHECKING:  # the driver imports this module: its launcher is named for the type checker only
    from cbs_ray.tune.driver import ExperimentLauncher

__all__ = ["SearchMethod", "Stage", "Launch", "method_named", "check_batches_fit", "if_killed_line",
           "attach_to_trackers"]

Fields = Union[Mapping[str, Any], Callable[[str, str], Mapping[str, Any]]]
"""What a stage records in the experiment's metadata: a mapping, or a function of its Tune experiment's (name,
path) that returns one."""


@dataclass(frozen=True)
class Launch:
    """A stage's Tune experiment as its ``start`` decided it. The driver names the experiment (the first stage's
    ``runner.new_experiment(spec, kind)``, a later one ``<first experiment's name>-<stage name>`` beside it),
    records the stage and ``fields`` in the first experiment's metadata, prints where it is (the first stage),
    then calls ``run``."""

    run: Callable[[str, ExperimentMeta], str]
    """Its Tune run (through the driver's ``ExperimentLauncher.tune``), given the experiment's name and the metadata the
    driver wrote (the trackers' callbacks read it); returns the experiment's path."""
    fields: Fields = field(default_factory=dict)
    """What the stage decided, recorded before it starts (the first stage: the metric, the budget ...; branch's
    schedule run: the schedule and its criterion), so that its report reads it and a resume trains the same."""
    kind: str = ""
    """The first stage only: the word its experiment's name takes after the spec's (``ladder``:
    ``<name>-ladder-<date>``)."""


@dataclass(frozen=True)
class Stage:
    """One of a method's Tune stages, in the order the driver runs them. A stage's experiment is recorded in the
    first experiment's metadata (``ExperimentMeta.stages``) before it starts; a resume treats the stages before
    the recorded one as done, restores the recorded one (started afresh when Tune cannot restore it) and starts
    the later ones (``tune.driver.resume_actions``)."""

    name: str
    """What the metadata records it by (``search``, ``repeats``, ``schedule``); a later stage's experiment is named
    after it."""
    start: Callable[[ExperimentLauncher, Optional[str]], Optional[Launch]]
    """Run it fresh: given the driver's launcher and the first experiment's path (None for the first stage),
    its ``Launch``, or None when what earlier stages produced leaves nothing to run (printed why)."""
    restore: Callable[[ExperimentLauncher, str, ExperimentMeta], None]
    """Continue its killed Tune experiment (the path given, the first experiment's metadata) from Tune's
    state."""


def method_named(name: str) -> SearchMethod:
    """The method ``search.method`` (or an experiment's metadata) names: the ``METHOD`` of the module its entry in
    ``records.method_registry`` names; any other name is an ``UnknownMethodError``. Its module is imported here,
    when asked for: a ``--dry-run`` loads no other method's (nor, for the ladder, any of Ray's machinery before its
    outline is printed)."""
    module = importlib.import_module(method_entry(name).search_module)
    return cast(SearchMethod, module.METHOD)


class SearchMethod(Protocol):
    """One search method's steps (module docstring)."""

    name: str
    """``search.method``'s value, and ``ExperimentMeta.method`` of the experiments it writes: the name its report
    entry has in ``records.method_registry``."""

    def outline_lines(self, spec: SearchSpec, prepared) -> list[str]:
        """The outline a user checks first (``--dry-run``, and printed as a search starts)."""

    def check(self, spec: SearchSpec, prepared) -> None:
        """What the prepared data must satisfy, on the driver before Ray starts (one ``SpecError`` line)."""

    def stages(self, spec: SearchSpec, prepared) -> Sequence[Stage]:
        """Its Tune stages in order, the same for a run and its resume (from the spec and the prepared data; what
        a later one trains its ``start`` reads from the earlier stages' experiments)."""


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
