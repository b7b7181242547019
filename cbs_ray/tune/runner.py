"""The generic runner every search method calls: the Ray session, one Tune experiment of
``run_trial`` (new or restored), the points config of a fixed list of trials, the trials' names, and what
ends a search early (nothing fits, Ctrl-C).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from cbs_ray.ray_internals import quiet_token_notice, single_machine
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.moved_modules import moved_module_names
from cbs_ray.records.names import resume_command
from cbs_ray.records.storage import ReportError
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.run_plan import trial_name
from cbs_ray.train.trial import DataRef, in_process, run_trial, trial_resources
from cbs_ray.train.trial_plans import TrialPlans
from cbs_ray.tune import disk_watch
from cbs_ray.tune.dashboard import monitoring_lines
from cbs_ray.tune.disk_watch import DiskWatch, StorageLow
from cbs_ray.tune.nothing_fits import NothingFitsStopper, NothingFitsWatch, nothing_fits_in_experiment
from cbs_ray.tune.placement import check_placeable
from cbs_ray.tune.progress import ProgressBoard, SearchProgress
from cbs_ray.tune.ray_temp import (
    PRIVATE_TEMP_DIR,
    RAY_SOCKET_TAIL,
    UNIX_SOCKET_PATH_MAX,
    fits_ray_sockets,
    private_temp_dir,
)
from cbs_ray.tune.search_space import max_concurrent
from cbs_ray.tune.tracking import enabled

__all__ = ["ray_session", "DoesNotFit", "SearchInterrupted", "RayDidNotStart", "ray_start_failure", "private_temp_dir",
           "fits_ray_sockets", "no_tune_restore_advice", "no_trial_traceback",
           "PRIVATE_TEMP_DIR", "RAY_SOCKET_TAIL", "UNIX_SOCKET_PATH_MAX", "note_stop_signal", "stop_signals",
           "check_ended", "UnfinishedSearch", "unfinished_message", "quiet_tune"]


@contextlib.contextmanager
def ray_session(address: str | None = None, *, verbose: bool | int = True):
    """Connect to ``address`` (or RAY_ADDRESS), or start a local Ray with its dashboard on 127.0.0.1
    only; yields the RayContext (None when Ray was already up) and shuts down whatever was started here.
    Not ``verbose``: the workers' log lines stay in Ray's log files (the session's ``logs/``, the dashboard)
    instead of reaching this console; a trial's error still reaches the report and the progress display."""
    import ray

    started_here, context = not ray.is_initialized(), None
    if started_here:
        quiet: dict[str, Any] = {} if verbose else {"log_to_driver": False}
        try:
            if address or os.environ.get("RAY_ADDRESS"):
                context = ray.init(address=address, logging_level=logging.WARNING, **quiet)
            else:
                context = start_local_ray(**quiet)
        except (ConnectionError, RuntimeError, OSError, ValueError, TimeoutError) as e:
            raise RayDidNotStart(ray_start_failure(e, address)) from e
        except Exception as e:  # Ray raises a bare Exception, sometimes with no message, when a node cannot start
            if type(e) is not Exception:
                raise
            raise RayDidNotStart(ray_start_failure(e, address)) from e
    try:
        yield context
    finally:
        if started_here:
            ray.shutdown()


class RayDidNotStart(SpecError):
    """``ray.init`` failed: the message says why (Ray's own words, or where its logs are when it gave none)."""


def ray_start_failure(e: BaseException, address: str | None) -> str:
    """One line for a Ray that did not start: its message, else where its logs are."""
    said = str(e).strip().splitlines()[0] if str(e).strip() else ""
    where = f"the cluster at {address}" if address else \
        f"a local Ray (logs: {private_temp_dir()}/ray/session_latest/logs)"
    return f"Ray did not start: {said or type(e).__name__ + ' with no message'} ({where})"


def start_local_ray(**options):
    """``ray.init`` of a local Ray for this machine alone: every server on loopback (``single_machine``: the
    node's IP is 127.0.0.1, so the GCS, the raylet, the agents, the workers and the metrics endpoints bind it),
    the dashboard on 127.0.0.1, and the session's files under a directory only this user can enter (Ray makes
    its own directories world-writable: ``ray/`` inside ``private_temp_dir()``). Returns the RayContext."""
    import ray

    quiet = options.get("log_to_driver") is False  # a search without --verbose
    with single_machine(), (quiet_token_notice() if quiet else contextlib.nullcontext()):
        return ray.init(include_dashboard=True, dashboard_host="127.0.0.1", logging_level=logging.WARNING,
                        _temp_dir=f"{private_temp_dir()}/ray", **options)


def on_the_cluster(spec: SearchSpec, context=None) -> None:
    """Once Ray is up, before Tune starts: print where to watch the search (the dashboard, how to sign in)
    and end it at once if no node can ever hold one trial (``tune.placement.NeverPlaced``)."""

    for line in monitoring_lines(context):
        print(line, flush=True)
    check_placeable(spec)


def tracker_callbacks_for(spec: SearchSpec, budget: int, plans: TrialPlans, meta: ExperimentMeta) -> list:
    """The Tune callbacks of the trackers the spec turns on (none when it turns on none)."""
    if not enabled(spec.tracking):
        return []
    # MLflow's and W&B's imports take seconds: only a search that tracks pays them.
    from cbs_ray.tune.tracker_callbacks import tracking_callbacks

    return tracking_callbacks(spec, budget, plans, meta)


def points_config(points: list[dict]) -> dict:
    """Tune settings that run exactly ``points``, one trial each, in order (the space only names the
    keys for Tune; every trial takes its values from a point)."""
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    def values(key):  # every value the points give ``key`` (lists too), so Tune warns of none
        return list({repr(p[key]): p[key] for p in points if key in p}.values())

    return {"param_space": {key: tune.choice(values(key)) for key in points[0]},
            "search_alg": BasicVariantGenerator(points_to_evaluate=points), "num_samples": len(points)}


def _trial_limit(search_alg, limit: int) -> int | None:
    """Tune's ``max_concurrent_trials`` for ``search_alg`` at ``limit`` trials at once. Tune wraps a Searcher in a
    ConcurrencyLimiter at that number but warns of (and ignores) it beside a variant generator (a grid, the
    repeats): the generator takes the limit itself. A searcher that paces itself (bisect's: it waits on results,
    and its alpha candidates must all start while the first ones wait paused at their rung, which Tune's
    ConcurrencyLimiter would count as running) has none."""
    from ray.tune.search.basic_variant import BasicVariantGenerator

    if isinstance(search_alg, BasicVariantGenerator):
        search_alg.max_concurrent = limit
        return None
    return None if getattr(search_alg, "paces_itself", False) else limit


def run_tuner(spec: SearchSpec, data, budget: int, config, *, plans: TrialPlans, verbose: bool | int,
              name: str | None = None, param_space: dict | None = None, restore: str | None = None,
              callbacks: Sequence[Any] = (), progress_metric: tuple[str, str] | None = None,
              expected_trials: Callable[[], int] | None = None, stopper=None, **tune_config) -> str:
    """One Tune experiment of ``run_trial`` (the search, or the repeats), new or restored from the
    experiment path ``restore``; returns its path.

    The data (the spec path's arrays or the user's objects) go into Ray's object store once, here; every
    trial and each of its Ray Train workers gets their ``DataRef`` and fetches them where the loop runs
    (zero-copy for numpy arrays), instead of a multi-worker trial pickling them into its Train run. A
    restored experiment puts them afresh. ``plans`` (``train.trial_plans``: built by the method on the driver) go to
    every trial, which trains the plan they hold for its point. ``stopper``: a Tune ``Stopper`` beside the one that ends
    the search when nothing fits (the ladder's, ``methods.ladder.search``). Not ``verbose``: the progress display
    (``tune.progress``, ranking the trials by ``progress_metric``, else the spec's metric) instead of Tune's tables
    (``verbose`` is Tune's level: True is 1)."""
    import ray
    from ray import tune

    # Held until this function returns, i.e. until Tune has run every trial: the data stay in the object
    # store that long (with_parameters keeps only the small DataRef).
    data_ref = DataRef.put(data)
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, spec=spec, data_ref=data_ref, budget_samples=budget, model_config=config,
                             plans=plans),
        trial_resources(spec))
    # Every report checkpoints; keeping two per trial forces an experiment snapshot now and then,
    # which is cheap here and is what makes a killed search resumable.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if restore:
        # Tune restores the experiment's own stopper and callbacks (pickled with it, DiskWatch too): read the
        # reason back from the error files.
        # An experiment written before the methods moved into cbs_ray.methods names their old modules in its pickles.
        with moved_module_names():
            tuner = tune.Tuner.restore(restore, trainable=trainable, resume_unfinished=True, resume_errored=True)
            disk_watch.stopped_for.clear()
            with quiet_tune(verbose):
                grid = tuner.fit()
        _raise_if_storage_low(grid.experiment_path)
        _raise_if_nothing_fits(nothing_fits_in_experiment(grid.experiment_path), grid.experiment_path)
        return _finished(grid, expected_trials=0)
    nothing_fits = NothingFitsStopper()
    if not verbose:
        planned = expected_trials() if expected_trials is not None else tune_config.get("num_samples", 1)
        callbacks = [*callbacks, progress_display(spec, budget, planned, plans, progress_metric)]
    trial_limit = _trial_limit(tune_config.get("search_alg"), max_concurrent(spec, ray.cluster_resources()))
    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(max_concurrent_trials=trial_limit,
                                    # A finished in-process trial's process (torch and transformers
                                    # imported) runs the next trial: seconds saved per trial. Tune
                                    # cannot reset a trial that ran a TorchTrainer, so not for those.
                                    reuse_actors=in_process(spec),
                                    trial_name_creator=_trial_name, trial_dirname_creator=_trial_name,
                                    **tune_config),
        param_space=param_space,
        run_config=tune.RunConfig(
            name=name, storage_path=spec.storage_uri, verbose=int(verbose),
            stop=nothing_fits if stopper is None else tune.stopper.CombinedStopper(nothing_fits, stopper),
            callbacks=[NothingFitsWatch(nothing_fits), DiskWatch(spec.storage_uri), *callbacks],
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            # An in-process trial whose process dies restarts from its last checkpoint; a TorchTrainer
            # trial restarts its workers itself (trial.py), so Tune does not restart it again.
            failure_config=tune.FailureConfig(max_failures=spec.resources.max_failures if in_process(spec) else 0)),
    )
    disk_watch.stopped_for.clear()  # what an earlier search in this process saw is not this one's
    with quiet_tune(verbose):
        grid = tuner.fit()
    _raise_if_storage_low(grid.experiment_path)
    _raise_if_nothing_fits(nothing_fits.reason, grid.experiment_path)
    # A searcher may start fewer trials than it was given (branch mode's, whose checkpoint never came).
    expected = expected_trials() if expected_trials is not None else tune_config.get("num_samples", 1)
    return _finished(grid, expected_trials=expected)


