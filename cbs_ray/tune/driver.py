"""The one driver behind every search method (``tune.search_method.SearchMethod``): the Ray choreography written
once. A search: the method's outline and checks before Ray starts, the one Ray session and where to watch it, the
probe with ``batch_sizes: auto`` (its own experiment, in the same session), the method's stages in order
(``tune.search_method.Stage``: each recorded in the experiment's metadata before it starts, with what it decided,
the "if killed" line, its Tune run through the ``ExperimentLauncher``), then summarize, render and print with the
method's report steps (``report.methods``, the ones the report command rebuilds a report with), the trackers, and one
``tune.result.SearchResult``. ``resume_method`` reads the stage record back (``ExperimentMeta.stage_record``) and
goes on from it for any method (``resume_actions``); ``probe_only`` is ``--probe``'s session."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence

from cbs_ray.records.meta import FORMAT, ExperimentMeta
from cbs_ray.report.methods import report_steps
from cbs_ray.report.reading import Reading, report_and_summary_line
from cbs_ray.sources.object_checks import objects_meta
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import spec_to_dict
from cbs_ray.spec.resolve import apply_batch_grid
from cbs_ray.spec.rules import refuse_what_the_method_cannot_do
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.trial_plans import SearchedPlans, TrialPlans
from cbs_ray.tune.owner import experiment_owner
from cbs_ray.tune.prepare import Prepared, data_fingerprint, prepare
from cbs_ray.tune.probe import probe_grid
from cbs_ray.tune.result import SearchResult
from cbs_ray.tune.runner import (
    SearchInterrupted,
    new_experiment,
    on_the_cluster,
    ray_session,
    run_tuner,
    tracker_callbacks_for,
)
from cbs_ray.tune.search_method import Launch, SearchMethod, Stage, attach_to_trackers, if_killed_line, method_named
from cbs_ray.tune.search_space import outline_lines
from cbs_ray.tune.tracking import start_mlflow_parent

__all__ = ["ExperimentLauncher", "run_method", "resume_method", "probe_only", "run_probe", "run_stages",
           "resume_actions", "finish"]


class ExperimentLauncher:
    """The launcher a method's stages run Tune through: it holds the spec, the prepared data and the verbosity,
    so that no method unpacks the data, writes an experiment's metadata or prints the "if killed" line itself.
    Every experiment it opens is held (``tune.owner``) until ``held`` closes: a second driver cannot resume it
    meanwhile."""

    def __init__(self, spec: SearchSpec, prepared: Prepared, verbose: bool | int,
                 held: Optional[contextlib.ExitStack] = None):
        self.spec, self.prepared, self.verbose = spec, prepared, verbose
        self.held = held if held is not None else contextlib.ExitStack()

    def for_spec(self, spec: SearchSpec, prepared: Prepared) -> ExperimentLauncher:
        """A launcher of another spec and its data (the probe's; the search's on the probe's grid) whose
        experiments are held with this one's, until the same ``held`` closes."""
        return ExperimentLauncher(spec, prepared, self.verbose, self.held)

    def open_experiment(self, kind: str, fields) -> tuple[str, str, ExperimentMeta]:
        """A new experiment (``runner.new_experiment``: ``<name>[-kind]-<date>-<time>``) with its metadata written
        first: the spec, the data's fingerprint, what the user's objects were, the MLflow parent run, and the
        method's ``fields`` (a mapping, or a function of the experiment's (name, path) that returns one); prints
        where it is and how to continue it if killed. Returns (name, path, meta)."""
        spec, data = self.spec, self.prepared.data
        name, path = new_experiment(spec, kind)
        self.held.enter_context(experiment_owner(path))
        fields = fields(name, path) if callable(fields) else fields
        meta = ExperimentMeta.from_dict({  # the method is the spec's (a probe's spec is scratch's)
            "name": spec.name, "spec": spec_to_dict(spec), "format": FORMAT, "method": spec.search.method, **fields,
            "data_fingerprint": data_fingerprint(data), **objects_meta(data),
            **({"mlflow_parent_run_id": start_mlflow_parent(spec, path)} if spec.tracking.mlflow is not None else {})})
        meta.write(path)
        print(if_killed_line(path, meta), flush=True)
        return name, path, meta

    def launch(self, stage: str, launch: Launch, first: Optional[tuple[str, str]] = None) -> str:
        """Run the stage named ``stage`` as ``launch`` says: the first (``first`` None) opens the experiment
        (``open_experiment``), a later one is ``<first's name>-<stage>`` beside the first (``first``: its stage's
        name and its path); either is recorded in the first experiment's metadata (``ExperimentMeta.stages``, with
        ``launch.fields``) before its Tune run starts. Returns its path."""
        if first is None:
            name, path, meta = self.open_experiment(launch.kind, lambda name, path: {
                **_fields(launch, name, path), "stages": [{"name": stage, "experiment": path}]})
            return launch.run(name, meta)
        first_stage, first_path = first
        name = f"{Path(first_path).name}-{stage}"
        path = f"{self.spec.storage_uri.rstrip('/')}/{name}"
        meta = ExperimentMeta.read(first_path).updated(_fields(launch, name, path))
        earlier = [(n, e) for n, e in meta.stage_record(first_stage, first_path) if n != stage]
        meta.stages = [{"name": n, "experiment": e} for n, e in [*earlier, (stage, path)]]
        meta.write(first_path)
        with resumed_as(first_path):
            return launch.run(name, meta)

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


def _fields(launch: Launch, name: str, path: str) -> dict[str, Any]:
    """What ``launch`` records for its experiment ``name`` at ``path``."""
    return dict(launch.fields(name, path) if callable(launch.fields) else launch.fields)


@contextlib.contextmanager
def resumed_as(first: str):
    """A later stage's Ctrl-C (``runner.SearchInterrupted``) names the first experiment, the one ``--resume``
    continues (its metadata records the stage): before, it named the later stage's own, which has none."""
    try:
        yield
    except SearchInterrupted as e:
        if e.experiment_path == first:
            raise
        raise SearchInterrupted(first) from None


def run_stages(launcher: ExperimentLauncher, planned: Sequence[Stage]) -> str:
    """Every stage of ``planned`` in order, each started afresh (``Stage.start``) and recorded before its Tune run
    (``ExperimentLauncher.launch``); returns the first experiment's path, the one the report reads."""
    first: Optional[tuple[str, str]] = None
    for stage in planned:
        launch = stage.start(launcher, first[1] if first else None)
        if launch is None:
            if first is None:
                raise ValueError(f"the first stage ({stage.name}) must start an experiment")
            continue
        path = launcher.launch(stage.name, launch, first)
        first = first or (stage.name, path)
    if first is None:
        raise ValueError("a method has at least one stage")
    return first[1]


Action = tuple[Literal["done", "restore", "start"], Optional[str]]
"""What a resume does with one stage, and the experiment it is (done, restored) or None (started)."""


def resume_actions(names: Sequence[str], recorded: Sequence[tuple[str, str]],
                   can_restore: Callable[[str], bool]) -> list[Action]:
    """What a resume does with each of a method's stages (``names``, in order), from the stage record
    (``ExperimentMeta.stage_record``: (name, experiment) in the order they started): the stages before the last
    recorded one are done (``("done", its experiment)``), that one is restored (``("restore", its experiment)``)
    where Tune can restore it and started afresh (``("start", None)``) where it cannot (killed before Tune saved its
    state), every later one is started. A recorded name the method has not is a ``SpecError``."""
    experiments = dict(recorded)
    unknown = [name for name in experiments if name not in names]
    if unknown or not recorded:
        raise SpecError(f"--resume: the experiment's metadata records the stages {', '.join(experiments) or 'none'}; "
                        f"its method has {', '.join(names)}")
    at = names.index(recorded[-1][0])
    actions: list[Action] = []
    for i, name in enumerate(names):
        if i < at:
            actions.append(("done", experiments.get(name)))
        elif i == at and can_restore(experiments[name]):
            actions.append(("restore", experiments[name]))
        else:
            actions.append(("start", None))
    return actions


def resume_stages(launcher: ExperimentLauncher, planned: Sequence[Stage], path: str, meta: ExperimentMeta) -> None:
    """Go on with the killed experiment at ``path`` (``resume_actions``): the recorded stage restored or started,
    the later ones started, each recorded before it starts."""
    from ray import tune  # Ray only where a search runs

    first = (planned[0].name, path)
    actions = resume_actions([s.name for s in planned], meta.stage_record(*first), tune.Tuner.can_restore)
    if actions[0][0] == "start":  # tune.api checked it first: the experiment itself is never started again
        raise SpecError(f"--resume: {path}: Tune has no experiment state to restore there")
    for stage, (action, experiment) in zip(planned, actions):
        if action == "restore" and experiment is not None:
            with resumed_as(path):
                stage.restore(launcher, experiment, ExperimentMeta.read(path))
        elif action == "start":
            launch = stage.start(launcher, path)
            if launch is not None:
                launcher.launch(stage.name, launch, first)


def run_probe(probe: SearchSpec, prepared: Prepared, launcher: ExperimentLauncher) -> list[int]:
    """The probe (``tune.probe``: one short trial of ``probe``, its own experiment, held with ``launcher``'s) in the
    driver's Ray session, through its method's stages; returns the proposed batch-size grid."""
    budget = prepared.budget_samples
    print(f"probe: {outline_lines(probe, budget)[1].strip()}, {budget} samples", flush=True)
    path = run_stages(launcher.for_spec(probe, prepared), method_named(probe.search.method).stages(probe, prepared))
    return probe_grid(probe, path, prepared.train_examples)[1]


def run_method(method: SearchMethod, spec: SearchSpec, prepared: Prepared, *, probe: Optional[SearchSpec] = None,
               out: Path, verbose: bool | int = False, address: Optional[str] = None) -> SearchResult:
    """The whole search of ``spec`` with ``method`` on Ray, its report written to ``out``. Without a probe the
    outline is printed and checked before Ray starts; with one (``batch_sizes: auto``, a method whose registry entry
    takes it: ``prepared`` is the probe's) the probe runs first in the same Ray session, then the search's own data
    are prepared on the grid it chose and the outline printed."""
    refuse_what_the_method_cannot_do(method.name, auto_batch_sizes=probe is not None, study=False)
    if probe is None:
        method.check(spec, prepared)
        for line in method.outline_lines(spec, prepared):
            print(line, flush=True)
    launcher = ExperimentLauncher(spec, prepared, verbose)
    with launcher.held:  # the experiments it opens, held until reported
        with ray_session(address, verbose=verbose) as context:
            on_the_cluster(spec, context)
            if probe is not None:
                launcher = _after_the_probe(method, spec, run_probe(probe, prepared, launcher), launcher)
            path = run_stages(launcher, method.stages(spec, launcher.prepared))
        return finish(method, spec, path, out)


def _after_the_probe(method: SearchMethod, spec: SearchSpec, grid: list[int],
                     launcher: ExperimentLauncher) -> ExperimentLauncher:
    """The spec on the probe's grid, its own data prepared (the user's objects again where it runs on them), its
    outline checked and printed; a launcher of it that holds what ``launcher`` holds."""
    for change in apply_batch_grid(spec, grid):
        print(f"auto batch sizes: {change}", flush=True)
    probed = launcher.prepared
    prepared = prepare(spec, probed.data if probed.on_objects else None)
    method.check(spec, prepared)
    for line in method.outline_lines(spec, prepared):
        print(line, flush=True)
    return launcher.for_spec(spec, prepared)


def probe_only(probe: SearchSpec, prepared: Prepared, *, verbose: bool | int = False,
               address: Optional[str] = None) -> list[int]:
    """``--probe``: the probe alone (``run_probe``) in a Ray session of the driver's; returns the proposed grid."""
    launcher = ExperimentLauncher(probe, prepared, verbose)
    with launcher.held:
        with ray_session(address, verbose=verbose) as context:
            on_the_cluster(probe, context)
            return run_probe(probe, prepared, launcher)


def resume_method(method: SearchMethod, spec: SearchSpec, path: str, meta: ExperimentMeta, prepared: Prepared, *,
                  out: Path, verbose: bool | int = False, address: Optional[str] = None) -> SearchResult:
    """Continue the killed experiment at ``path`` (its ``meta``) with the method that wrote it (``resume_stages``),
    then report it; the caller holds ``path`` (``tune.owner``), and any experiment a stage opens is held here."""
    launcher = ExperimentLauncher(spec, prepared, verbose)
    with launcher.held:
        with ray_session(address, verbose=verbose) as context:
            on_the_cluster(spec, context)
            print(f"resuming {path}", flush=True)
            resume_stages(launcher, method.stages(spec, prepared), path, meta)
        return finish(method, spec, path, out)


def finish(method: SearchMethod, spec: SearchSpec, path: str, out: Path) -> SearchResult:
    """A search's end: the method's reading of the experiment (its report steps, ``report.methods``), its report
    written to ``out``, the answer printed, the report given to the trackers."""
    steps = report_steps(method.name)
    reading = steps.summarize(path, ExperimentMeta.read(path))
    page = steps.render(reading, out)
    # The answer first (README: "the first line is the answer"), then what it rests on.
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
