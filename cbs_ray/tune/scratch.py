"""The from-scratch search (``search.method: scratch``): ``OptunaSearch`` (TPE over log2 B, alpha and
warmup jointly; every batch size seeded once) or a grid, with ASHA inside each batch size in samples, then
the repeats of each batch size's best configuration, and the report. Its ``METHOD`` is its entry in
``tune.api.METHODS``.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from cbs_ray.analysis.summary_record import Answer, Summary
from cbs_ray.analysis.tables import noise_scale_table, per_batch_table, trial_table
from cbs_ray.maths.noise_scale import proposed_grid
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.storage import load_history
from cbs_ray.report.scratch import analyze
from cbs_ray.report.text import headline
from cbs_ray.sources.object_checks import objects_meta
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import spec_to_dict
from cbs_ray.spec.resolve import apply_batch_grid, tokens_per_sample
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.config import batch_size_of
from cbs_ray.tune.per_batch_asha import PerBatchASHA
from cbs_ray.tune.prepare import data_fingerprint, prepare
from cbs_ray.tune.probe import probe_spec
from cbs_ray.tune.runner import (
    new_experiment,
    on_the_cluster,
    points_config,
    quiet_optuna,
    ray_session,
    run_tuner,
    tracker_callbacks_for,
)
from cbs_ray.tune.search_method import SearchMethod, attach_to_trackers, if_killed_line
from cbs_ray.tune.search_space import grid_points, per_batch_space, plan_lines, tune_space
from cbs_ray.tune.study import PersistentStudySearch, open_storage
from cbs_ray.tune.tracking import start_mlflow_parent

__all__ = ["SearchResult", "METHOD", "fit_experiment", "repeat_best", "run_probe", "summarize_experiment"]


@dataclass
class SearchResult:
    """What a search produced: the tables, the answer, and where everything is on disk.

    ``answer`` is the critical batch the report stands behind (``analysis.summary_record.Answer``):
    ``answer.batch_size``, ``answer.bound`` ("upper": the critical batch is at most ``batch_size``, "≤ 8", the
    drop comes right after the smallest batch measured; "lower": at least, "≥ 128", no drop seen up to the
    largest; None: a value), ``answer.resolved`` (whether the noise lets the tolerance be told apart; None
    without repeats), and ``answer.text``, the headline's line. ``critical_batch`` is ``answer.batch_size``
    alone: read it with ``answer.bound``, since 8 may mean "≤ 8"."""

    spec: SearchSpec
    summary: Summary
    trials: pd.DataFrame
    history: pd.DataFrame
    experiment_path: str
    output_dir: Path

    @property
    def answer(self) -> Answer:
        """The critical batch with its bound and verdict (``Summary.answer``)."""
        return self.summary.answer

    @property
    def critical_batch(self) -> int | None:
        """The critical batch's number, without its bound: ``answer.batch_size`` (see ``answer.bound``)."""
        return self.summary.critical_batch.batch_size

    @property
    def per_batch(self) -> pd.DataFrame:
        return pd.DataFrame(self.summary.per_batch)

    @property
    def pareto(self) -> pd.DataFrame:
        return pd.DataFrame(self.summary.pareto)


def dry_run_lines(spec: SearchSpec) -> list[str]:
    """``--dry-run``: the plan per batch size (with ``batch_sizes: auto``, the probe's, which runs first)."""
    lines = []
    if spec.auto_batch_sizes:
        lines.append("batch sizes: auto — a probe run measures B_simple first; the probe:")
        spec = probe_spec(spec)
    return lines + plan_lines(spec, prepare(spec).budget_samples)


def run(spec: SearchSpec, prepared, *, objects=None, probe: Optional[SearchSpec] = None, out: Path,
        verbose: bool | int = False, address: Optional[str] = None) -> SearchResult:
    """The search on Ray: the probe first with auto batch sizes (then the search's own data are prepared
    with the grid it chose), the Tune experiment, the repeats, the report."""
    with ray_session(address, verbose=verbose) as context:
        on_the_cluster(spec, context)
        if probe is not None:
            _, grid = run_probe(probe, prepared, verbose=verbose)
            for change in apply_batch_grid(spec, grid):
                print(f"auto batch sizes: {change}", flush=True)
            prepared = prepare(spec, objects)
        data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
        for line in plan_lines(spec, budget):
            print(line, flush=True)
        experiment_path = fit_experiment(spec, data, budget, config, verbose)
        if spec.search.repeats > 1:
            repeat_best(spec, data, budget, config, experiment_path, verbose)
    return summarize_experiment(spec, experiment_path, budget, out)


def resume(spec: SearchSpec, path: str, meta: ExperimentMeta, prepared, *, out: Path, verbose: bool | int = False,
           address: Optional[str] = None) -> SearchResult:
    """The search's trials from their checkpoints, then its repeats (restored, or started if they had not)."""
    from ray import tune  # Ray only where a search runs

    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    with ray_session(address, verbose=verbose) as context:
        on_the_cluster(spec, context)
        print(f"resuming {path}", flush=True)
        run_tuner(spec, data, budget, config, verbose=verbose, restore=path)
        repeats = meta.repeats_experiment  # recorded before the repeats start
        if repeats and tune.Tuner.can_restore(repeats):
            run_tuner(spec, data, budget, config, verbose=verbose, restore=repeats)
        elif spec.search.repeats > 1:  # not started, or killed before Tune saved its state
            repeat_best(spec, data, budget, config, path, verbose)
    return summarize_experiment(spec, path, budget, out)