stop_signals: list = []
"""When Tune's own SIGINT/SIGUSR1 handler ran in this driver's current ``fit`` (its "Stop signal received"
warning, noted by ``note_stop_signal``): a real interruption, Ctrl-C or ``DiskWatch``'s stop."""


def note_stop_signal(record: logging.LogRecord) -> bool:
    """A logging filter: notes Tune's "Stop signal received" warning in ``stop_signals``, and drops it when
    ``DiskWatch`` sent the signal (its own line after the run says why the search stopped)."""
    if record.getMessage().startswith("Stop signal received"):
        stop_signals.append(record.created)
        return not disk_watch.stopped_for
    return True


def no_tune_restore_advice(record: logging.LogRecord) -> bool:
    """A logging filter: drops Tune's "Resume experiment with: Tuner.restore(path=..., trainable=...)", which
    told a ``cbs-ray search`` user to write Python; the command line prints
    ``cbs-ray search --resume DIR`` instead."""
    return "Tuner.restore(" not in record.getMessage()


def no_trial_traceback(record: logging.LogRecord) -> bool:
    """A logging filter, without ``--verbose``: drops Tune's "Trial task failed for trial ..." with the worker's
    whole traceback (23 lines on a killed worker); the progress line names the failure and its reason, and the
    trial's error file keeps the traceback."""
    return not record.getMessage().startswith("Trial task failed for trial")


