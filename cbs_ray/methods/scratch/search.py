"""The from-scratch search (``search.method: scratch``): ``OptunaSearch`` (TPE over log2 B, alpha and
warmup jointly; every batch size seeded once) or a grid, with ASHA inside each batch size in samples, then
the repeats of each batch size's best configuration, and the report. Its ``METHOD`` is what its entry names in
``records.method_registry``.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Optional

from cbs_ray.analysis.tables import trial_table
from cbs_ray.methods.scratch.batch_table import per_batch_table
from cbs_ray.methods.scratch.bisection_search import AlphaRank, BisectionSearcher, bisection_outline_lines
from cbs_ray.methods.scratch.per_batch_asha import PerBatchASHA
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.storage import load_history
from cbs_ray.records.trial_point import BATCH_KEY, batch_of, encode_batch
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.spec.sections import spec_tolerances
from cbs_ray.tune.driver import ExperimentLauncher
from cbs_ray.tune.prepare import Prepared
from cbs_ray.tune.runner import points_config, quiet_optuna
from cbs_ray.tune.search_method import Launch, Stage
from cbs_ray.tune.search_space import grid_points, outline_lines, per_batch_space, tune_space
from cbs_ray.tune.study import PersistentStudySearch, open_storage
from cbs_ray.tune.time_estimate import PlannedStage, scratch_stages

__all__ = ["METHOD", "ScratchMethod", "fit_experiment", "search_launch", "repeats_launch", "search_outline_lines"]


class ScratchMethod:
    """``search.method: scratch`` (``tune.search_method.SearchMethod``)."""

    name = "scratch"

    def outline_lines(self, spec: SearchSpec, prepared: Prepared) -> list[str]:
        return search_outline_lines(spec, prepared.budget_samples, prepared.tokens_per_sample,
                                    eval_examples=_eval_examples(prepared))

    def check(self, spec: SearchSpec, prepared: Prepared) -> None:
        """The budget's and batches' checks ran where the data were prepared."""

    def planned_stages(self, spec: SearchSpec, prepared: Prepared) -> Optional[list[PlannedStage]]:
        """Its trials and repeats, each to the budget (``tune.time_estimate.scratch_stages``): what the dry run's
        time estimate counts; None with ``bisect``, whose trials are decided as it goes."""
        return scratch_stages(spec, prepared.budget_samples)

    def stages(self, spec: SearchSpec, prepared: Prepared) -> list[Stage]:
        """The Tune experiment of the search (``search_launch``), then with ``search.repeats`` above 1 the repeats
        of each batch size's best configuration (``repeats_launch``); each restored from Tune's state alone."""
        search = Stage("search", lambda launcher, first: search_launch(spec, launcher), _restore)
        repeats = Stage("repeats", lambda launcher, first: repeats_launch(spec, launcher, str(first)), _restore)
        return [search, repeats] if spec.search.repeats > 1 else [search]


def _restore(launcher: ExperimentLauncher, path: str, meta: ExperimentMeta) -> None:
    """A scratch experiment (the search's, the repeats') from its trials' checkpoints and the searcher's state."""
    launcher.tune(restore=path)


def _eval_examples(prepared: Prepared) -> Optional[int]:
    """The evaluation set's size where the data say it (the spec's arrays; the user's sized datasets), else None."""
    try:
        count = getattr(prepared.data, "eval_examples", None)
        return int(count) if count is not None else None
    except (TypeError, ValueError):
        return None


def search_outline_lines(spec: SearchSpec, budget: int, tokens_per_sample: Optional[int] = None, *,
                         eval_examples: Optional[int] = None) -> list[str]:
    """The outline per batch size, how much of the evaluation set each report evaluates (``eval_examples``: the
    examples it really has, where known: a subset larger than the set is the whole set), and with the ``bisect``
    strategy the walk it will take."""
    lines = outline_lines(spec, budget, tokens_per_sample)
    subset = spec.training.eval_subset_examples
    if subset is not None and eval_examples is not None and eval_examples <= subset:
        lines.append(f"  evaluation: every report on all {eval_examples} examples of the evaluation set "
                     f"(training.eval_subset_examples {subset} is at least the set)")
    elif subset is not None:
        # An accuracy's standard error is at most 0.5/sqrt(n) (at 50 %); other metrics' noise is the data's.
        noise = (f" (an accuracy's standard error at most {0.5 / subset ** 0.5:.2g})"
                 if spec.search.metric == "accuracy" else "")
        lines.append(f"  evaluation: reports before the last on the evaluation set's first {subset} examples{noise}, "
                     f"for ASHA's comparisons and the curves; the last, where the answer is read, on all of them")
    return lines + bisection_outline_lines(spec, budget) if spec.search.strategy == "bisect" else lines


