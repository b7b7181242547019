"""Branch mode on Ray (``search.method: branch``; Merrill et al. 2025, "Critical Batch Size Revisited"): the
trunk and every branch as trials of one Tune experiment, then the branch summary, the recommended
batch-size schedule, and with ``branch.validate_schedule`` a second experiment that trains that schedule.

One Tune experiment (``<name>-branch-<date>-<time>``) holds the trunk trial (first) and one trial per
(checkpoint, branch batch, alpha, seed): they run concurrently on the cluster, resume like any trial and show
in the dashboard. A branch trial waits until the trunk has written its checkpoint (``trunk_checkpoints/``
under the experiment), so branches from early checkpoints train while the trunk goes on. The branches are a
plain grid, with no ASHA and no TPE: each branch is evaluated once, at its window's end, so ASHA has no
earlier result to stop it on; the paper trains one LR per batch (√k·η, alpha 0.5), which is the default.
The validation (``branch.validate_schedule``) is a second experiment: the schedule and its fixed-batch
controls (``analysis.branch_schedule``), each on ``branch.validation_seeds`` seeds. The pure parts (the plan, what the
history means) live in ``spec.branch_section``, ``train.run_plan`` and ``analysis.branch_*``; this module only
starts runs and reads them. Its ``METHOD`` is its entry in ``tune.api.METHODS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from cbs_ray.analysis.branch_schedule import control_batches
from cbs_ray.analysis.schedule_verdicts import criterion_text
from cbs_ray.analysis.branch_summary import summarize_branches
from cbs_ray.maths.budget import scratch_grid_samples
from cbs_ray.records.meta import FORMAT, ExperimentMeta
from cbs_ray.records.storage import ReportError, first_error, load_history
from cbs_ray.report.branch import headline, write_branch_report
from cbs_ray.spec.branch_section import Branching, resolve_branching
from cbs_ray.spec.load import spec_from_dict, spec_to_dict
from cbs_ray.spec.resolve import tokens_per_sample
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.run_plan import branch_configs, trunk_config, validation_configs
from cbs_ray.tune.branch_gate import PublishedCheckpoints, never_started
from cbs_ray.tune.prepare import data_fingerprint, prepare
from cbs_ray.tune.runner import new_experiment, on_the_cluster, points_config, ray_session, run_tuner
from cbs_ray.tune.search_method import SearchMethod, check_batches_fit, check_spec_objects_only, experiment_out
from cbs_ray.tune.trunk_watch import TrunkWatch

__all__ = ["METHOD", "BranchResult", "branch_history", "branch_plan_lines", "branch_search_samples",
           "branch_tokens_per_sample", "check_no_objects", "report_branch_experiment", "resume_branch_search",
           "same_spec_schedule", "scratch_search_samples", "summarize_branch_experiment"]


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


def _branch_runs(br: Branching) -> int:
    """Branch trials: every (checkpoint, batch, alpha, seed), the trunk's continuations at its batch included."""
    per_point = len(br.branch_batches) * len(br.alphas) * br.repeats + (br.repeats - 1)
    return len(br.checkpoints) * per_point