@contextlib.contextmanager
def quiet_tune(verbose: bool | int):
    """Not ``verbose``: Tune's output engine silent for this ``fit`` (``RAY_AIR_NEW_OUTPUT=0`` with verbose 0, the
    one setting of Tune's that prints nothing, where the new engine still prints its experiment box) and Optuna's
    INFO lines (the study it creates) off; both as they were afterwards. ``verbose``: nothing changes."""
    tune_logger = logging.getLogger("ray.tune.tune")
    tune_logger.addFilter(no_tune_restore_advice)  # cbs-ray prints its own resume command on Ctrl-C
    tune_logger.addFilter(note_stop_signal)
    stop_signals.clear()
    if verbose:
        try:
            yield
        finally:
            tune_logger.removeFilter(no_tune_restore_advice)
            tune_logger.removeFilter(note_stop_signal)
        return
    env_before = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    controller_logger = logging.getLogger("ray.tune.execution.tune_controller")
    controller_logger.addFilter(no_trial_traceback)
    try:
        with quiet_optuna(verbose):
            yield
    finally:
        tune_logger.removeFilter(no_tune_restore_advice)
        tune_logger.removeFilter(note_stop_signal)
        controller_logger.removeFilter(no_trial_traceback)
        if env_before is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = env_before


@contextlib.contextmanager
def quiet_optuna(verbose: bool | int):
    """Not ``verbose``: Optuna's INFO lines (the study a searcher creates, each trial it is told) off inside the
    block, its verbosity as it was afterwards."""
    if verbose:
        yield
        return
    import optuna

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


