"""Branch mode on Ray (``search.method: branch``; Merrill et al. 2025, "Critical Batch Size Revisited"): the
trunk and every branch as trials of one Tune experiment, then the branch summary, the recommended
batch-size schedule, and with ``branch.validate_schedule`` a second experiment that trains that schedule.

One Tune experiment (``<name>-branch-<date>-<time>``) holds the trunk trial (first) and one trial per
(checkpoint, branch batch, alpha): they run concurrently on the cluster, resume like any trial and show in
the dashboard. A branch trial waits until the trunk has written its checkpoint (``trunk_checkpoints/``
under the experiment), so branches from early checkpoints train while the trunk goes on. The branches are a
plain grid, with no ASHA and no TPE: each branch is evaluated once, at its window's end, so ASHA has no
earlier result to stop it on; and a grid over a few alphas per (checkpoint, batch), keeping each batch's
best, is what the paper does (it takes the best LR per batch size). The pure parts (the plan, what the
history means) live in ``spec.branch_section``, ``train.run_plan`` and ``analysis.branch_*``; this module only
starts runs and reads them. Its ``METHOD`` is its entry in ``tune.api.METHODS``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from cbs_ray.analysis.branch_summary import summarize_branches
from cbs_ray.maths.budget import scratch_grid_samples
from cbs_ray.records.meta import FORMAT, ExperimentMeta
from cbs_ray.records.storage import ReportError, first_error, load_history
from cbs_ray.report.branch import headline, write_branch_report
from cbs_ray.spec.branch_section import Branching, resolve_branching
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import spec_from_dict, spec_to_dict
from cbs_ray.spec.resolve import tokens_per_sample
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.run_plan import branch_configs, schedule_config, trunk_config
from cbs_ray.tune.branch_gate import PublishedCheckpoints, never_started
from cbs_ray.tune.prepare import data_fingerprint, prepare
from cbs_ray.tune.runner import new_experiment, on_the_cluster, points_config, ray_session, run_tuner
from cbs_ray.tune.search_method import SearchMethod, experiment_out
from cbs_ray.tune.trunk_watch import TrunkWatch

__all__ = ["BranchResult", "run_branch_search", "resume_branch_search", "branch_tokens_per_sample",
           "branch_plan_lines", "branch_search_samples", "scratch_search_samples", "schedule_alpha",
           "summarize_branch_experiment", "report_branch_experiment", "check_no_objects", "METHOD"]


@dataclass
class BranchResult:
    """What a branch search produced: its summary (``analysis.branch_summary.BranchSummary``), the history of every run
    (trunk, branches, schedule run), and where everything is on disk."""

    spec: SearchSpec
    summary: object
    history: pd.DataFrame
    experiment_path: str
    output_dir: Path
    schedule_experiment_path: Optional[str] = None

    @property
    def critical_batch_over_training(self) -> list:
        return self.summary.critical_batch_over_training

    @property
    def batch_size_schedule(self) -> list:
        return self.summary.batch_size_schedule


def branch_tokens_per_sample(spec: SearchSpec) -> Optional[int]:
    """Tokens per sample where the budget is in tokens (``training.budget_tokens``: packed blocks of
    ``data.max_seq_length``), else None: then the ``branch:`` section's whole numbers are samples."""

    return None if spec.training.budget_tokens is None else tokens_per_sample(spec)


def branch_search_samples(br: Branching, *, validate_schedule: bool = False) -> int:
    """Samples the branch search trains: the trunk's budget, every branch's window, and the schedule
    run's budget when it is validated."""
    branches = len(br.checkpoints) * len(br.branch_batches) * len(br.alphas)
    return br.budget_samples * (1 + int(validate_schedule)) + branches * br.window_samples


def scratch_search_samples(br: Branching) -> int:
    """Samples a from-scratch search over the same batch sizes and alphas trains
    (``maths.budget.scratch_grid_samples``)."""
    return scratch_grid_samples(br.budget_samples, br.branch_batches, br.alphas)