def branch_search_samples(br: Branching, *, validate_schedule: bool = False) -> int:
    """Samples the branch search trains: the trunk's budget and every branch's window (trunk + branches: what
    finding CBS(t) costs); with ``validate_schedule`` an estimate of the validation's runs too (the schedule
    and three fixed-batch controls on every validation seed, each the budget: the iso-step batches are known
    only once the schedule is)."""
    validation = 4 * br.validation_seeds * br.budget_samples if validate_schedule else 0
    return br.budget_samples + _branch_runs(br) * br.window_samples + validation


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
    searched, scratch = branch_search_samples(br), scratch_search_samples(br)
    branches = _branch_runs(br)
    loss = "eval loss at t + window" if br.loss == "eval" else "training loss (EMA, alpha 0.5) at t + window"
    tolerance = f"{br.tolerance:.3g} relative" if br.tolerance_relative else f"{br.tolerance:.3g} nats (absolute)"
    steps = ", ".join(f"B={b}: {br.window_samples // b}" for b in br.branch_batches)
    state = "keeping the trunk's weights and Adam state" if br.optimizer_state == "keep" else \
        "with the trunk's weights and fresh Adam state"
    lines = [
        f"{spec.name}: branch mode (Merrill et al. 2025), budget {amount(br.budget_samples)}; {loss} compared "
        f"with every smaller batch's within ε = {tolerance}",
        f"  trunk: B={br.trunk_batch}, peak lr {br.trunk_peak_lr:.3g} (alpha {br.trunk_alpha:g}), "
        f"{br.trunk_total_steps} steps, warmup {br.trunk_warmup_steps} steps, {spec.training.lr_decay} decay",
        f"  checkpoints at {', '.join(str(c) for c in br.checkpoints)} samples; window {amount(br.window_samples)} "
        f"({br.window_samples / br.budget_samples:.1%} of the budget); optimizer steps per window: {steps}",
        f"  branches: B in {list(br.branch_batches)} x alpha in {list(br.alphas)}"
        + (f" x {br.repeats} seeds (and the trunk's continuation on {br.repeats - 1} more)" if br.repeats > 1 else "")
        + f" from each checkpoint = {branches} trials, each {state}",
        f"  samples trained: {searched} (trunk {br.budget_samples} + branches {branches * br.window_samples}); "
        f"a from-scratch search over the same batch sizes and alphas: {scratch} ({searched / scratch:.2f} of it)",
    ]
    if br.window_steps_at_largest < br.window_min_steps:
        lines.append(f"  warning: the largest branch batch {br.largest_batch} takes {br.window_steps_at_largest} "
                     f"optimizer steps per window, under the floor of {br.window_min_steps} "
                     f"(branch.window_min_steps): its loss will say more about its first steps than its batch")
    lines += [f"  deviation from the paper: {d}" for d in br.deviations()]
    rule = {"once_per_crossing": "one doubling per crossing of CBS(t) over twice the batch",
            "while_safe": "doubling again at a checkpoint while each doubled branch passed"}[br.schedule_rule]
    lines.append(f"  schedule: {rule} (branch.schedule_rule: {br.schedule_rule}), LR by the alpha rule")
    if validate:
        more = branch_search_samples(br, validate_schedule=True) - searched
        lines.append(f"  then: the schedule and its fixed-batch controls (small, large, iso-steps) on "
                     f"{br.validation_seeds} seeds held out from the trunk's, about {more} samples more "
                     f"(--validate-schedule)")
        lines.append(f"  criterion, fixed before the validation runs: "
                     f"{criterion_text(br.tolerance, relative=br.tolerance_relative)}")
    if spec.search.repeats > 1:
        lines.append(f"  ignored in branch mode: search.repeats={spec.search.repeats} (branch.repeats sets seeds)")
    return lines


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
    """Train the recommended schedule for the whole budget against its fixed-batch controls
    (``analysis.branch_schedule.control_batches``), each on ``branch.validation_seeds`` seeds held out from the
    trunk's, as a second Tune experiment recorded in the first one's metadata before it
    starts, so that a killed run resumes it; None when the schedule keeps the trunk's batch throughout (there
    is nothing to validate)."""
    meta = ExperimentMeta.read(path)
    recorded = meta.schedule
    if recorded:  # resumed before Tune saved the schedule run's state: train what was decided then
        schedule, alpha = recorded["batch_size_schedule"], recorded["alpha"]
    else:
        summary = summarize_branches(load_history(path), meta.to_dict())
        schedule, alpha = summary.batch_size_schedule, summary.schedule_alpha
    if len(schedule) < 2:
        print(f"schedule: the critical batch never rose above the trunk's batch {br.trunk_batch}; nothing to "
              f"validate (the schedule run would repeat the trunk)", flush=True)
        return None
    name = f"{Path(path).name}-schedule"
    meta.schedule_experiment = f"{spec.storage_uri.rstrip('/')}/{name}"
    criterion = criterion_text(br.tolerance, relative=br.tolerance_relative)
    meta.schedule = {"batch_size_schedule": [[int(s), int(b)] for s, b in schedule], "alpha": alpha,
                     "margin": br.tolerance, "criterion": criterion}
    meta.write(path)
    controls = control_batches(schedule, br.budget_samples)
    points = validation_configs(br, schedule, alpha, controls)
    print(f"schedule: training {schedule} (alpha {alpha:g}) for {br.budget_samples} samples against fixed batches "
          f"{', '.join(f'{n} B={b}' for n, b in controls)}, on {br.validation_seeds} seeds ({len(points)} runs)\n"
          f"  criterion, fixed before these runs: {criterion}", flush=True)
    return run_tuner(spec, data, budget, config, name=name, verbose=verbose, branching=br, **points_config(points))


