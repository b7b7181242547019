"""The from-scratch search (``search.method: scratch``): ``OptunaSearch`` (TPE over log2 B, alpha and
warmup jointly; every batch size seeded once) or a grid, with ASHA inside each batch size in samples, then
the repeats of each batch size's best configuration.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

from cbs_ray.analysis.tables import per_batch_table, trial_table
from cbs_ray.records.storage import load_history, read_meta, write_meta
from cbs_ray.sources.user_objects import objects_meta
from cbs_ray.spec.load import spec_to_dict
from cbs_ray.spec.resolve import tokens_per_sample
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.config import batch_size_of
from cbs_ray.tune.per_batch_asha import PerBatchASHA
from cbs_ray.tune.runner import _points_config, _run_tuner, _tracker_callbacks
from cbs_ray.tune.search_space import grid_points, per_batch_space, tune_space
from cbs_ray.tune.study import PersistentStudySearch, open_storage
from cbs_ray.tune.tracking import start_mlflow_parent


def _repeat_best(spec: SearchSpec, data, budget: int, config, experiment_path: str, verbose: int) -> None:
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
    meta = read_meta(experiment_path)  # recorded first, so that a killed run's repeats can be resumed
    meta["repeats_experiment"] = f"{spec.storage_uri.rstrip('/')}/{name}"
    write_meta(experiment_path, meta)
    _run_tuner(spec, data, budget, config, name=name, verbose=verbose,
               callbacks=_tracker_callbacks(spec, budget, meta), **_points_config(points))


def _fit(spec: SearchSpec, data, budget: int, config, verbose: int) -> str:

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
