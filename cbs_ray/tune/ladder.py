"""The ladder on Ray (``search.method: ladder``): every (batch, seed) run as a trial of one Tune experiment
(``<name>-ladder-<date>-<time>``), a plain grid with no ASHA and no TPE (each run's whole curve is the
measurement), then the ladder's summary and report. The pure parts are ``spec.ladder_section``,
``train.run_plan.ladder_plan`` and ``analysis.ladder_summary``; this module only starts runs and reads them.
Its ``METHOD`` is its entry in ``tune.api.METHODS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from cbs_ray.analysis.ladder_summary import headline, summarize_ladder
from cbs_ray.records.meta import FORMAT, ExperimentMeta
from cbs_ray.records.storage import ReportError, first_error, load_history
from cbs_ray.report.ladder import write_ladder_report
from cbs_ray.spec.ladder_section import Ladder, resolve_ladder
from cbs_ray.spec.load import spec_from_dict, spec_to_dict
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.run_plan import ladder_configs
from cbs_ray.tune.same_spec import same_spec_schedule
from cbs_ray.sources.object_checks import objects_meta
from cbs_ray.tune.prepare import Prepared, data_fingerprint, prepare
from cbs_ray.tune.runner import (
    new_experiment,
    on_the_cluster,
    points_config,
    ray_session,
    run_tuner,
    tracker_callbacks_for,
)
from cbs_ray.tune.search_method import (
    SearchMethod,
    attach_to_trackers,
    check_batches_fit,
    experiment_out,
    if_killed_line,
)
from cbs_ray.tune.tracking import start_mlflow_parent

__all__ = ["METHOD", "ladder_plan_lines", "report_ladder_experiment", "run_ladder_search"]


def ladder_plan_lines(spec: SearchSpec, ld: Ladder) -> list[str]:
    """``--dry-run``: the rungs, the runs and what the ladder trains against a from-scratch search at the full
    budget over the same batches."""
    steps = ", ".join(f"B={b}: {ld.stop_samples // b}" for b in ld.batches)
    rungs = ld.rung_evaluations
    lines = [
        f"{spec.name}: ladder, full budget D = {ld.budget_samples} samples; every batch trains to "
        f"{ld.stop_samples} samples ({ld.stop_samples / ld.budget_samples:.0%} of D) at a constant LR after warmup",
        f"  batches {list(ld.batches)} x {ld.seeds} seeds = {len(ld.batches) * ld.seeds} trials; peak lr by alpha "
        f"{ld.alpha:g}: " + ", ".join(f"B={b}: {ld.peak_lr(b):.3g}" for b in ld.batches),
        f"  optimizer steps to the fraction: {steps} (floor ladder.min_steps={ld.min_steps})",
        f"  rungs at {', '.join(map(str, rungs))} samples (from twice the warmup, {ld.warmup_samples} samples, "
        f"on); B_crit fitted at each, then B_crit ∝ D^γ extrapolated to {ld.budget_samples}",
        f"  samples trained: {ld.ladder_samples} = {ld.ladder_samples / ld.full_samples:.2f} of one from-scratch "
        f"search at the full budget over the same batches and seeds ({ld.full_samples})",
    ]
    if ld.validate:
        lines.append(f"  then (--validate-prediction): the same runs go on to {ld.run_stop} samples, 2 x D, so that the "
                     f"larger batches reach the smallest one's loss at D ({ld.measurement_samples} samples in all); "
                     f"the ladder reads only their first {ld.stop_samples}")
    return lines


def _resolved(spec: SearchSpec, prepared: Prepared) -> Ladder:
    """The ``ladder:`` section against the prepared budget (in the prepared data's tokens where it is in tokens),
    every batch within the training set."""
    tokens = None if spec.training.budget_tokens is None else prepared.tokens_per_sample
    ld = resolve_ladder(spec, prepared.budget_samples, tokens)
    check_batches_fit("search.batch_sizes", max(ld.batches), prepared.train_examples)
    return ld


def plan_lines(spec: SearchSpec) -> list[str]:
    return ladder_plan_lines(spec, _resolved(spec, prepare(spec)))


def run_ladder_search(spec: SearchSpec, prepared: Prepared, *, objects=None, probe=None, out: Path, verbose: bool | int = False,
                      address: Optional[str] = None):
    """The ladder of ``spec`` (``run_search`` calls this for ``search.method: ladder``): every (batch, seed) run
    as a trial of one Tune experiment, then the summary and report written to ``out``."""
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    ld = _resolved(spec, prepared)
    for line in ladder_plan_lines(spec, ld):
        print(line, flush=True)
    with ray_session(address, verbose=verbose) as context:
        on_the_cluster(spec, context)
        name, path = new_experiment(spec, "ladder")
        meta = ExperimentMeta.from_dict({
            "name": spec.name, "method": "ladder", "metric": "eval_loss", "mode": "min", **ld.to_meta(),
            "max_seq_length": spec.data.max_seq_length, "spec": spec_to_dict(spec), "format": FORMAT,
            "data_fingerprint": data_fingerprint(data), **objects_meta(data),
            **({"mlflow_parent_run_id": start_mlflow_parent(spec, path)} if spec.tracking.mlflow is not None else {})})
        meta.write(path)
        print(if_killed_line(path, meta), flush=True)
        path = run_tuner(spec, data, budget, config, name=name, verbose=verbose,
                         callbacks=tracker_callbacks_for(spec, budget, meta), **points_config(ladder_configs(ld)))
    return summarize_ladder_experiment(path, out, attach_to=spec)


def resume_ladder_search(spec: SearchSpec, path: str, meta: ExperimentMeta, prepared: Prepared, *, out: Path,
                         verbose: bool | int = False, address: Optional[str] = None):
    """Continue a killed ladder: its unfinished runs from their checkpoints, then its report."""
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    with ray_session(address, verbose=verbose) as context:
        on_the_cluster(spec, context)
        print(f"resuming {path}", flush=True)
        run_tuner(spec, data, budget, config, verbose=verbose, restore=path,
                  callbacks=tracker_callbacks_for(spec, budget, meta))
    return summarize_ladder_experiment(path, out, attach_to=spec)


def summarize_ladder_experiment(path: str, out: Path, *, attach_to: Optional[SearchSpec] = None):
    """The ladder's summary of the experiment at ``path``, its report written to ``out``; prints the answer.
    ``attach_to``: the spec whose trackers get the report too (a search's end, not the report command)."""
    stored = ExperimentMeta.read(path)
    history = load_history(path)
    if history.empty:
        raise ReportError(f"{path}: no trial reported anything{first_error(path)}")
    summary = summarize_ladder(history, {**stored.to_dict(), "experiment_path": path},
                               schedule=same_spec_schedule(path, stored))
    page = write_ladder_report(summary, history, out)
    print("\n".join(headline(summary)))
    print(f"Report: {page}\nSummary: {out / 'summary.json'}  (experiment: {path})", flush=True)
    if attach_to is not None:
        attach_to_trackers(attach_to, path, out, summary.to_dict().get("answer") or {}, headline(summary))
    return summary


def report_ladder_experiment(path: str, meta: Optional[ExperimentMeta] = None, *, output_dir: Optional[str] = None,
                             tolerance=None, target=None, turning_fit=None):
    """``python -m cbs_ray.report`` on a ladder experiment; the from-scratch report's flags are refused."""
    for flag, given in (("--tolerance", tolerance), ("--target", target), ("--turning-point", turning_fit)):
        if given is not None:
            raise ReportError(f"{flag}: applies to a from-scratch experiment; {path} is a ladder (its report takes "
                              f"--output)")
    path = path if "://" in path else str(Path(path).expanduser().resolve())
    meta = meta or ExperimentMeta.read(path)
    spec_from_dict(meta.spec)  # the experiment's spec still validates
    return summarize_ladder_experiment(path, experiment_out(meta, output_dir))


METHOD = SearchMethod("ladder", plan_lines=plan_lines, run=run_ladder_search, resume=resume_ladder_search,
                      report=report_ladder_experiment)
