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
controls (``methods.branch.reading_schedule``), each on ``branch.validation_seeds`` seeds. The pure parts
(the runs' plans, what the history means) live in ``methods.branch.settings``, ``methods.branch.runs`` and
``methods.branch.reading*``; this module only starts runs and reads them. Its ``METHOD`` is what its entry in
``records.method_registry`` names.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

from cbs_ray.maths.budget import scratch_grid_samples
from cbs_ray.methods.branch.control_configurations import configurations_line
from cbs_ray.methods.branch.fair_controls import (
    CONTROLS_STAGE,
    DENSE,
    SCRATCH,
    chosen_controls,
    frontier_batches,
    recorded_controls_stage,
    tuned_controls,
    unused_controls_warning,
)
from cbs_ray.methods.branch.gate import PublishedCheckpoints, never_started
from cbs_ray.methods.branch.reading import summarize_branches
from cbs_ray.methods.branch.reading_verdicts import criterion_text
from cbs_ray.methods.branch.runs import branch_configs, branch_run_plan, trunk_config, validation_configs
from cbs_ray.methods.branch.settings import ResolvedBranchSettings, branch_settings, resolve_branch_settings
from cbs_ray.methods.branch.trunk_watch import TrunkWatch
from cbs_ray.records.meta import METHOD_RECORD, ExperimentMeta
from cbs_ray.records.storage import load_history
from cbs_ray.sources.object_checks import check_same_architecture
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.run_plan import report_points
from cbs_ray.train.trial_plans import PresetPlans
from cbs_ray.tune.driver import ExperimentLauncher
from cbs_ray.tune.prepare import Prepared
from cbs_ray.tune.runner import points_config
from cbs_ray.tune.search_method import Launch, Stage, check_batches_fit, method_named
from cbs_ray.tune.time_estimate import PlannedRun, PlannedStage, scratch_stages

__all__ = ["METHOD", "BranchMethod", "branch_outline_lines", "branch_search_samples",
           "branches_launch", "resolved_branching", "scratch_search_samples", "schedule_launch",
           "search_plans", "validation_plans", "METRIC"]


def _branch_runs(br: ResolvedBranchSettings) -> int:
    """Branch trials: every (checkpoint, batch, alpha, seed), the trunk's continuations at its batch included."""
    per_point = len(br.branch_batches) * len(br.alphas) * br.repeats + (br.repeats - 1)
    return len(br.checkpoints) * per_point


def branch_search_samples(br: ResolvedBranchSettings, *, validate_schedule: bool = False, controls: int = 4) -> int:
    """Samples the branch search trains: the trunk's budget and every branch's window (trunk + branches: what
    finding CBS(t) costs); with ``validate_schedule`` an estimate of the validation's runs too (the schedule
    and ``controls`` fixed-batch controls, by default the grid's four, small, large, one iso-steps batch and the one
    above, on every validation seed, each the budget: the iso-step batches are known only once the schedule is)."""
    validation = (1 + controls) * br.validation_seeds * br.budget_samples if validate_schedule else 0
    return br.budget_samples + _branch_runs(br) * br.window_samples + validation


def scratch_search_samples(br: ResolvedBranchSettings) -> int:
    """Samples a from-scratch search over the same batch sizes and alphas trains
    (``maths.budget.scratch_grid_samples``)."""
    return scratch_grid_samples(br.budget_samples, br.branch_batches, br.alphas)


def branch_outline_lines(spec: SearchSpec, br: ResolvedBranchSettings) -> list[str]:
    """The outline a user checks first (``--dry-run``): the trunk, the checkpoints, the window, the branches
    and what the search costs against a from-scratch one."""
    tokens = br.tokens_per_sample

    def amount(samples: int) -> str:
        return f"{samples} samples" + (f" ({samples * tokens} tokens)" if tokens else "")

    validate = branch_settings(spec).validate_schedule
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
            "while_safe": "doubling again at a checkpoint while each doubled branch passed",
            "fitted": "one batch below a power law fitted to CBS(t), never above a measured CBS",
            "seesaw": "a doubling wherever the trunk's LR decay would halve the LR, capped by the measured CBS"
            }[br.schedule_rule]
    lines.append(f"  schedule: {rule} (branch.schedule_rule: {br.schedule_rule}), LR by the alpha rule")
    if validate:
        dense = frontier_batches(spec, br, tuned_controls(spec, br.budget_samples)) \
            if branch_settings(spec).frontier == DENSE else None
        more = branch_search_samples(br, validate_schedule=True, controls=len(dense) if dense else 4) - searched
        kind = ("small, large, iso-steps, above" if dense is None else
                f"the dense frontier B in {dense}, √2 apart around the best tuned batch where known before the runs, "
                f"else the trunk's; branch.frontier: dense")
        lines.append(f"  then: the schedule and its fixed-batch controls ({kind}) on "
                     f"{br.validation_seeds} seeds held out from the trunk's, about {more} samples more "
                     f"(--validate-schedule); each control at "
                     + ("the trunk's configuration" if branch_settings(spec).controls_from == "none" else
                        "its best configuration in a from-scratch search over search.batch_sizes at this budget, run "
                        f"first as the stage {CONTROLS_STAGE!r} ({spec.search.num_trials} trials, at most "
                        f"{spec.search.num_trials * br.budget_samples} samples more; "
                        "branch.controls_from: scratch)" if branch_settings(spec).controls_from == SCRATCH else
                        f"its best configuration in {branch_settings(spec).controls_from} (branch.controls_from)"))
        lines.append(f"  criterion, fixed before the validation runs: "
                     f"{criterion_text(br.tolerance, relative=br.tolerance_relative)}")
    unused = unused_controls_warning(spec)
    if unused:
        lines.append(unused)
    if spec.search.repeats > 1:
        lines.append(f"  ignored in branch mode: search.repeats={spec.search.repeats} (branch.repeats sets seeds)")
    return lines