def branch_plan_lines(spec: SearchSpec, br: Branching) -> list[str]:
    """The plan a user checks first (``--dry-run``): the trunk, the checkpoints, the window, the branches
    and what the search costs against a from-scratch one."""
    tokens = br.tokens_per_sample

    def amount(samples: int) -> str:
        return f"{samples} samples" + (f" ({samples * tokens} tokens)" if tokens else "")

    validate = spec.branch.validate_schedule
    ours, scratch = branch_search_samples(br, validate_schedule=validate), scratch_search_samples(br)
    branches = len(br.checkpoints) * len(br.branch_batches) * len(br.alphas)
    return [
        f"{spec.name}: branch mode (Merrill et al. 2025), budget {amount(br.budget_samples)}, eval loss compared "
        f"within {br.tolerance:.3g} (relative)",
        f"  trunk: B={br.trunk_batch}, peak lr {br.trunk_peak_lr:.3g} (alpha {br.trunk_alpha:g}), "
        f"{br.trunk_total_steps} steps, warmup {br.trunk_warmup_steps} steps, {spec.training.lr_decay} decay",
        f"  checkpoints at {', '.join(str(c) for c in br.checkpoints)} samples; window {amount(br.window_samples)}",
        f"  branches: B in {list(br.branch_batches)} x alpha in {list(br.alphas)} from each checkpoint = "
        f"{branches} trials, each keeping the trunk's weights and Adam state",
        f"  samples trained: {ours} (trunk {br.budget_samples} + branches {branches * br.window_samples}"
        + (f" + schedule run {br.budget_samples}" if validate else "")
        + f"); a from-scratch search over the same batch sizes and alphas: {scratch} "
        f"({ours / scratch:.2f} of it)",
        *(["  then: the recommended schedule trained for the whole budget against the trunk (--validate-schedule)"]
          if validate else []),
        *([f"  ignored in branch mode: search.repeats={spec.search.repeats}"] if spec.search.repeats > 1 else []),
    ]


def schedule_alpha(history: pd.DataFrame, br: Branching) -> float:
    """The alpha the schedule run follows: the one that won most of the passing branches (each (checkpoint,
    batch) counts its best alpha, the one with the lowest eval loss at the window's end, when that loss is
    within the tolerance of the trunk's there); the smaller alpha on a tie (the gentler LR); the trunk's
    alpha when no branch passed."""
    if history.empty or "role" not in history:
        return br.trunk_alpha
    trunk = history[history["role"] == "trunk"].set_index("samples_seen")["eval_loss"]
    branches = history[(history["role"] == "branch")
                       & (history["samples_seen"] == history["start_samples"] + br.window_samples)]
    wins = Counter()
    for (start, _batch), rows in branches.dropna(subset=["eval_loss"]).groupby(["start_samples", "batch_size"]):
        end = int(start) + br.window_samples
        if end not in trunk.index:
            continue
        best = rows.loc[rows["eval_loss"].idxmin()]
        if best["eval_loss"] <= trunk[end] * (1 + br.tolerance):
            wins[float(best["alpha"])] += 1
    if not wins:
        return br.trunk_alpha
    return min(wins, key=lambda a: (-wins[a], a))


# ---- on Ray ------------------------------------------------------------------------------------------

def run_branch_search(spec: SearchSpec, prepared, *, objects=None, probe: Optional[SearchSpec] = None, out: Path,
                      verbose: bool | int = False, address: Optional[str] = None) -> BranchResult:
    """The branch search of ``spec`` on what ``tune.prepare.prepare`` made of it (``run_search`` calls this for
    ``search.method: branch``): resolve the ``branch:`` section against the budget (a bad window or
    checkpoint is a ``SpecError`` here, before Ray starts), run the trunk and the branches as one Tune
    experiment, with ``branch.validate_schedule`` the recommended schedule as a second one, and write the
    report to ``out``. ``probe`` is unused: the spec's rules refuse auto batch sizes in branch mode."""
    check_no_objects(objects)
    data, budget, config = prepared
    br = _resolved(spec, prepared)
    for line in branch_plan_lines(spec, br):
        print(line, flush=True)
    with ray_session(address, verbose=verbose) as context:
        on_the_cluster(spec, context)
        path = _fit_branches(spec, data, budget, config, br, verbose)
        schedule_path = _validate_schedule(spec, data, budget, config, br, path, verbose) \
            if spec.branch.validate_schedule else None
    return summarize_branch_experiment(spec, path, out, schedule_path)


