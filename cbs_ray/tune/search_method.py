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
from cbs_ray.records.names import default_report_dir
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec

__all__ = ["SearchMethod", "check_batches_fit", "check_spec_objects_only", "experiment_out"]


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
    the method's own folder (``records.meta.default_report_dir``: ``./cbs_results/<name>[-method]``)."""
    return Path(output_dir or default_report_dir(meta.name or "report", meta.method))


def check_spec_objects_only(method: str, objects) -> None:
    """A method that runs only on the spec's model and data (``branch``: the trunk's checkpoints hold the loop's
    own state; ``ladder``) refuses the user's own ``model_init`` and datasets, in one line."""
    if objects is not None:
        raise SpecError(f"search.method: {method} runs on the spec's model and data, not on your own model_init and "
                        f"datasets yet; use search.method scratch")


def check_batches_fit(key: str, largest: int, train_examples: int) -> None:
    """Every batch within the training set: a larger one would fail every run at set-up (``key`` names the spec
    key the batches came from)."""
    if largest > train_examples:
        raise SpecError(f"{key}: {largest} is larger than the training set ({train_examples} examples); a batch "
                        f"must fit in it")
