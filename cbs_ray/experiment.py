"""Run a critical-batch experiment on Ray: the Python API behind ``python -m cbs_ray.search``.

Spec → data and model config (validated before any Ray process starts) → Tune: ``OptunaSearch`` (TPE over
log2 B, alpha and warmup jointly; every batch size seeded once, with the middle alpha and a warmup that
grows with the batch) with ASHA inside each batch size, in samples → the repeats → summary (per-batch
table, critical batch, Pareto front) written to the output directory. ``resume_search`` continues a
killed experiment from its directory.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .budget import packing_on, tokens_per_sample
from .search_space import grid_points, max_concurrent, per_batch_space, plan_lines, tune_space
from .spec import SearchSpec, SpecError, resolve_budget, spec_to_dict
from .summary import Summary
from .tune_storage import ReportError

__all__ = ["SearchResult", "run_search", "resume_search", "prepare", "ray_session", "probe_spec", "run_probe",
           "DoesNotFit", "SearchInterrupted"]


@dataclass
class SearchResult:
    """What a search produced: the tables, the answer, and where everything is on disk."""

    spec: SearchSpec
    summary: Summary
    trials: pd.DataFrame
    history: pd.DataFrame
    experiment_path: str
    output_dir: Path

    @property
    def critical_batch(self) -> int | None:
        return self.summary.critical_batch.batch_size

    @property
    def per_batch(self) -> pd.DataFrame:
        return pd.DataFrame(self.summary.per_batch)

    @property
    def pareto(self) -> pd.DataFrame:
        return pd.DataFrame(self.summary.pareto)


def prepare(spec: SearchSpec, objects=None):
    """Everything that can fail on bad input, done before Ray starts: the model's config (a named model
    first, so an unknown name is reported as such), the tokenized data, the budget in samples. With the
    user's ``objects`` (``user_objects.UserObjects``), their checks instead (one micro-batch through the
    model on the driver, ``user_objects.check_objects``): then the data are the objects themselves and the
    config is the model's own (None for a plain torch module)."""
    if objects is not None:
        from .user_objects import check_objects

        config = check_objects(spec, objects)
        return objects, resolve_budget(spec, objects.train_examples), config
    from .spec import BUILTIN_METRICS

    if spec.search.metric not in BUILTIN_METRICS:
        raise SpecError(f"search.metric: {spec.search.metric} is not one the spec's model and data report "
                        f"({', '.join(BUILTIN_METRICS)}); another metric needs run_search(..., compute_metrics=...)")
    from .data import prepare_data
    from .model import check_buildable, model_config

    model = {"name": spec.model.name, "config": spec.model.config}
    if spec.model.name:
        model_config(model, spec.task, vocab_size=0, num_labels=2, pad_id=0,
                     max_seq_length=spec.data.max_seq_length)
    data = prepare_data(spec)
    budget = resolve_budget(spec, data.train_examples)
    config = model_config(model, spec.task, vocab_size=data.vocab_size, num_labels=data.num_labels,
                          pad_id=data.pad_id, max_seq_length=spec.data.max_seq_length)
    check_buildable(model, spec.task, config)
    return data, budget, config


@contextlib.contextmanager
def ray_session(address: str | None = None):
    """Connect to ``address`` (or RAY_ADDRESS), or start a local Ray with its dashboard on 127.0.0.1
    only; yields the RayContext (None when Ray was already up) and shuts down whatever was started here."""
    import ray

    started_here, context = not ray.is_initialized(), None
    if started_here:
        if address or os.environ.get("RAY_ADDRESS"):
            context = ray.init(address=address, logging_level=logging.WARNING)
        else:
            context = ray.init(include_dashboard=True, dashboard_host="127.0.0.1", logging_level=logging.WARNING)
    try:
        yield context
    finally:
        if started_here:
            ray.shutdown()


def on_the_cluster(spec: SearchSpec, context=None) -> None:
    """Once Ray is up, before Tune starts: print where to watch the search (the dashboard, how to sign in)
    and end it at once if no node can ever hold one trial (``placement.NeverPlaced``)."""
    from .dashboard import monitoring_lines
    from .placement import check_placeable

    for line in monitoring_lines(context):
        print(line, flush=True)
    check_placeable(spec)