def branch_history(path: str, schedule_path: Optional[str]) -> tuple[pd.DataFrame, Optional[str]]:
    """The history of the branch experiment at ``path`` and of its schedule run at ``schedule_path``, and that
    path (None where there is none, or its state cannot be read: then the branches alone, said)."""
    frames = [load_history(path)]
    if schedule_path:
        try:
            frames.append(load_history(schedule_path))
        except Exception as e:  # its state missing (killed before Tune saved it): report the branches alone
            print(f"schedule: its run cannot be read ({str(e).splitlines()[0]}); reporting without it", flush=True)
            schedule_path = None
    frames = [f for f in frames if len(f)]
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), schedule_path


def same_spec_schedule(path: str, meta: ExperimentMeta) -> Optional[dict]:
    """Branch mode's batch-size schedule for the run an experiment at ``path`` (a ladder's, ``meta``) is about:
    the newest branch experiment beside it (``<name>-branch-*`` in the same storage) with the same spec name,
    the same data (``data_fingerprint``) and the same budget, summarized as branch mode reports it; None where
    there is none or the storage is remote. ``{"experiment", "batch_size_schedule", "alpha", "validated"}``,
    ``validated`` the schedule validation's verdicts where it ran (``below_frontier``; ``loss_holds``, its
    non-inferiority to the small batch)."""
    root = Path(path).parent
    if "://" in path or not root.is_dir() or meta.data_fingerprint is None:
        return None
    for candidate in sorted(root.glob(f"{meta.name}-branch-*"), reverse=True):
        if candidate.name.endswith("-schedule") or not candidate.is_dir():
            continue
        try:
            other = ExperimentMeta.read(str(candidate))
        except ReportError:
            continue
        if (other.method, other.name, other.data_fingerprint, other.budget_samples) != \
                ("branch", meta.name, meta.data_fingerprint, meta.budget_samples):
            continue
        recorded = other.to_dict()
        try:
            history, _ = branch_history(str(candidate), recorded.get("schedule_experiment"))
            if history.empty:
                continue
            summary = summarize_branches(history, {**recorded, "experiment_path": str(candidate)})
        except Exception as e:  # a damaged neighbour must not cost the ladder its report
            print(f"schedule: {candidate} cannot be read ({str(e).splitlines()[0]}); looking further", flush=True)
            continue
        sv = summary.schedule_validation
        return {"experiment": str(candidate), "batch_size_schedule": [[int(a), int(b)] for a, b in
                                                                       summary.batch_size_schedule],
                "alpha": summary.schedule_alpha,
                "validated": None if sv is None else {"below_frontier": sv.below_frontier.holds,
                                                      "loss_holds": None if sv.non_inferiority is None
                                                      else sv.non_inferiority.holds}}
    return None


def summarize_branch_experiment(spec: SearchSpec, path: str, out: Path, schedule_path: Optional[str] = None, *,
                                tolerance: Optional[float] = None) -> BranchResult:
    """The branch summary of the experiment at ``path`` (and its schedule run), written to ``out`` as the
    branch report; prints the answer. ``tolerance`` reads CBS(t) at another tolerance than the spec's."""
    meta = {**ExperimentMeta.read(path).to_dict(), "experiment_path": path}
    if tolerance is not None:
        meta["tolerance"] = tolerance
    history, schedule_path = branch_history(path, schedule_path or meta.get("schedule_experiment"))
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
    check_batches_fit("branch.batch_sizes", max(br.branch_batches), data.train_examples)
    return br


def check_no_objects(objects) -> None:
    """Branch mode runs on the spec's model and data (the trunk's checkpoints hold the loop's own state)."""
    check_spec_objects_only("branch", objects)


METHOD = SearchMethod("branch", plan_lines=plan_lines, run=run_branch_search, resume=resume_branch_search,
                      report=report_branch_experiment)
