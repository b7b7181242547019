"""The seam every search method fills (``search.method``: ``scratch``, ``branch``), after the way Tune looks up
a searcher by name: the same four functions for each, looked up from one table (``tune.api.METHODS``), so
that neither the command lines nor ``run_search`` fork on the method.

A new method is one module under ``tune/`` that defines these four and a ``METHOD``, plus its entry in
``tune.api.METHODS``; its pure parts go in ``spec``/``analysis``/``report`` as the existing methods' do."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.tune.tracking import attach_report, enabled

__all__ = ["SearchMethod", "check_batches_fit", "experiment_out", "if_killed_line", "attach_to_trackers"]


@dataclass(frozen=True)
class SearchMethod:
    """One search method's entry points."""

    name: str
    """``search.method``'s value, and ``ExperimentMeta.method`` of the experiments it writes."""
    plan_lines: Callable[[SearchSpec], list[str]]
    """``--dry-run``: the plan a user checks first, from the validated spec (its data prepared, nothing run)."""
    run: Callable[..., Any]
    """``run(spec, prepared, *, objects, probe, out, verbose, address)``: the whole search on Ray, its report
    written to ``out``; returns the method's result object. ``prepared`` is ``tune.prepare.prepare``'s
    (data, budget, model config), of ``probe`` (a ``tune.probe.probe_spec``) when the batch sizes are auto."""
    resume: Callable[..., Any]
    """``resume(spec, path, meta, prepared, *, out, verbose, address)``: continue the experiment at ``path``
    (its ``ExperimentMeta``), then report it to ``out``."""
    report: Callable[..., Any]
    """``report(path, meta, *, output_dir, tolerance, target, turning_fit)``: ``python -m cbs_ray.report``
    on an experiment of this method; prints the answer and where the report went."""


def experiment_out(meta: ExperimentMeta, output_dir: Optional[str]) -> Path:
    """Where ``python -m cbs_ray.report`` writes an experiment's report: ``output_dir``, else
    ``./cbs_results/<name>``."""
    return Path(output_dir or Path("cbs_results") / (meta.name or "report"))


def if_killed_line(path: str, meta: ExperimentMeta) -> str:
    """The line every method prints once its experiment's metadata is written: where it is, and how to continue
    it if killed (from Python with the same objects where it runs on the user's own, else the command line)."""
    return f"experiment: {path}\n  if this run is killed, continue it with: " + (
        f"resume_search({path!r}, model_init=..., train_dataset=..., ...) in Python" if meta.user_objects
        else f"python -m cbs_ray.search --resume {path}")


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
