"""The ladder on Ray (``search.method: ladder``): every (batch, seed) run as a trial of one Tune experiment
(``<name>-ladder-<date>-<time>``), a plain grid with no ASHA and no TPE (each run's whole curve is the
measurement), then the ladder's summary and report. The pure parts are ``spec.ladder_section``,
``train.run_plan.ladder_plan`` and ``analysis.ladder_summary``; this module only starts runs and reads them.
Its ``METHOD`` is its entry in ``tune.api.METHODS``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from ray.tune.stopper import Stopper

from cbs_ray.analysis.ladder_stop import LadderStop
from cbs_ray.analysis.ladder_summary import headline, summarize_ladder
from cbs_ray.records.meta import FORMAT, ExperimentMeta
from cbs_ray.records.names import resume_command
from cbs_ray.records.storage import ReportError, first_error, load_history
from cbs_ray.report.ladder import write_ladder_report
from cbs_ray.spec.ladder_section import MIN_RUNG_SPAN, Ladder, resolve_ladder
from cbs_ray.spec.load import spec_from_dict, spec_to_dict
from cbs_ray.spec.resolve import tokens_per_sample
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.run_plan import ladder_configs
from cbs_ray.tune.branch import same_spec_schedule
from cbs_ray.tune.prepare import data_fingerprint, prepare
from cbs_ray.tune.runner import (
    new_experiment,
    on_the_cluster,
    points_config,
    ray_session,
    run_tuner,
    tracker_callbacks_for,
)
from cbs_ray.tune.search_method import SearchMethod, check_batches_fit, check_spec_objects_only, experiment_out

__all__ = ["METHOD", "ladder_plan_lines", "report_ladder_experiment", "run_ladder_search"]


def _tokens(spec: SearchSpec) -> Optional[int]:
    return None if spec.training.budget_tokens is None else tokens_per_sample(spec)


def ladder_plan_lines(spec: SearchSpec, ld: Ladder) -> list[str]:
    """``--dry-run``: the rungs, the runs and what the ladder trains against a from-scratch search at the full
    budget over the same batches."""
    steps = ", ".join(f"B={b}: {ld.stop_samples // b}" for b in ld.batches)
    rungs = ld.rung_evaluations
    reading = ("the average of its iterates (ladder.reading ewa: polynomial-decay averaging, evaluated beside the raw "
               "model)" if ld.reading == "ewa" else "the raw model (ladder.reading raw)")
    lines = [
        f"{spec.name}: ladder, full budget D = {ld.budget_samples} samples; the smallest batch trains to "
        f"{ld.stop_samples} samples ({ld.stop_samples / ld.budget_samples:.0%} of D), every other until it reaches "
        f"the smallest batch's {ld.metric} there or {ld.ladder_cap} samples (ladder.cap {ld.cap:g}), at a constant "
        f"LR after warmup; each run's {ld.metric} read through {reading}",
        f"  batches {list(ld.batches)} x {ld.seeds} seeds = {len(ld.batches) * ld.seeds} trials; peak lr by alpha "
        f"{ld.alpha:g}: " + ", ".join(f"B={b}: {ld.peak_lr(b):.3g}" for b in ld.batches),
        f"  optimizer steps to the fraction: {steps} (floor ladder.min_steps={ld.min_steps})",
        f"  rungs at {', '.join(map(str, rungs))} samples (from twice the warmup, {ld.warmup_samples} samples, "
        f"on; a span of {ld.rung_span:.3g}x in D); B_crit fitted at each, then B_crit ∝ D^γ extrapolated to "
        f"{ld.budget_samples}",
        f"  samples trained: at most {ld.ladder_samples_at_most} = {ld.ladder_samples_at_most / ld.full_samples:.2f} "
        f"of one from-scratch search at the full budget over the same batches and seeds ({ld.full_samples})",
    ]
    if ld.rung_span < MIN_RUNG_SPAN:
        lines.append(f"  warning: the rungs span under {MIN_RUNG_SPAN}x in D, too short to read the exponent well; "
                     f"lower the warmup (search.warmup_fraction_range) or ladder.first_rung, or raise ladder.fraction")
    if ld.validate:
        lines.append(f"  then (--validate-prediction): the runs go on, the smallest batch to D, every other until it "
                     f"reaches the smallest batch's {ld.metric} at D or {ld.run_stop} samples (ladder.cap x D); the "
                     f"ladder reads each run only up to where it alone would have stopped")
    return lines


class LadderStopper(Stopper):
    """Ends a ladder run once it has trained far enough (``analysis.ladder_stop.LadderStop`` decides)."""

    def __init__(self, ld: Ladder):
        self.rule = LadderStop(reference_batch=min(ld.batches), reference_stop=ld.reference_stop, seeds=ld.seeds)
        self.column = ld.reading_column

    def __call__(self, trial_id, result) -> bool:
        value = result.get(self.column)
        return self.rule.observe(int(result["batch_size"]), int(result.get("config", {}).get("seed_offset", 0)),
                                 int(result["samples_seen"]), math.nan if value is None else float(value))

    def stop_all(self) -> bool:
        return False


def _resolved(spec: SearchSpec, prepared) -> Ladder:
    data, budget, _ = prepared
    ld = resolve_ladder(spec, budget, _tokens(spec))
    check_batches_fit("search.batch_sizes", max(ld.batches), data.train_examples)
    return ld


def plan_lines(spec: SearchSpec) -> list[str]:
    return ladder_plan_lines(spec, _resolved(spec, prepare(spec)))


def run_ladder_search(spec: SearchSpec, prepared, *, objects=None, probe=None, out: Path, verbose: bool | int = False,
                      address: Optional[str] = None):
    """The ladder of ``spec`` (``run_search`` calls this for ``search.method: ladder``): every (batch, seed) run
    as a trial of one Tune experiment, then the summary and report written to ``out``."""
    check_spec_objects_only("ladder", objects)
    data, budget, config = prepared
    ld = _resolved(spec, prepared)
    for line in ladder_plan_lines(spec, ld):
        print(line, flush=True)
    with ray_session(address, verbose=verbose) as context:
        on_the_cluster(spec, context)
        name, path = new_experiment(spec, "ladder")
        meta = ExperimentMeta.from_dict({
            "name": spec.name, "method": "ladder", "metric": ld.metric, "mode": "min", **ld.to_meta(),
            "max_seq_length": spec.data.max_seq_length, "spec": spec_to_dict(spec), "format": FORMAT,
            "data_fingerprint": data_fingerprint(data)})
        meta.write(path)
        print(f"experiment: {path}\n  if this run is killed, continue it with: {resume_command(path)}", flush=True)
        path = run_tuner(spec, data, budget, config, name=name, verbose=verbose,
                         callbacks=tracker_callbacks_for(spec, budget, meta), stopper=LadderStopper(ld),
                         **points_config(ladder_configs(ld)))
    return summarize_ladder_experiment(path, out)


def resume_ladder_search(spec: SearchSpec, path: str, meta: ExperimentMeta, prepared, *, out: Path,
                         verbose: bool | int = False, address: Optional[str] = None):
    data, budget, config = prepared
    with ray_session(address, verbose=verbose) as context:
        on_the_cluster(spec, context)
        print(f"resuming {path}", flush=True)
        run_tuner(spec, data, budget, config, verbose=verbose, restore=path,
                  callbacks=tracker_callbacks_for(spec, budget, meta))
    return summarize_ladder_experiment(path, out)


def summarize_ladder_experiment(path: str, out: Path):
    """The ladder's summary of the experiment at ``path``, its report written to ``out``; prints the answer."""
    stored = ExperimentMeta.read(path)
    history = load_history(path)
    if history.empty:
        raise ReportError(f"{path}: no trial reported anything{first_error(path)}")
    summary = summarize_ladder(history, {**stored.to_dict(), "experiment_path": path},
                               schedule=same_spec_schedule(path, stored))
    page = write_ladder_report(summary, history, out)
    print("\n".join(headline(summary)))
    print(f"Report: {page}\nSummary: {out / 'summary.json'}  (experiment: {path})", flush=True)
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