def progress_display(spec: SearchSpec, budget: int, planned_trials: int, plans: TrialPlans,
                     metric: tuple[str, str] | None = None) -> SearchProgress:
    """The progress display of one Tune experiment of ``planned_trials`` trials, each run's batch, start and stop
    read off its plan (``plans``), the trials ranked by ``metric`` (name, mode; the spec's where None)."""
    name, mode = metric or (spec.search.metric, spec.search.mode)

    def span_of(config: dict) -> tuple[int, int, int]:
        plan = plans.plan(config)
        return plan.batch_schedule[0][1], plan.start_samples, plan.stop_samples

    return SearchProgress(ProgressBoard(planned_trials=planned_trials, default_span=budget, metric=name, mode=mode),
                          span_of)


def _raise_if_storage_low(experiment_path: str) -> None:
    if disk_watch.stopped_for:
        raise StorageLow(disk_watch.storage_low_message(experiment_path))


class DoesNotFit(RuntimeError):
    """A trial's micro-batch probe found that not even one example fits in memory: no trial can train."""


def _raise_if_nothing_fits(reason: str | None, experiment_path: str) -> None:
    if reason:
        memory = "raise training.memory_limit_gb" if "(cpu<=" in reason else \
            "use GPUs with more free memory (another process may hold some)"
        raise DoesNotFit(f"{reason}: the search stopped at the first trial that found it, since no trial can "
                         f"fit (the batch size and LR do not change it); {memory}, shorten data.max_seq_length, "
                         f"train in bf16, or set training.gradient_checkpointing=true (experiment: {experiment_path})")