def resume_branch_search(spec: SearchSpec, path: str, meta: ExperimentMeta, prepared, *, out: Path,
                         verbose: bool | int = False, address: Optional[str] = None) -> BranchResult:
    """Continue a killed branch search (``tune.api.resume_search`` calls this for a branch experiment):
    the trunk and branch trials from their checkpoints, then the schedule run, restored if it had started,
    trained now if it had not."""
    from ray import tune  # Ray only where a search runs

    data, budget, config = prepared
    tokens = meta.tokens_per_sample
    br = resolve_branching(spec, budget, tokens)
    with ray_session(address, verbose=verbose) as context:
        on_the_cluster(spec, context)
        print(f"resuming {path}", flush=True)
        run_tuner(spec, data, budget, config, verbose=verbose, restore=path, branching=br)
        schedule_path = meta.schedule_experiment  # recorded before the schedule run starts
        if schedule_path and tune.Tuner.can_restore(schedule_path):
            run_tuner(spec, data, budget, config, verbose=verbose, restore=schedule_path, branching=br)
        elif spec.branch.validate_schedule:  # not started, or killed before Tune saved its state
            schedule_path = _validate_schedule(spec, data, budget, config, br, path, verbose)
    return summarize_branch_experiment(spec, path, out, schedule_path)


def _fit_branches(spec: SearchSpec, data, budget: int, config, br: Branching, verbose: int) -> str:
    """The trunk and the branches: one Tune experiment, the trunk first; returns its path."""

    name, path = new_experiment(spec, "branch")
    checkpoint_dir = f"{path}/trunk_checkpoints"
    # What the branch summary reads (branching.summarize_branches): the resolved values, in samples.
    meta = ExperimentMeta.from_dict({
        "name": spec.name, "method": "branch", "metric": "eval_loss", "mode": "min", **br.to_meta(),
        "checkpoint_dir": checkpoint_dir, "spec": spec_to_dict(spec), "format": FORMAT,
        "data_fingerprint": data_fingerprint(data)})
    meta.write(path)
    print(f"experiment: {path}\n  if this run is killed, continue it with: python -m cbs_ray.search --resume {path}",
          flush=True)
    points = [trunk_config(br, checkpoint_dir), *branch_configs(br, checkpoint_dir)]
    # Each branch starts once its checkpoint is published (no trial waits in a slot for one); TrunkWatch marks
    # the end of a trunk that fails for good, and the gate then drops the branches whose checkpoint never came.
    tune_config = {**points_config(points), "search_alg": PublishedCheckpoints(points, checkpoint_dir)}
    path = run_tuner(spec, data, budget, config, name=name, verbose=verbose, branching=br,
                     callbacks=[TrunkWatch(checkpoint_dir)],
                     expected_trials=lambda: len(points) - len(never_started(points, checkpoint_dir)), **tune_config)
    dropped = never_started(points, checkpoint_dir)
    if dropped:
        starts = sorted({p["start_samples"] for p in dropped})
        print(f"branch: the trunk ended without its checkpoints at {', '.join(map(str, starts))} samples; their "
              f"{len(dropped)} branches are not run", flush=True)
    return path


def _validate_schedule(spec: SearchSpec, data, budget: int, config, br: Branching, path: str,
                       verbose: int) -> Optional[str]:
    """Train the recommended schedule for the whole budget with the trunk's seed and data (the trunk is
    the fixed small batch it is compared with), as a second Tune experiment recorded in the first one's
    metadata before it starts, so that a killed run resumes it; None when the schedule keeps the trunk's
    batch throughout (the run would repeat the trunk)."""
    meta = ExperimentMeta.read(path)
    recorded = meta.schedule
    if recorded:  # resumed before Tune saved the schedule run's state: train what was decided then
        schedule, alpha = recorded["batch_size_schedule"], recorded["alpha"]
    else:
        history = load_history(path)
        schedule = summarize_branches(history, meta.to_dict()).batch_size_schedule
        alpha = schedule_alpha(history, br)
    if len(schedule) < 2:
        print(f"schedule: the critical batch never rose above the trunk's batch {br.trunk_batch}; nothing to "
              f"validate (the schedule run would repeat the trunk)", flush=True)
        return None
    name = f"{Path(path).name}-schedule"
    meta.schedule_experiment = f"{spec.storage_uri.rstrip('/')}/{name}"
    meta.schedule = {"batch_size_schedule": [[int(s), int(b)] for s, b in schedule], "alpha": alpha}
    meta.write(path)
    print(f"schedule: training {schedule} (alpha {alpha:g}) for {br.budget_samples} samples against the trunk",
          flush=True)
    # One trial whose config is fixed: the space itself (Tune would check a preset point's list value,
    # the schedule, against the space item by item).
    return run_tuner(spec, data, budget, config, name=name, verbose=verbose, branching=br,
                     param_space=schedule_config(br, schedule, alpha), num_samples=1)