# ---- on Ray ------------------------------------------------------------------------------------------

class BranchMethod:
    """``search.method: branch`` (``tune.search_method.SearchMethod``)."""

    name = "branch"

    def outline_lines(self, spec: SearchSpec, prepared: Prepared) -> list[str]:
        """The branch outline against the prepared budget (``branch_outline_lines``)."""
        return branch_outline_lines(spec, resolved_branching(spec, prepared))

    def check(self, spec: SearchSpec, prepared: Prepared) -> None:
        """The ``branch:`` section against the budget (a bad window or checkpoint is a ``SpecError`` here, before Ray
        starts), every batch within the training set; on the user's objects, ``model_init`` rebuilds one
        architecture (a branch loads the trunk's state dict into a model of its own)."""
        br = resolved_branching(spec, prepared)
        if prepared.on_objects:
            check_same_architecture(spec, prepared.data, (br.trunk_batch, br.largest_batch))
        if branch_settings(spec).validate_schedule:  # a missing or unfit branch.controls_from: one line, before Ray
            tuned_controls(spec, br.budget_samples)

    def planned_stages(self, spec: SearchSpec, prepared: Prepared) -> list[PlannedStage]:
        """What the dry run's time estimate counts (``tune.time_estimate``): the trunk and the branches as planned;
        with ``branch.validate_schedule`` the controls' from-scratch search (``branch.controls_from: scratch``) and
        the validation's runs, the schedule and each fixed-batch control on every validation seed, each timed at the
        trunk's batch to the budget (the schedule and the controls' batches are known only once the branches are
        read: a larger batch's micro-steps are fewer, so this errs long)."""
        br = resolved_branching(spec, prepared)
        runs = tuple(PlannedRun.of(f"{dict(items)['role']} B={plan.batch_schedule[0][1]}", plan)
                     for items, plan in search_plans(spec, br, "").runs)
        stages = [PlannedStage("trunk and branches", runs)]
        if not branch_settings(spec).validate_schedule:
            return stages
        if branch_settings(spec).controls_from == SCRATCH:
            stages += [dataclasses.replace(s, name=f"{CONTROLS_STAGE} ({s.name})")
                       for s in scratch_stages(scratch_spec(spec), br.budget_samples) or ()]
        dense = frontier_batches(spec, br, tuned_controls(spec, br.budget_samples)) \
            if branch_settings(spec).frontier == DENSE else None
        every, budget = spec.training.eval_every_samples, br.budget_samples
        run = PlannedRun(f"B={br.trunk_batch}", ((0, br.trunk_batch),), 0, budget, report_points(0, budget, every),
                         fixes_micro_batch=True)
        count = (1 + (len(dense) if dense else 4)) * br.validation_seeds
        return stages + [PlannedStage("schedule", (run,) * count, " (the schedule and its controls, each timed at the "
                                                                  "trunk's batch)")]

    def stages(self, spec: SearchSpec, prepared: Prepared) -> list[Stage]:
        """The trunk and the branches as one Tune experiment (``branches_launch``), with
        ``branch.validate_schedule`` the recommended schedule as a later one (``schedule_launch``), and with
        ``branch.controls_from: scratch`` the from-scratch search its controls are tuned by between them
        (``controls_stage``)."""
        br = resolved_branching(spec, prepared)
        search = Stage("search", lambda launcher, first: branches_launch(spec, launcher, br),
                       functools.partial(_restore_branches, spec))
        schedule = Stage("schedule", lambda launcher, first: schedule_launch(spec, launcher, br, str(first)),
                         functools.partial(_restore_schedule, spec))
        if not branch_settings(spec).validate_schedule:
            return [search]
        return [search, controls_stage(spec, prepared), schedule] if branch_settings(spec).controls_from == SCRATCH \
            else [search, schedule]