def report(path: str, meta: Optional[ExperimentMeta] = None, *, output_dir: Optional[str] = None, tolerance: Optional[float] = None,
           target: Optional[float] = None, turning_fit: Optional[str] = None) -> None:
    """``python -m cbs_ray.report`` on a from-scratch experiment: rebuilt from what Tune stored (``meta`` is
    None where the metadata cannot be read: ``analyze`` then says why)."""
    rebuilt = analyze(path, tolerance=tolerance, target=target, turning_fit=turning_fit)
    out = Path(output_dir or Path("cbs_results") / (rebuilt.summary.name or "report"))
    html_path = rebuilt.write(out)
    print("\n".join(headline(rebuilt.summary)))
    print(f"Report: {html_path.resolve()}")


def repeat_best(spec: SearchSpec, data, budget: int, config, experiment_path: str, verbose: int) -> None:
    """Re-train each batch size's best completed configuration ``repeats - 1`` more times with other
    seeds, as a second Tune experiment recorded in the first one's metadata."""

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
    meta = ExperimentMeta.read(experiment_path)  # recorded first, so that a killed run's repeats can be resumed
    meta.repeats_experiment = f"{spec.storage_uri.rstrip('/')}/{name}"
    meta.write(experiment_path)
    run_tuner(spec, data, budget, config, name=name, verbose=verbose,
              callbacks=tracker_callbacks_for(spec, budget, meta), **points_config(points))


def fit_experiment(spec: SearchSpec, data, budget: int, config, verbose: int) -> str:
    """The search's Tune experiment (searcher, per-batch ASHA, the metadata first); returns its path."""
    s = spec.search
    name, path = new_experiment(spec)
    study_name = s.study_name or name  # with search.study_storage
    if s.strategy == "grid":
        tune_config = points_config(grid_points(spec))
    else:
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        # Multivariate TPE models (log2 B, alpha, warmup) jointly — with balanced batches, alpha and
        # warmup per batch size (group=True: one model per conditional subspace); it starts right after
        # the seeds.
        with warnings.catch_warnings():  # multivariate and group are "experimental" in Optuna: chosen, not news
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=s.seed, multivariate=True, group=s.balance_batches,
                                                 n_startup_trials=len(spec.batch_sizes)) \
                if s.strategy == "tpe" else optuna.samplers.RandomSampler(seed=s.seed)
        searcher, make_searcher = {"metric": s.metric, "mode": s.mode, "sampler": sampler}, OptunaSearch
        if s.study_storage is not None:  # the study in a database or journal file, exact about each trial
            make_searcher = functools.partial(PersistentStudySearch, budget_samples=budget)
            searcher.update(storage=open_storage(s.study_storage), study_name=study_name)
        with quiet_optuna(verbose):  # the searcher creates its study here
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
    meta = ExperimentMeta(
        name=spec.name, metric=s.metric, mode=s.mode, budget_samples=budget, tolerance=s.tolerance,
        tokens_per_sample=tokens_per_sample(spec), spec=spec_to_dict(spec), data_fingerprint=data_fingerprint(data),
        mlflow_parent_run_id=start_mlflow_parent(spec, path) if spec.tracking.mlflow is not None else None,
        study={"storage": s.study_storage, "name": study_name} if s.study_storage is not None else None,
        # so that --resume can say it cannot rebuild the user's objects
        user_objects=objects_meta(data).get("user_objects"))
    meta.write(path)
    print(if_killed_line(path, meta), flush=True)
    return run_tuner(spec, data, budget, config, name=name, verbose=verbose,
                     callbacks=tracker_callbacks_for(spec, budget, meta), **tune_config)


def run_probe(probe: SearchSpec, prepared, *, verbose: int = 0) -> tuple[float, list[int]]:
    """Run the probe (a ``probe_spec`` and what ``prepare`` made of it) inside a Ray session; returns
    (B_simple averaged over the run, proposed grid)."""

    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    print(f"probe: {plan_lines(probe, budget)[1].strip()}, {budget} samples", flush=True)
    _, noise = noise_scale_table(load_history(fit_experiment(probe, data, budget, config, verbose)))
    if noise["mean"] is None or not noise["mean"] > 0:
        raise SpecError(f"search.batch_sizes: the probe could not measure B_simple "
                        f"({noise['note'] or 'the estimate did not settle; lengthen asha.grace_period_samples'})")
    # Each batch size must split over the workers (the smallest is at least one sample per worker).
    grid = proposed_grid(noise["mean"], smallest=max(2, probe.resources.workers_per_trial), largest=data.train_examples)
    print(f"probe: B_simple = {noise['mean']:.3g} (early {noise['early']:.3g}); proposed batch sizes {grid}",
          flush=True)
    return noise["mean"], grid


def summarize_experiment(spec: SearchSpec, experiment_path: str, budget: int, out: Path) -> SearchResult:
    """Run the reporter on the finished experiment, write it to ``out`` and print the answer."""
    rebuilt = analyze(experiment_path)
    html = rebuilt.write(out)
    summary = rebuilt.summary
    result = SearchResult(spec, summary, pd.DataFrame(summary.trials), rebuilt.history, experiment_path, out)
    metric = spec.search.metric
    per_batch = result.per_batch
    print("\nBest metric per batch size at the full budget:")
    cols = [c for c in ["batch_size", "trials", "completed", "stopped", "diverged", f"best_{metric}",
                        f"dev_{metric}", "alpha", "warmup_fraction", "peak_lr", "steps_to_target", "wall_time_s"]
            if c in per_batch]
    print(per_batch[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print("\n".join(headline(summary)))
    print(f"Report: {html}\nSummary: {out / 'summary.json'}  (experiment: {experiment_path})")
    attach_to_trackers(spec, experiment_path, out, summary.to_dict().get("answer") or {}, headline(summary))
    return result


METHOD = SearchMethod("scratch", plan_lines=dry_run_lines, run=run, resume=resume, report=report)