def summarize_branch_experiment(spec: SearchSpec, path: str, out: Path, schedule_path: Optional[str] = None, *,
                                tolerance: Optional[float] = None) -> BranchResult:
    """The branch summary of the experiment at ``path`` (and its schedule run), written to ``out`` as the
    branch report; prints the answer. ``tolerance`` reads CBS(t) at another tolerance than the spec's."""
    meta = {**ExperimentMeta.read(path).to_dict(), "experiment_path": path}
    if tolerance is not None:
        meta["tolerance"] = tolerance
    schedule_path = schedule_path or meta.get("schedule_experiment")
    frames = [load_history(path)]
    if schedule_path:
        try:
            frames.append(load_history(schedule_path))
        except Exception as e:  # its state missing (killed before Tune saved it): report the branches alone
            print(f"schedule: its run cannot be read ({str(e).splitlines()[0]}); reporting without it", flush=True)
            schedule_path = None
    history = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) \
        else pd.DataFrame()
    if history.empty:
        raise ReportError(f"{path}: no trial reported anything{first_error(path)}")
    summary = summarize_branches(history, meta)
    html = write_branch_report(summary, history, out)
    print("\n".join(headline(summary)))
    print(f"Report: {html}\nSummary: {out / 'summary.json'}  (experiment: {path})", flush=True)
    return BranchResult(spec, summary, history, path, out, schedule_path)


def report_branch_experiment(path: str, meta: Optional[ExperimentMeta] = None, *, output_dir: Optional[str] = None,
                             tolerance: Optional[float] = None, target: Optional[float] = None,
                             turning_fit: Optional[str] = None) -> BranchResult:
    """``python -m cbs_ray.report`` on a branch experiment: its report rebuilt from what Tune stored, to
    ``output_dir`` (default ``./cbs_results/<name>``), optionally at another tolerance. ``target`` and
    ``turning_fit`` are the from-scratch report's and refused here, in one line (a ``ReportError``)."""
    for flag, given in (("--target", target), ("--turning-point", turning_fit)):
        if given is not None:
            raise ReportError(f"{flag}: applies to a from-scratch experiment; {path} is a branch search "
                              f"(its report takes --tolerance and --output)")
    path = path if "://" in path else str(Path(path).expanduser().resolve())
    meta = meta or ExperimentMeta.read(path)
    return summarize_branch_experiment(spec_from_dict(meta.spec), path, experiment_out(meta, output_dir),
                                       tolerance=tolerance)


def plan_lines(spec: SearchSpec) -> list[str]:
    """``--dry-run``: the branch plan against the prepared budget (``branch_plan_lines``)."""
    return branch_plan_lines(spec, _resolved(spec, prepare(spec)))


def _resolved(spec: SearchSpec, prepared) -> Branching:
    """The ``branch:`` section against the prepared data: the budget, and every batch within the training set
    (a larger one would fail every run at set-up)."""
    data, budget, _ = prepared
    br = resolve_branching(spec, budget, branch_tokens_per_sample(spec))
    largest = max(br.branch_batches)
    if largest > data.train_examples:
        raise SpecError(f"branch.batch_sizes: {largest} is larger than the training set ({data.train_examples} "
                        f"examples); a batch must fit in it")
    return br


def check_no_objects(objects) -> None:
    """Branch mode runs on the spec's model and data (the trunk's checkpoints hold the loop's own state)."""
    if objects is not None:
        raise SpecError("search.method: branch runs on the spec's model and data, not on your own model_init and "
                        "datasets yet; use search.method scratch")


METHOD = SearchMethod("branch", plan_lines=plan_lines, run=run_branch_search, resume=resume_branch_search,
                      report=report_branch_experiment)