def repeats_launch(spec: SearchSpec, launcher: ExperimentLauncher, experiment_path: str) -> Optional[Launch]:
    """Re-train each batch size's best completed configuration of the search at ``experiment_path``
    ``repeats - 1`` more times with other seeds, as a second Tune experiment recorded in the first one's metadata;
    None when no batch size has a completed trial."""
    s, budget = spec.search, launcher.prepared.budget_samples
    trials = trial_table(load_history(experiment_path), metric=s.metric, budget_samples=budget)
    best = per_batch_table(trials, metric=s.metric, mode=s.mode).dropna(subset=[f"best_{s.metric}"])
    points = [{BATCH_KEY: encode_batch(int(row.batch_size)), "alpha": float(row.alpha),
               "warmup_fraction": float(row.warmup_fraction), "seed_offset": k}
              for row in best.itertuples() for k in range(1, s.repeats)]
    if not points:
        print("repeats: no batch size has a completed trial to repeat", flush=True)
        return None
    print(f"repeats: re-training the best configuration of {len(best)} batch sizes {s.repeats - 1} more "
          f"time(s) each ({len(points)} trials)", flush=True)
    # recorded before they start (the report reads the repeats from it)
    return Launch(lambda name, meta: launcher.tune(meta=meta, name=name, **points_config(points)),
                  lambda name, path: {"repeats_experiment": path})


def fit_experiment(spec: SearchSpec, launcher: ExperimentLauncher) -> str:
    """The search's Tune experiment run at once as the stage ``search`` (``search_launch``); returns its path."""
    return launcher.launch("search", search_launch(spec, launcher))


def search_launch(spec: SearchSpec, launcher: ExperimentLauncher) -> Launch:
    """The search's Tune experiment (searcher, per-batch ASHA), its metadata recorded first."""
    s, budget = spec.search, launcher.prepared.budget_samples
    tolerance = spec_tolerances(spec)[0]
    return Launch(functools.partial(_fit, spec, launcher), lambda name, path: {
        "metric": s.metric, "mode": s.mode, "budget_samples": budget, "tolerance": tolerance.value,
        "tolerance_unit": tolerance.unit,
        "tokens_per_sample": launcher.prepared.tokens_per_sample,
        "study": {"storage": s.study_storage, "name": s.study_name or name} if s.study_storage is not None else None})


def _fit(spec: SearchSpec, launcher: ExperimentLauncher, name: str, meta: ExperimentMeta) -> str:
    """The search's Tune run (``search_launch``), its experiment ``name`` and metadata ``meta`` written."""
    s, budget = spec.search, launcher.prepared.budget_samples
    tolerance = spec_tolerances(spec)[0]
    study_name = s.study_name or name  # with search.study_storage
    expected_trials, halving, halving_rank = None, {}, None
    tune_config: dict[str, Any]
    if s.strategy == "grid":
        tune_config = points_config(grid_points(spec))
    elif s.strategy == "bisect":
        searcher = BisectionSearcher.for_spec(spec, budget)
        tune_config = {"num_samples": searcher.most_trials, "search_alg": searcher}
        expected_trials = searcher.expected_trials
        # synchronous halving among the alpha candidates at the first rung: the prior goes on, a challenger only
        # where it leads by more than the tolerance
        if len(searcher.policy.alphas) > 1:
            halving = {searcher.policy.alpha_choice_batch(): len(searcher.policy.alphas)}
            halving_rank = AlphaRank(searcher.policy.alphas)
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
        optuna_args: dict[str, Any] = {"metric": s.metric, "mode": s.mode, "sampler": sampler}
        make_searcher: Callable[..., Any] = OptunaSearch
        if s.study_storage is not None:  # the study in a database or journal file, exact about each trial
            make_searcher = functools.partial(PersistentStudySearch, budget_samples=budget)
            optuna_args.update(storage=open_storage(s.study_storage), study_name=study_name)
        with quiet_optuna(launcher.verbose):  # the searcher creates its study here
            if s.balance_batches:
                space, points = per_batch_space(spec)
                tune_config = {"num_samples": s.num_trials, "search_alg": make_searcher(
                    space=space, points_to_evaluate=points, **optuna_args)}
            else:
                space, seeds = tune_space(spec)
                tune_config = {"param_space": space, "num_samples": s.num_trials, "search_alg": make_searcher(
                    points_to_evaluate=seeds, **optuna_args)}
    if s.early_stopping:
        tune_config["scheduler"] = PerBatchASHA(
            batch_of, time_attr="samples_seen", max_t=budget, grace_period=spec.asha.grace_period_samples,
            reduction_factor=spec.asha.reduction_factor, metric=s.metric, mode=s.mode,
            halving=halving, halving_margin=tolerance.value, halving_relative=tolerance.relative,
            halving_rank=halving_rank)
    return launcher.tune(meta=meta, name=name, expected_trials=expected_trials, **tune_config)


METHOD = ScratchMethod()
"""What its entry in ``records.method_registry`` names."""
