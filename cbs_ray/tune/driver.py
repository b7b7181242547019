"""The one driver behind every search method (``tune.search_method.SearchMethod``): the Ray choreography written
once. A search: the method's plan and checks before Ray starts, the Ray session and where to watch it, the
method's Tune stages (each experiment's metadata, the "if killed" line and its Tune run through ``Stages``), then
summarize, render and print with the method's report steps (``report.methods``, the ones the report command
rebuilds a report with), the trackers, and one ``tune.result.SearchResult``. ``resume`` goes through the same
steps."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from cbs_ray.records.meta import FORMAT, ExperimentMeta
from cbs_ray.report.methods import report_steps
from cbs_ray.report.reading import Reading, report_and_summary_line
from cbs_ray.sources.object_checks import objects_meta
from cbs_ray.spec.load import spec_to_dict
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.trial_plans import SearchedPlans, TrialPlans
from cbs_ray.tune.owner import experiment_owner
from cbs_ray.tune.prepare import Prepared, data_fingerprint
from cbs_ray.tune.result import SearchResult
from cbs_ray.tune.runner import new_experiment, on_the_cluster, ray_session, run_tuner, tracker_callbacks_for
from cbs_ray.tune.search_method import SearchMethod, attach_to_trackers, if_killed_line
from cbs_ray.tune.tracking import start_mlflow_parent

__all__ = ["Stages", "run_method", "resume_method", "finish"]


class Stages:
    """What a method's ``run``/``resume`` call to run Tune: it holds the spec, the prepared data and the
    verbosity, so that no method unpacks the data, writes an experiment's metadata or prints the "if killed"
    line itself. Every experiment it opens is held (``tune.owner``) until ``held`` closes: a second driver cannot
    resume it meanwhile."""

    def __init__(self, spec: SearchSpec, prepared: Prepared, verbose: bool | int):
        self.spec, self.prepared, self.verbose = spec, prepared, verbose
        self.held = contextlib.ExitStack()

    def open_experiment(self, kind: str, fields) -> tuple[str, str, ExperimentMeta]:
        """A new experiment (``runner.new_experiment``: ``<name>[-kind]-<date>-<time>``) with its metadata written
        first: the spec, the data's fingerprint, what the user's objects were, the MLflow parent run, and the
        method's ``fields`` (a mapping, or a function of the experiment's name that returns one); prints where it
        is and how to continue it if killed. Returns (name, path, meta)."""
        spec, data = self.spec, self.prepared.data
        name, path = new_experiment(spec, kind)
        self.held.enter_context(experiment_owner(path))
        fields = fields(name) if callable(fields) else fields
        meta = ExperimentMeta.from_dict({  # the method is the spec's (a probe's spec is scratch's)
            "name": spec.name, "spec": spec_to_dict(spec), "format": FORMAT, "method": spec.search.method, **fields,
            "data_fingerprint": data_fingerprint(data), **objects_meta(data),
            **({"mlflow_parent_run_id": start_mlflow_parent(spec, path)} if spec.tracking.mlflow is not None else {})})
        meta.write(path)
        print(if_killed_line(path, meta), flush=True)
        return name, path, meta

    def tune(self, *, meta: Optional[ExperimentMeta] = None, name: Optional[str] = None,
             restore: Optional[str] = None, callbacks: Sequence[Any] = (), plans: Optional[TrialPlans] = None,
             progress_metric: Optional[tuple[str, str]] = None, expected_trials: Optional[Callable[[], int]] = None,
             **tune_config) -> str:
        """One Tune experiment of the prepared data (``runner.run_tuner``), new (``name``) or restored
        (``restore``), whose trials train what ``plans`` (``train.trial_plans``) hold for their points: a
        from-scratch trial of its searched point (``SearchedPlans``) where the method gives none. With ``meta``,
        the spec's trackers' callbacks beside ``callbacks``. Returns its path."""
        p = self.prepared
        trial_plans = plans or SearchedPlans(self.spec, p.budget_samples)
        trackers = tracker_callbacks_for(self.spec, p.budget_samples, trial_plans, meta) if meta is not None else []
        return run_tuner(self.spec, p.data, p.budget_samples, p.model_config, plans=trial_plans, verbose=self.verbose,
                         name=name, restore=restore, callbacks=[*callbacks, *trackers],
                         progress_metric=progress_metric, expected_trials=expected_trials, **tune_config)


def run_method(method: SearchMethod, spec: SearchSpec, prepared: Prepared, *, probe: Optional[SearchSpec] = None,
               out: Path, verbose: bool | int = False, address: Optional[str] = None) -> SearchResult:
    """The whole search of ``spec`` with ``method`` on Ray, its report written to ``out``. Without a probe the
    plan is printed and checked before Ray starts; with one (``batch_sizes: auto``) the method prints it once
    the probe has chosen the grid."""
    if probe is None:
        method.check(spec, prepared)
        for line in method.plan_lines(spec, prepared):
            print(line, flush=True)
    stages = Stages(spec, prepared, verbose)
    with stages.held:  # the experiments it opens, held until reported
        with ray_session(address, verbose=verbose) as context:
            on_the_cluster(spec, context)
            path = method.run(spec, prepared, stages, probe)
        return finish(method, spec, path, out)


def resume_method(method: SearchMethod, spec: SearchSpec, path: str, meta: ExperimentMeta, prepared: Prepared, *,
                  out: Path, verbose: bool | int = False, address: Optional[str] = None) -> SearchResult:
    """Continue the killed experiment at ``path`` (its ``meta``) with the method that wrote it, then report it; the
    caller holds ``path`` (``tune.owner``), and any experiment the method opens is held here."""
    stages = Stages(spec, prepared, verbose)
    with stages.held:
        with ray_session(address, verbose=verbose) as context:
            on_the_cluster(spec, context)
            print(f"resuming {path}", flush=True)
            method.resume(spec, path, meta, stages)
        return finish(method, spec, path, out)


def finish(method: SearchMethod, spec: SearchSpec, path: str, out: Path) -> SearchResult:
    """A search's end: the method's reading of the experiment (its report steps, ``report.methods``), its report
    written to ``out``, the answer printed, the report given to the trackers."""
    steps = report_steps(method.name)
    reading = steps.summarize(path, ExperimentMeta.read(path))
    page = steps.render(reading, out)
    # The answer first (README: "the first line is the answer"), then what it rests on (issue 47).
    lines = [*reading.headline(), *steps.run_lines(reading), report_and_summary_line(page, out, path)]
    print("\n".join(lines), flush=True)
    attach_to_trackers(spec, path, out, _answer_record(reading), reading.headline())
    return SearchResult(spec, reading, path, out)


def _answer_record(reading: Reading) -> dict:
    """The answer as the trackers get it: summary.json's ``answer`` from scratch, else the method's answer."""
    recorded = reading.summary.to_dict().get("answer")
    if recorded is not None or reading.answer is None:
        return recorded or {}
    return {"batch_size": reading.answer.batch_size, "bound": reading.answer.bound, "text": reading.answer.text}