def scratch_spec(spec: SearchSpec) -> SearchSpec:
    """The spec as a from-scratch search (``search.method: scratch``): what the ``controls`` stage searches."""
    return dataclasses.replace(spec, search=dataclasses.replace(spec.search, method="scratch"))


def controls_stage(spec: SearchSpec, prepared: Prepared) -> Stage:
    """``branch.controls_from: scratch``: the from-scratch search over ``search.batch_sizes`` (each batch's
    alpha and warmup, the same budget) as the stage ``controls`` of this experiment, its Tune run and its restore the
    from-scratch method's own (looked up by name: no method imports another's), on a launcher of the spec as a
    from-scratch search. It records nothing in the branch experiment's metadata but its stage (the schedule stage
    reads its experiment from the stage record), so its settings never overwrite the branch search's."""
    as_scratch = scratch_spec(spec)
    inner = method_named("scratch").stages(as_scratch, prepared)[0]

    def start(launcher: ExperimentLauncher, first: Optional[str]) -> Optional[Launch]:
        launch = inner.start(launcher.for_spec(as_scratch, launcher.prepared), None)
        if launch is None:
            return None
        print(f"controls: the from-scratch search whose best configuration per batch the schedule's fixed-batch "
              f"controls train at (branch.controls_from: scratch), {spec.search.num_trials} trials over "
              f"B in {list(spec.batch_sizes)}", flush=True)
        return Launch(launch.run)

    def restore(launcher: ExperimentLauncher, path: str, meta: ExperimentMeta) -> None:
        inner.restore(launcher.for_spec(as_scratch, launcher.prepared), path, meta)

    return Stage(CONTROLS_STAGE, start, restore)


def _controls_experiment(spec: SearchSpec, path: str, meta: ExperimentMeta) -> Optional[str]:
    """The ``controls`` stage's experiment where this search ran one (``branch.controls_from: scratch``)."""
    if branch_settings(spec).controls_from != SCRATCH:
        return None
    return recorded_controls_stage(meta, path)


def _tuned_start(spec: SearchSpec, br: ResolvedBranchSettings, path: str, meta: ExperimentMeta) -> Optional[int]:
    """``seesaw_start: tuned``: B*, the best tuned fixed batch at the budget (``fair_controls.best_batch``) of the
    from-scratch search ``branch.controls_from`` names or ran; None where there is none (the schedule then starts
    at the first resolvable CBS, ``methods.branch.reading.seesaw_start_batch``)."""
    if br.schedule_rule != "seesaw" or br.seesaw_start != "tuned":
        return None
    tuned = tuned_controls(spec, br.budget_samples, stage_experiment=_controls_experiment(spec, path, meta))
    found = tuned.best_batch()  # ranked by the metric that chose the configurations, not necessarily the spec's
    print(f"schedule: seesaw starts from the best tuned fixed batch B={found} ({tuned.source})" if found else
          "schedule: seesaw_start tuned, but no tuned fixed batch is known: it starts from the first resolvable CBS",
          flush=True)
    return found


def _resumed_branching(spec: SearchSpec, launcher: ExperimentLauncher, meta: ExperimentMeta) -> ResolvedBranchSettings:
    """The ``branch:`` section a restored experiment's plans are rebuilt from: resolved as recorded."""
    return resolve_branch_settings(spec, launcher.prepared.budget_samples, meta.tokens_per_sample)


