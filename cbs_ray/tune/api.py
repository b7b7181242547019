"""Run a critical-batch experiment on Ray: the Python API behind ``python -m cbs_ray.search``.

Spec → data and model config (validated before any Ray process starts) → the search method's Tune
experiments → summary (per-batch table, critical batch, Pareto front) written to the output directory.
``resume_search`` continues a killed experiment from its directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from cbs_ray.analysis.summary_record import Summary
from cbs_ray.data.prepare import prepare_data
from cbs_ray.records.storage import ReportError, read_meta
from cbs_ray.report.scratch import analyze
from cbs_ray.report.text import headline
from cbs_ray.sources.model import check_buildable, model_config
from cbs_ray.sources.user_objects import check_objects, check_resume, user_objects
from cbs_ray.spec.checks import BUILTIN_METRICS
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import spec_from_dict
from cbs_ray.spec.resolve import apply_batch_grid, resolve_budget
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.tune.branch import check_no_objects, resume_branch_search, run_branch_search
from cbs_ray.tune.probe import probe_spec, run_probe
from cbs_ray.tune.runner import _run_tuner, on_the_cluster, ray_session
from cbs_ray.tune.scratch import _fit, _repeat_best
from cbs_ray.tune.search_space import plan_lines
from cbs_ray.tune.study import check_study, open_storage
from cbs_ray.tune.tracking import attach_report, check_installed, enabled

__all__ = ["SearchResult", "run_search", "resume_search", "prepare"]


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

        config = check_objects(spec, objects)
        return objects, resolve_budget(spec, objects.train_examples), config

    if spec.search.metric not in BUILTIN_METRICS:
        raise SpecError(f"search.metric: {spec.search.metric} is not one the spec's model and data report "
                        f"({', '.join(BUILTIN_METRICS)}); another metric needs run_search(..., compute_metrics=...)")

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

    objects = user_objects(model_init=model_init, train_dataset=train_dataset, eval_dataset=eval_dataset,
                           data_collator=data_collator, compute_metrics=compute_metrics)
    # Fail fast on bad input, before Ray starts; with auto batch sizes the search's own data are
    # prepared only once the probe has chosen the grid.
    probe = probe_spec(spec) if spec.auto_batch_sizes else None
    check_trackers_and_study(spec)
    prepared = prepare(probe or spec, objects)
    out = _output_dir(spec, output_dir)
    if spec.search.method == "branch":  # the critical batch over training: cbs_ray.branch_search

        check_no_objects(objects)
        data, budget, config = prepared
        return run_branch_search(spec, data, budget, config, out=out, verbose=verbose, address=address)
    with ray_session(address) as context:
        on_the_cluster(spec, context)
        if probe is not None:

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

    check_installed(spec.tracking)
    s = spec.search
    if s.study_storage is not None:

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


def summarize_experiment(spec: SearchSpec, experiment_path: str, budget: int, out: Path) -> SearchResult:
    """Run the reporter on the finished experiment, write it to ``out`` and print the answer."""

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

    if not enabled(spec.tracking):
        return
    try:
        lines = attach_report(spec, experiment_path, read_meta(experiment_path), out,
                              summary.to_dict().get("answer") or {}, headline(summary))
    except Exception as e:
        lines = [f"tracking: the report was written but not attached to the trackers: {type(e).__name__}: {e}"]
    print("\n".join(lines), flush=True)
