"""The seam every search method fills (``search.method``: ``scratch``, ``branch``, ``ladder``), after Ray Tune's
shape (a scheduler's pure bracket behind a thin adaptor) and Optuna's (one module per sampler behind
``BaseSampler``). A method has two halves, both named by its entry in the one registry
(``records.method_registry``; ``register_method`` adds one defined elsewhere): its Ray half, a module whose
``METHOD`` satisfies ``SearchMethod`` (``tune.api.method_named``), and its pure report steps,
``report.reading.MethodReport`` in its report module (``report.methods.report_steps``), which the
report command reads without importing anything of Tune's. ``tune.driver`` does the Ray choreography once for
every method (the session, the experiment and its metadata, the "if killed" line, each stage's Tune run,
resume, then the report steps' summarize, render and print, and the trackers) and returns one
``tune.result.SearchResult``.

The Ray half's steps: ``plan_lines`` and ``check`` (pure, before Ray: the plan a user checks first, and what the
prepared data must satisfy) and ``run``/``resume`` (its Tune stages, through the driver's ``Stages``: they never
unpack the data nor write metadata themselves). Methods import no one else's module (the independence
contracts in pyproject.toml); what two share lives in a module both import (``methods.branch.same_spec``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Protocol

from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.names import resume_command
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.tune.tracking import attach_report, enabled

__all__ = ["SearchMethod", "check_batches_fit", "if_killed_line", "attach_to_trackers"]


class SearchMethod(Protocol):
    """One search method's steps (module docstring)."""

    name: str
    """``search.method``'s value, and ``ExperimentMeta.method`` of the experiments it writes: the name its report
    entry has in ``records.method_registry``."""

    def plan_lines(self, spec: SearchSpec, prepared) -> list[str]:
        """The plan a user checks first (``--dry-run``, and printed as a search starts)."""

    def check(self, spec: SearchSpec, prepared) -> None:
        """What the prepared data must satisfy, on the driver before Ray starts (one ``SpecError`` line)."""

    def run(self, spec: SearchSpec, prepared, stages, probe: Optional[SearchSpec]) -> str:
        """The method's Tune stages through ``stages`` (``tune.driver.Stages``); returns the experiment's path."""

    def resume(self, spec: SearchSpec, path: str, meta: ExperimentMeta, stages) -> None:
        """Continue the killed experiment at ``path``: its stages restored, or started if they had not."""


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