def _restore_branches(spec: SearchSpec, launcher: ExperimentLauncher, path: str, meta: ExperimentMeta) -> None:
    """The trunk and branch trials from their checkpoints (their plans from the recorded ``checkpoint_dir``)."""
    checkpoint_dir = meta.method_record.get("checkpoint_dir")
    if checkpoint_dir is None:  # recorded before the trunk starts: the metadata was not cbs-ray's
        raise SpecError(f"--resume: {path}: the branch experiment's metadata has no checkpoint_dir")
    launcher.tune(restore=path, plans=search_plans(spec, _resumed_branching(spec, launcher, meta), checkpoint_dir))


def _restore_schedule(spec: SearchSpec, launcher: ExperimentLauncher, path: str, meta: ExperimentMeta) -> None:
    """The schedule run from its checkpoints, its runs the schedule recorded before it started."""
    recorded = meta.method_record.get("schedule")
    if recorded is None:  # recorded with the schedule experiment's path: the metadata was not cbs-ray's
        raise SpecError(f"--resume: {path}: the branch experiment's metadata has no schedule")
    plans = validation_plans(spec, _resumed_branching(spec, launcher, meta), recorded["batch_size_schedule"],
                             recorded["alpha"], recorded=recorded)
    launcher.tune(restore=path, plans=plans)


def branches_launch(spec: SearchSpec, launcher: ExperimentLauncher, br: ResolvedBranchSettings) -> Launch:
    """The trunk and the branches: one Tune experiment, the trunk first, its checkpoints' folder recorded."""
    def trunk_checkpoints(name: str) -> str:
        return f"{spec.storage_uri.rstrip('/')}/{name}/trunk_checkpoints"

    def fields(name: str, path: str) -> dict:
        # What the branch summary reads (summarize_branches): the resolved values, in samples.
        return {"method": "branch", "metric": "eval_loss", "mode": "min", "budget_samples": br.budget_samples,
                "tolerance": br.tolerance, "tokens_per_sample": br.tokens_per_sample,
                METHOD_RECORD: {**br.to_meta(), "checkpoint_dir": trunk_checkpoints(name)}}

    def run(name: str, meta: ExperimentMeta) -> str:
        checkpoint_dir = trunk_checkpoints(name)
        plans = search_plans(spec, br, checkpoint_dir)
        points = plans.points
        # Each branch starts once its checkpoint is published (no trial waits in a slot for one); TrunkWatch marks
        # the end of a trunk that fails for good, and the gate then drops the branches whose checkpoint never came.
        tune_config = {**points_config(points), "search_alg": PublishedCheckpoints(points, checkpoint_dir)}
        path = launcher.tune(meta=meta, name=name, plans=plans, progress_metric=METRIC,
                           callbacks=[TrunkWatch(checkpoint_dir)],
                           expected_trials=lambda: len(points) - len(never_started(points, checkpoint_dir)),
                           **tune_config)
        dropped = never_started(points, checkpoint_dir)
        if dropped:
            starts = sorted({p["start_samples"] for p in dropped})
            print(f"branch: the trunk ended without its checkpoints at {', '.join(map(str, starts))} samples; "
                  f"their {len(dropped)} branches are not run", flush=True)
        return path

    return Launch(run, fields, kind="branch")


def _repeats_the_trunk(spec: SearchSpec, br: ResolvedBranchSettings, schedule) -> bool:
    """The schedule keeps the trunk's batch throughout and every control trains at the trunk's configuration
    (``branch.controls_from: none``): the schedule run would be the fixed control at that batch again. Against
    tuned controls (a from-scratch search named or run as a stage) a constant schedule is still compared: the user
    would train it at the trunk's configuration, not the tuned one."""
    return (len(schedule) < 2 and int(schedule[0][1]) == br.trunk_batch
            and branch_settings(spec).controls_from == "none")