def probe_spec(spec: SearchSpec) -> SearchSpec:
    """A one-trial, one-batch-size version of ``spec`` that measures B_simple: at ``base_batch`` for
    ``batch_sizes: auto`` (else the geometric middle of the grid), trained for the ASHA grace period,
    with gradient accumulation (4 micro-batches) when there is only one worker."""
    probe = copy.deepcopy(spec)
    batches = spec.batch_sizes
    batch = batches[len(batches) // 2]
    probe.name = f"{spec.name}-probe"
    probe.search.batch_sizes, probe.search.num_trials = [batch], 1
    # One trial whatever the search's strategy (a grid would train every alpha × warmup point) and repeats.
    probe.search.strategy, probe.search.early_stopping, probe.search.repeats = "random", False, 1
    probe.search.method = "scratch"  # a branch search's probe too is one plain trial
    probe.branch = type(spec.branch)()
    probe.training.budget_samples, probe.training.budget_epochs = spec.asha.grace_period_samples, None
    # A token budget's packed texts stay packed in the probe, which trains a sample budget.
    probe.training.budget_tokens, probe.data.packing = None, packing_on(spec)
    probe.training.noise_scale = True
    if spec.resources.workers_per_trial == 1 and batch >= 4:
        probe.training.micro_batch_size = min(spec.training.micro_batch_size or batch, batch // 4)
    from .spec import validate

    validate(probe)
    return probe


def run_probe(probe: SearchSpec, prepared, *, verbose: int = 0) -> tuple[float, list[int]]:
    """Run the probe (a ``probe_spec`` and what ``prepare`` made of it) inside a Ray session; returns
    (B_simple averaged over the run, proposed grid)."""
    from .noise_scale import proposed_grid
    from .summary import noise_scale_table
    from .tune_storage import load_history

    data, budget, config = prepared
    print(f"probe: {plan_lines(probe, budget)[1].strip()}, {budget} samples", flush=True)
    _, noise = noise_scale_table(load_history(_fit(probe, data, budget, config, verbose)))
    if noise["mean"] is None or not noise["mean"] > 0:
        raise SpecError(f"search.batch_sizes: the probe could not measure B_simple "
                        f"({noise['note'] or 'the estimate did not settle; lengthen asha.grace_period_samples'})")
    # Each batch size must split over the workers (the smallest is at least one sample per worker).
    grid = proposed_grid(noise["mean"], smallest=max(2, probe.resources.workers_per_trial), largest=data.train_examples)
    print(f"probe: B_simple = {noise['mean']:.3g} (early {noise['early']:.3g}); proposed batch sizes {grid}",
          flush=True)
    return noise["mean"], grid


def run_search(spec: SearchSpec, *, model_init=None, train_dataset=None, eval_dataset=None, data_collator=None,
               compute_metrics=None, address: str | None = None, output_dir: str | None = None,
               verbose: int = 1) -> SearchResult:
    """Run the search the spec describes and write its report; the Python API behind the CLI.

    Data are loaded and tokenized and the model config is built first, so a bad spec fails before Ray
    starts. With ``batch_sizes: auto`` a probe run measures the noise scale first and the grid is
    centred on it. A local Ray instance started here (dashboard on 127.0.0.1) is shut down at the end.

    A pipeline's own model, data and metric go in under HF Trainer's names: ``model_init`` (returns a
    fresh ``torch.nn.Module`` whose ``model(**batch)`` gives ``loss`` and ``logits``), ``train_dataset``
    and ``eval_dataset`` (map-style), optionally ``data_collator`` and ``compute_metrics`` (see
    ``cbs_ray.user_objects`` for the contract). Then the spec's model and data sections stay unset, and
    one micro-batch runs through the model on the driver before Ray starts.

    With ``search.method: branch`` the search is ``branch_search.run_branch_search`` (the critical batch over
    training), which returns a ``branch_search.BranchResult``.
    """
    from .user_objects import user_objects

    objects = user_objects(model_init=model_init, train_dataset=train_dataset, eval_dataset=eval_dataset,
                           data_collator=data_collator, compute_metrics=compute_metrics)
    # Fail fast on bad input, before Ray starts; with auto batch sizes the search's own data are
    # prepared only once the probe has chosen the grid.
    probe = probe_spec(spec) if spec.auto_batch_sizes else None
    check_trackers_and_study(spec)
    prepared = prepare(probe or spec, objects)
    out = _output_dir(spec, output_dir)
    if spec.search.method == "branch":  # the critical batch over training: cbs_ray.branch_search
        from .branch_search import check_no_objects, run_branch_search

        check_no_objects(objects)
        data, budget, config = prepared
        return run_branch_search(spec, data, budget, config, out=out, verbose=verbose, address=address)
    with ray_session(address) as context:
        on_the_cluster(spec, context)
        if probe is not None:
            from .spec import apply_batch_grid

            _, grid = run_probe(probe, prepared)
            for change in apply_batch_grid(spec, grid):
                print(f"auto batch sizes: {change}", flush=True)
            prepared = prepare(spec, objects)
        data, budget, config = prepared
        for line in plan_lines(spec, budget):
            print(line, flush=True)
        experiment_path = _fit(spec, data, budget, config, verbose)
        if spec.search.repeats > 1:
            _repeat_best(spec, data, budget, config, experiment_path, verbose)
    return summarize_experiment(spec, experiment_path, budget, out)


def check_trackers_and_study(spec: SearchSpec, *, resuming: bool = False) -> None:
    """Before Ray starts: every tracker the spec names is installed, and the study storage opens and
    can hold this search's study."""
    from .tracking import check_installed

    check_installed(spec.tracking)
    s = spec.search
    if s.study_storage is not None:
        from .study import check_study, open_storage

        storage = open_storage(s.study_storage)
        if s.study_name is not None and not resuming:
            held = check_study(storage, s.study_name, metric=s.metric, mode=s.mode)
            if held:
                print(f"study {s.study_name!r} already holds {held} trials: this search continues it "
                      f"(TPE learns from them too)", flush=True)


def _output_dir(spec: SearchSpec, output_dir: str | None) -> Path:
    return Path(output_dir).expanduser().resolve() if output_dir else spec.results_dir


def resume_search(experiment_path: str, *, model_init=None, train_dataset=None, eval_dataset=None,
                  data_collator=None, compute_metrics=None, address: str | None = None,
                  output_dir: str | None = None, verbose: int = 1) -> SearchResult:
    """Continue a killed or interrupted search from its experiment directory (``Tuner.restore``).

    The spec is the one the experiment was started with (read back from its ``cbs_spec.json``). Finished
    trials are kept as they are, unfinished and errored ones continue from their last checkpoint, the
    searcher (Optuna's state) picks up where it stopped, and the repeats run if they had not. Ray warns
    that restoring unpickles the experiment's state: resume only experiment directories you wrote.

    An experiment run with objects (``run_search(spec, model_init=…, …)``) resumes only with the same
    objects passed again, and one run from its spec only without them; the command line cannot resume
    an objects experiment and says so. A branch search (``search.method: branch``) resumes its trunk and
    branches, then its schedule run, and returns a ``branch_search.BranchResult``.
    """
    from ray import tune

    from .tune_storage import read_meta
    from .spec import spec_from_dict
    from .user_objects import check_resume, user_objects

    objects = user_objects(model_init=model_init, train_dataset=train_dataset, eval_dataset=eval_dataset,
                           data_collator=data_collator, compute_metrics=compute_metrics)
    path = experiment_path if "://" in experiment_path else str(Path(experiment_path).expanduser().resolve())
    try:
        meta = read_meta(path)
    except ReportError as e:
        raise SpecError(f"--resume: {e}") from None
    check_resume(meta, objects, path)
    if not tune.Tuner.can_restore(path):
        raise SpecError(f"--resume: {path}: Tune has no experiment state to restore there")
    spec = spec_from_dict(meta["spec"])
    check_trackers_and_study(spec, resuming=True)
    data, budget, config = prepare(spec, objects)
    if budget != meta["budget_samples"]:
        raise SpecError(f"--resume: the data changed: the budget is now {budget} samples, the experiment "
                        f"used {meta['budget_samples']}")
    out = _output_dir(spec, output_dir)
    if meta.get("method") == "branch":
        from .branch_search import resume_branch_search

        return resume_branch_search(spec, path, meta, data, budget, config, out=out, verbose=verbose,
                                    address=address)
    with ray_session(address) as context:
        on_the_cluster(spec, context)
        print(f"resuming {path}", flush=True)
        _run_tuner(spec, data, budget, config, verbose=verbose, restore=path)
        repeats = meta.get("repeats_experiment")  # recorded before the repeats start
        if repeats and tune.Tuner.can_restore(repeats):
            _run_tuner(spec, data, budget, config, verbose=verbose, restore=repeats)
        elif spec.search.repeats > 1:  # not started, or killed before Tune saved its state
            _repeat_best(spec, data, budget, config, path, verbose)
    return summarize_experiment(spec, path, budget, out)


def _repeat_best(spec: SearchSpec, data, budget: int, config, experiment_path: str, verbose: int) -> None:
    """Re-train each batch size's best completed configuration ``repeats - 1`` more times with other
    seeds, as a second Tune experiment recorded in the first one's metadata."""
    from .tune_storage import load_history, read_meta, write_meta
    from .summary import per_batch_table, trial_table

    s = spec.search
    trials = trial_table(load_history(experiment_path), metric=s.metric, budget_samples=budget)
    best = per_batch_table(trials, metric=s.metric, mode=s.mode).dropna(subset=[f"best_{s.metric}"])
    points = [{"log2_batch": int(row.batch_size).bit_length() - 1, "alpha": float(row.alpha),
               "warmup_fraction": float(row.warmup_fraction), "seed_offset": k}
              for row in best.itertuples() for k in range(1, s.repeats)]
    if not points:
        print("repeats: no batch size has a completed trial to repeat", flush=True)
        return
    print(f"repeats: re-training the best configuration of {len(best)} batch sizes {s.repeats - 1} more "
          f"time(s) each ({len(points)} trials)", flush=True)
    name = f"{Path(experiment_path).name}-repeats"
    meta = read_meta(experiment_path)  # recorded first, so that a killed run's repeats can be resumed
    meta["repeats_experiment"] = f"{spec.storage_uri.rstrip('/')}/{name}"
    write_meta(experiment_path, meta)
    _run_tuner(spec, data, budget, config, name=name, verbose=verbose,
               callbacks=_tracker_callbacks(spec, budget, meta), **_points_config(points))


def _fit(spec: SearchSpec, data, budget: int, config, verbose: int) -> str:
    from .tune_storage import write_meta
    from .per_batch_asha import PerBatchASHA
    from .trial import batch_size_of
    from .user_objects import objects_meta

    s = spec.search
    name = f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path = f"{spec.storage_uri.rstrip('/')}/{name}"
    study_name = s.study_name or name  # with search.study_storage
    if s.strategy == "grid":
        tune_config = _points_config(grid_points(spec))
    else:
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        # Multivariate TPE models (log2 B, alpha, warmup) jointly — with balanced batches, alpha and
        # warmup per batch size (group=True: one model per conditional subspace); it starts right after
        # the seeds.
        sampler = optuna.samplers.TPESampler(seed=s.seed, multivariate=True, group=s.balance_batches,
                                             n_startup_trials=len(spec.batch_sizes)) \
            if s.strategy == "tpe" else optuna.samplers.RandomSampler(seed=s.seed)
        searcher, make_searcher = {"metric": s.metric, "mode": s.mode, "sampler": sampler}, OptunaSearch
        if s.study_storage is not None:  # the study in a database or journal file, exact about each trial
            from .study import PersistentStudySearch, open_storage

            make_searcher = functools.partial(PersistentStudySearch, budget_samples=budget)
            searcher.update(storage=open_storage(s.study_storage), study_name=study_name)
        if s.balance_batches:
            space, points = per_batch_space(spec)
            tune_config = {"num_samples": s.num_trials, "search_alg": make_searcher(
                space=space, points_to_evaluate=points, **searcher)}
        else:
            space, seeds = tune_space(spec)
            tune_config = {"param_space": space, "num_samples": s.num_trials, "search_alg": make_searcher(
                points_to_evaluate=seeds, **searcher)}
    if s.early_stopping:
        tune_config["scheduler"] = PerBatchASHA(
            batch_size_of, time_attr="samples_seen", max_t=budget, grace_period=spec.asha.grace_period_samples,
            reduction_factor=spec.asha.reduction_factor, metric=s.metric, mode=s.mode)
    meta = {"name": spec.name, "metric": s.metric, "mode": s.mode, "budget_samples": budget,
            "tolerance": s.tolerance, "tokens_per_sample": tokens_per_sample(spec), "spec": spec_to_dict(spec)}
    if spec.tracking.mlflow is not None:
        from .tracking import start_mlflow_parent

        meta["mlflow_parent_run_id"] = start_mlflow_parent(spec, path)
    if s.study_storage is not None:
        meta["study"] = {"storage": s.study_storage, "name": study_name}
    meta.update(objects_meta(data))  # so that --resume can say it cannot rebuild the user's objects
    write_meta(path, meta)
    print(f"experiment: {path}\n  if this run is killed, continue it with: " + (
        f"resume_search({path!r}, model_init=..., train_dataset=..., ...) in Python" if "user_objects" in meta
        else f"python -m cbs_ray.search --resume {path}"), flush=True)
    return _run_tuner(spec, data, budget, config, name=name, verbose=verbose,
                      callbacks=_tracker_callbacks(spec, budget, meta), **tune_config)


def _tracker_callbacks(spec: SearchSpec, budget: int, meta: dict) -> list:
    from .tracking import enabled

    if not enabled(spec.tracking):
        return []
    from .tracker_callbacks import tracking_callbacks  # imports the trackers' packages

    return tracking_callbacks(spec, budget, meta)


def _points_config(points: list[dict]) -> dict:
    """Tune settings that run exactly ``points``, one trial each, in order (the space only names the
    keys for Tune; every trial takes its values from a point)."""
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    def values(key):  # every value the points give ``key`` (lists too), so Tune warns of none
        return list({repr(p[key]): p[key] for p in points if key in p}.values())

    return {"param_space": {key: tune.choice(values(key)) for key in points[0]},
            "search_alg": BasicVariantGenerator(points_to_evaluate=points), "num_samples": len(points)}


def _run_tuner(spec: SearchSpec, data, budget: int, config, *, verbose: int, name: str | None = None,
               param_space: dict | None = None, restore: str | None = None, callbacks: list = (),
               tokens_per_sample: int | None = None, **tune_config) -> str:
    """One Tune experiment of ``run_trial`` (the search, or the repeats), new or restored from the
    experiment path ``restore``; returns its path.

    The data (the spec path's arrays or the user's objects) go into Ray's object store once, here; every
    trial and each of its Ray Train workers gets their ``DataRef`` and fetches them where the loop runs
    (zero-copy for numpy arrays), instead of a multi-worker trial pickling them into its Train run. A
    restored experiment puts them afresh. ``tokens_per_sample`` (branch mode with a token budget) goes to
    every trial, whose plan reads the ``branch:`` section's whole numbers as tokens."""
    import ray
    from ray import tune

    from .nothing_fits import NothingFitsStopper, NothingFitsWatch, nothing_fits_in_experiment
    from .trial import DataRef, in_process, run_trial, trial_resources

    # Held until this function returns, i.e. until Tune has run every trial: the data stay in the object
    # store that long (with_parameters keeps only the small DataRef).
    data_ref = DataRef.put(data)
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, spec=spec, data_ref=data_ref, budget_samples=budget, model_config=config,
                             **({"tokens_per_sample": tokens_per_sample} if tokens_per_sample else {})),
        trial_resources(spec))
    # Every report checkpoints; keeping two per trial forces an experiment snapshot now and then,
    # which is cheap here and is what makes a killed search resumable.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if restore:
        # Tune restores the experiment's own stopper and callbacks (pickled with it): read the reason back
        # from the error files.
        tuner = tune.Tuner.restore(restore, trainable=trainable, resume_unfinished=True, resume_errored=True)
        grid = tuner.fit()
        _raise_if_nothing_fits(nothing_fits_in_experiment(grid.experiment_path), grid.experiment_path)
        return _finished(grid, expected_trials=0)
    nothing_fits = NothingFitsStopper()
    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(max_concurrent_trials=max_concurrent(spec, ray.cluster_resources()),
                                    # A finished in-process trial's process (torch and transformers
                                    # imported) runs the next trial: seconds saved per trial. Tune
                                    # cannot reset a trial that ran a TorchTrainer, so not for those.
                                    reuse_actors=in_process(spec),
                                    trial_name_creator=_trial_name, trial_dirname_creator=_trial_name,
                                    **tune_config),
        param_space=param_space,
        run_config=tune.RunConfig(
            name=name, storage_path=spec.storage_uri, verbose=verbose,
            stop=nothing_fits, callbacks=[NothingFitsWatch(nothing_fits), *callbacks],
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            # An in-process trial whose process dies restarts from its last checkpoint; a TorchTrainer
            # trial restarts its workers itself (trial.py), so Tune does not restart it again.
            failure_config=tune.FailureConfig(max_failures=spec.resources.max_failures if in_process(spec) else 0)),
    )
    grid = tuner.fit()
    _raise_if_nothing_fits(nothing_fits.reason, grid.experiment_path)
    return _finished(grid, expected_trials=tune_config.get("num_samples", 1))


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
    it (repeats, report) should run as if it had finished."""
    from ray.tune import ExperimentAnalysis

    saved = ExperimentAnalysis(grid.experiment_path).trials
    if any(t.status not in ("TERMINATED", "ERROR") for t in saved) or len(saved) < expected_trials:
        raise SearchInterrupted(grid.experiment_path)
    return grid.experiment_path


def _trial_name(trial) -> str:
    from .trial import batch_size_of

    config = trial.config
    role, batch = config.get("role"), batch_size_of(config)
    if role == "branch":  # branch mode: which checkpoint, batch and alpha
        return f"branch_B{batch}_from{config['start_samples']}_a{config['alpha']:g}_{trial.trial_id}"
    if role:
        return f"{role}_B{batch}_{trial.trial_id}"
    return f"B{batch}_{trial.trial_id}"


def summarize_experiment(spec: SearchSpec, experiment_path: str, budget: int, out: Path) -> SearchResult:
    """Run the reporter on the finished experiment, write it to ``out`` and print the answer."""
    from .report import analyze, headline

    report = analyze(experiment_path)
    html = report.write(out)
    summary = report.summary
    result = SearchResult(spec, summary, pd.DataFrame(summary.trials), report.history, experiment_path, out)
    metric = spec.search.metric
    per_batch = result.per_batch
    print("\nBest metric per batch size at the full budget:")
    cols = [c for c in ["batch_size", "trials", "completed", "stopped", "diverged", f"best_{metric}",
                        f"dev_{metric}", "alpha", "warmup_fraction", "peak_lr", "steps_to_target", "wall_time_s"] if c in per_batch]
    print(per_batch[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print("\n".join(headline(summary)))
    print(f"Report: {html}\nSummary: {out / 'summary.json'}  (experiment: {experiment_path})")
    _attach_to_trackers(spec, experiment_path, out, summary)
    return result


def _attach_to_trackers(spec: SearchSpec, experiment_path: str, out: Path, summary: Summary) -> None:
    """The report's files to each tracker's search run; a tracker that fails here costs nothing already
    written (the report is on disk), so it is one printed line."""
    from .report import headline
    from .tracking import attach_report, enabled
    from .tune_storage import read_meta

    if not enabled(spec.tracking):
        return
    try:
        lines = attach_report(spec, experiment_path, read_meta(experiment_path), out,
                              summary.to_dict().get("answer") or {}, headline(summary))
    except Exception as e:
        lines = [f"tracking: the report was written but not attached to the trackers: {type(e).__name__}: {e}"]
    print("\n".join(lines), flush=True)