class SearchInterrupted(KeyboardInterrupt):
    """Tune stopped on Ctrl-C (SIGINT) with trials unfinished; its state is saved for ``--resume``."""

    def __init__(self, experiment_path: str):
        super().__init__(experiment_path)
        self.experiment_path = experiment_path


def _finished(grid, *, expected_trials: int) -> str:
    """The experiment's path, once every trial has ended. On Ctrl-C Tune returns early without raising,
    after saving the state with the unfinished trials still marked running (the ResultGrid shows them
    stopped); read back, that state tells an interrupted experiment from a finished one, and nothing after
    it (repeats, report) should run as if it had finished. A trial whose actor died (an OOM kill) and that
    failed for good is saved still marked running too (Tune does not rewrite its state), but the ResultGrid
    holds its error: that one has ended. Unfinished with no stop signal seen (``stop_signals``) is not called an
    interruption: ``UnfinishedSearch`` says so (a second resume once exited 130 "interrupted")."""
    from ray.tune import ExperimentAnalysis

    saved = ExperimentAnalysis(grid.experiment_path).trials
    failed = {Path(str(result.path)).name for result in grid if result.error is not None}
    running = [t for t in saved if t.status not in ("TERMINATED", "ERROR") and Path(str(t.path)).name not in failed]
    check_ended(grid.experiment_path, running=len(running), saved=len(saved), expected=expected_trials,
                signalled=bool(stop_signals))
    return grid.experiment_path


def check_ended(experiment_path: str, *, running: int, saved: int, expected: int, signalled: bool) -> None:
    """Nothing when every trial has ended (none ``running``, at least ``expected`` ``saved``); else
    ``SearchInterrupted`` if a stop signal reached Tune (``signalled``), and ``UnfinishedSearch`` if none did."""
    if not running and saved >= expected:
        return
    if signalled:
        raise SearchInterrupted(experiment_path)
    raise UnfinishedSearch(unfinished_message(experiment_path, running, saved, expected))


class UnfinishedSearch(ReportError):
    """Tune ended with trials unfinished though no stop signal reached it: not an interruption (exit 1)."""


def unfinished_message(experiment_path: str, running: int, saved: int, expected: int) -> str:
    """The one line of a search that ended unfinished without an interruption."""
    missing = f"{running} trial(s) still marked running" if running else f"{saved} of {expected} trials started"
    return (f"the search ended with {missing} though nothing interrupted it (did another process write "
            f"{experiment_path}?); the trials' results are kept; continue with: {resume_command(experiment_path)}")


def _trial_name(trial) -> str:
    # Tune pickles this function by name with the experiment: it stays here, the naming is the run plan's.
    return trial_name(trial.config, trial.trial_id)


def new_experiment(spec: SearchSpec, kind: str = "") -> tuple[str, str]:
    """(name, path) of a new Tune experiment: ``<name>[-kind]-<date>-<time>``, with ``-2``, ``-3``, ... when a
    search of the same name started in the same second already took it. On local storage the directory is
    made here, atomically, so two searches cannot share one (they did: one ``cbs_spec.json`` for both)."""
    base = f"{spec.name}{'-' + kind if kind else ''}-{time.strftime('%Y%m%d-%H%M%S')}"
    root = spec.storage_uri.rstrip("/")
    for n in range(1, 1000):
        name = base if n == 1 else f"{base}-{n}"
        if "://" in root:  # object storage: no atomic mkdir; the time and the name make a clash unlikely
            return name, f"{root}/{name}"
        try:
            Path(root).mkdir(parents=True, exist_ok=True)
            os.mkdir(f"{root}/{name}")
            return name, f"{root}/{name}"
        except FileExistsError:
            continue
    raise SpecError(f"storage_path: {root} holds 999 experiments named {base}")