def schedule_launch(spec: SearchSpec, launcher: ExperimentLauncher, br: ResolvedBranchSettings,
                    path: str) -> Optional[Launch]:
    """Train the recommended schedule for the whole budget against its fixed-batch controls
    (``methods.branch.fair_controls.validation_controls``: ``branch.frontier``), each on ``branch.validation_seeds``
    seeds held out from the
    trunk's, as a second Tune experiment, the schedule and its criterion recorded in the first one's metadata before
    it starts, so that a killed run resumes it; None when the schedule run would repeat the trunk's fixed control
    (``_repeats_the_trunk``)."""
    meta = ExperimentMeta.read(path)
    recorded = meta.method_record.get("schedule")
    start = None
    if recorded:  # resumed before Tune saved the schedule run's state: train what was decided then
        schedule, alpha, start = recorded["batch_size_schedule"], recorded["alpha"], recorded.get("start_batch")
    else:
        start = _tuned_start(spec, br, path, meta)
        read = {**meta.recorded(), **({"schedule": {"start_batch": start}} if start is not None else {})}
        summary = summarize_branches(load_history(path), read)
        schedule, alpha = summary.batch_size_schedule, summary.schedule_alpha
    if _repeats_the_trunk(spec, br, schedule):
        print(f"schedule: the critical batch never rose above the trunk's batch {br.trunk_batch}; nothing to "
              f"validate (the schedule run would repeat the trunk, and its fixed-batch control at "
              f"B={br.trunk_batch})", flush=True)
        return None
    criterion = criterion_text(br.tolerance, relative=br.tolerance_relative)
    chosen = chosen_controls(spec, br, schedule, alpha=alpha, recorded=recorded,
                             stage_experiment=_controls_experiment(spec, path, meta))
    controls, configs = chosen.controls, chosen.configurations
    decided = {"batch_size_schedule": [[int(s), int(b)] for s, b in schedule], "alpha": alpha,
               "margin": br.tolerance, "criterion": criterion, "controls_from": chosen.source,
               "control_configurations": configs, **({"start_batch": int(start)} if start is not None else {}),
               **({"controls": [[n, int(b)] for n, b in controls]} if branch_settings(spec).frontier == DENSE else {})}
    plans = validation_plans(spec, br, schedule, alpha, recorded=decided)
    points = plans.points
    print(f"schedule: training {schedule} (alpha {alpha:g}) for {br.budget_samples} samples against fixed batches "
          f"{', '.join(f'{n} B={b}' for n, b in controls)}, on {br.validation_seeds} seeds ({len(points)} runs)\n"
          f"  controls' configurations: {configurations_line(configs)}\n"
          f"  criterion, fixed before these runs: {criterion}", flush=True)
    return Launch(lambda name, meta: launcher.tune(meta=meta, name=name, plans=plans, progress_metric=METRIC,
                                                 **points_config(points)),
                  lambda name, experiment: {METHOD_RECORD: {"schedule_experiment": experiment, "schedule": decided}})


METRIC = ("eval_loss", "min")
"""What every run of a branch search is compared on (name, mode): the progress display ranks them by it."""


def search_plans(spec: SearchSpec, br: ResolvedBranchSettings, checkpoint_dir: str) -> PresetPlans:
    """The first experiment's runs, the trunk first, then the branches (``methods.branch.runs.trunk_config`` and
    ``branch_configs``), each with its plan (``methods.branch.runs.branch_run_plan``)."""
    points = [trunk_config(br, checkpoint_dir), *branch_configs(br, checkpoint_dir)]
    return PresetPlans.of(points, functools.partial(branch_run_plan, spec, br), tokens_per_sample=br.tokens_per_sample)


def validation_plans(spec: SearchSpec, br: ResolvedBranchSettings, schedule, alpha: float,
                     recorded: Optional[dict] = None) -> PresetPlans:
    """The schedule validation's runs (``methods.branch.runs.validation_configs``: the schedule and its fixed-batch
    controls and the configuration each trains at, ``methods.branch.fair_controls.chosen_controls``, seed by seed),
    each with its plan."""
    chosen = chosen_controls(spec, br, schedule, alpha=alpha, recorded=recorded)
    points = validation_configs(br, schedule, alpha, chosen.controls, chosen.tuned)
    return PresetPlans.of(points, functools.partial(branch_run_plan, spec, br), tokens_per_sample=br.tokens_per_sample)


def resolved_branching(spec: SearchSpec, prepared: Prepared) -> ResolvedBranchSettings:
    """The ``branch:`` section against the prepared data: the budget (in the prepared data's tokens where it is
    in tokens), and every batch within the training set (a larger one would fail every run at set-up)."""
    tokens = None if spec.training.budget_tokens is None else prepared.tokens_per_sample
    br = resolve_branch_settings(spec, prepared.budget_samples, tokens)
    check_batches_fit("branch.batch_sizes", max(br.branch_batches), prepared.train_examples)
    return dataclasses.replace(br, train_examples=prepared.train_examples)


METHOD = BranchMethod()
"""What its entry in ``records.method_registry`` names."""
