"""Branch mode's runs (``search.method: branch``; Merrill et al. 2025, arXiv 2505.23971): the trunk, the
branches and the recommended schedule's validation runs (``ROLES``), each as its Tune config (``trunk_config``,
``branch_configs``, ``validation_configs``) and as the ``train.run_plan.RunPlan`` it trains (``branch_run_plan``),
built on the driver. Pure: no Ray, no torch. The training loop knows none of these roles: each plan says what the
run does, every run's LR laid out in samples (``LrSchedule.in_samples``) with a micro-batch fixed for the run
(``fixes_micro_batch``), only the trunk measuring the noise scale, and its hooks (``methods.branch.hooks``) what it
adds: the trunk publishes its checkpoints, a branch starts from one, every run labels its reports.

The LR of every run follows the trunk's warmup-and-decay shape laid out in samples, at the level the alpha rule
gives the batch in use::

    lr(samples, B) = trunk_peak_lr · (B / B_trunk) ** alpha · lr_multiplier(samples // B_trunk, trunk schedule)

so a branch from a checkpoint continues the trunk's schedule where the trunk was, and the schedule run's LR
steps up with its batch: with alpha 0.5 (the default) that is the paper's √k·η, and × √2 per doubling of the
schedule. A branch keeps the checkpoint's weights and, by default (``branch.optimizer_state: keep``, the
paper's), Adam's moments and step count. That is not because the moments are batch-free: Adam's second moment
estimates E[g²] = G² + σ²/B per coordinate, which falls with the batch, so a branch at k·B starts with a
preconditioner made for B (too large a v, so smaller steps) that β2 = 0.999 forgets over ~1 000 steps, more than
a window; a reset (``reset``) instead starts fresh moments with their bias correction, a transient of its own.
docs/branch-mode.md has what the two gave on the tiny causal LM. A branch at seed offset 0 continues the trunk's
data order from the checkpoint, so trunk and branches see the same examples in the window; another offset
(``branch.repeats``) reshuffles the epoch with its own seed from the same position.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional, Sequence

from cbs_ray.maths.budget import optimizer_steps
from cbs_ray.maths.lr_schedule import scaled_lr, warmup_steps
from cbs_ray.methods.branch.hooks import PublishesCheckpoints, RunLabel, StartsFromCheckpoint
from cbs_ray.methods.branch.settings import ResolvedBranchSettings
from cbs_ray.records.trial_point import BATCH_KEY, batch_of, encode_batch
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.run_plan import LrSchedule, RunPlan, report_points

__all__ = ["ROLES", "TUNED", "branch_run_plan", "trunk_config", "branch_configs", "schedule_config",
           "validation_configs", "validation_seed_offsets", "format_batch_schedule", "parse_batch_schedule"]

ROLES = ("trunk", "branch", "schedule")
"""The runs of a branch search: the trunk, the branches, and the schedule's validation runs (the schedule and
its fixed-batch controls, on seeds held out from the trunk's); what the report's ``role`` column says of each."""


def branch_run_plan(spec: SearchSpec, br: ResolvedBranchSettings, point: dict) -> RunPlan:
    """The plan of one run of a branch search, built on the driver from its point (made by ``trunk_config``,
    ``branch_configs`` or ``schedule_config``: its ``role``, ``log2_batch``, ``alpha``, ``checkpoint_dir``, a
    branch's ``start_samples``, a schedule run's ``batch_schedule`` and ``control``) and the spec's ``branch:``
    section resolved against the budget (``br``). Every trial gets the plans of its experiment's runs
    (``train.trial_plans.PresetPlans``), never a config to interpret."""
    role, every, budget_samples = point["role"], spec.training.eval_every_samples, br.budget_samples
    directory = point.get("checkpoint_dir", "")
    lr = LrSchedule(batch=br.trunk_batch, alpha=float(point["alpha"]), peak=br.trunk_peak_lr,
                    warmup_steps=br.trunk_warmup_steps, total_steps=br.trunk_total_steps, decay=spec.training.lr_decay,
                    warmup_fraction=float(point["warmup_fraction"]), in_samples=True)
    # the trunk's B_simple is the one the branch summary plots beside CBS(t)
    noise_scale_off = "" if role == "trunk" else f"not measured on a branch-mode {role} run (the trunk's is plotted)"

    def plan(**own: Any) -> RunPlan:
        return RunPlan(largest_batch=br.largest_batch, seed_offset=int(point.get("seed_offset", 0)),
                       fixes_micro_batch=True, noise_scale_off=noise_scale_off, **own)

    if role == "trunk":
        ends = [c + br.window_samples for c in br.checkpoints]
        return plan(batch_schedule=((0, br.trunk_batch),), start_samples=0, stop_samples=budget_samples,
                    report_at=report_points(0, budget_samples, every, [*br.checkpoints, *ends]), lr=lr,
                    hooks=PublishesCheckpoints(role, checkpoint_dir=directory, publish_at=tuple(br.checkpoints)))
    if role == "branch":
        start, batch = int(point["start_samples"]), batch_of(point)
        stop = start + br.window_samples
        return plan(batch_schedule=((start, batch),), start_samples=start, stop_samples=stop,
                    report_at=report_points(start, stop, every), lr=lr,
                    hooks=StartsFromCheckpoint(role, checkpoint_dir=directory,
                                               resets_optimizer=br.optimizer_state == "reset"))
    if role == "schedule":
        schedule = parse_batch_schedule(point["batch_schedule"])
        if point.get("lr_from") == TUNED:  # a fair control: its own LR schedule, as the from-scratch search ran it
            lr = _tuned_lr(spec, schedule[0][1], lr, budget_samples)
        return plan(batch_schedule=schedule, start_samples=0, stop_samples=budget_samples,
                    report_at=report_points(0, budget_samples, every), lr=lr,
                    hooks=RunLabel(role, control=point.get("control", "schedule")))
    raise ValueError(f"unknown branch-mode role {role!r} (known: {', '.join(ROLES)})")


TUNED = "tuned"
"""A validation control's ``lr_from``: its batch's best configuration from a from-scratch search at the same
budget (``branch.controls_from``, control_configurations.py); ``trunk`` (or none): the trunk's LR schedule."""


def _tuned_lr(spec: SearchSpec, batch: int, lr: LrSchedule, budget_samples: int) -> LrSchedule:
    """A fixed-batch control's LR as a from-scratch trial at its (alpha, warmup) has it
    (``train.run_plan.scratch_run_plan``): peak the alpha rule's from ``training.base_lr`` at ``base_batch``, warmup
    its fraction of the control's own steps."""
    t, steps = spec.training, optimizer_steps(budget_samples, batch)
    return replace(lr, batch=batch, peak=scaled_lr(t.base_lr, batch, t.base_batch, lr.alpha),
                   warmup_steps=warmup_steps(lr.warmup_fraction, steps), total_steps=steps)


def trunk_config(br: ResolvedBranchSettings, checkpoint_dir: str) -> dict:
    """The trunk's Tune config."""
    return {"role": "trunk", BATCH_KEY: encode_batch(br.trunk_batch), "alpha": br.trunk_alpha,
            "warmup_fraction": br.warmup_fraction, "start_samples": 0, "checkpoint_dir": checkpoint_dir,
            "seed_offset": 0}


def branch_configs(br: ResolvedBranchSettings, checkpoint_dir: str) -> list[dict]:
    """One Tune config per (checkpoint, branch batch, alpha, seed offset): the branches, earliest checkpoint
    first; with ``branch.repeats`` > 1 also the trunk's continuations at its own batch with the other seeds
    (one alpha: at the trunk's batch every alpha gives the trunk's LR). Every config names its ``seed_offset``:
    Tune fills a key a preset point lacks from the space, at random."""
    configs = []
    for start in br.checkpoints:
        for batch in br.run_batches():
            alphas = br.alphas[:1] if batch == br.trunk_batch else br.alphas
            for alpha in alphas:
                for seed in br.seed_offsets:
                    if batch == br.trunk_batch and seed == 0:
                        continue  # that is the trunk itself
                    configs.append({"role": "branch", BATCH_KEY: encode_batch(batch), "alpha": alpha,
                                    "warmup_fraction": br.warmup_fraction, "start_samples": start,
                                    "checkpoint_dir": checkpoint_dir, "seed_offset": seed})
    return configs


def schedule_config(br: ResolvedBranchSettings, schedule: Sequence[Sequence[int]], alpha: float, *,
                    control: str = "schedule", seed_offset: int = 0,
                    tuned: Optional[tuple[float, float]] = None) -> dict:
    """A run of the schedule's validation: the batch following ``schedule`` (``[start_samples, batch]`` pairs;
    a fixed-batch control is one pair), the LR following the alpha rule at ``alpha`` on the trunk's schedule
    laid out in samples, seed ``seed_offset`` (0: the trunk's seed and data order). ``tuned``: a control's
    (alpha, warmup fraction) from a from-scratch search, trained on its own LR schedule (``lr_from: tuned``)."""
    alpha, warmup = tuned if tuned is not None else (alpha, br.warmup_fraction)
    return {"role": "schedule", BATCH_KEY: encode_batch(int(schedule[0][1])), "alpha": alpha,
            "warmup_fraction": warmup, "start_samples": 0,
            "batch_schedule": format_batch_schedule(schedule), "checkpoint_dir": "",
            "control": control, "seed_offset": int(seed_offset), "lr_from": "trunk" if tuned is None else TUNED}


def format_batch_schedule(schedule: Sequence[Sequence[int]]) -> str:
    """A schedule as the Tune config holds it, ``"0:8 1024:32"``: a string, since Tune checks a preset point's
    list value against its space item by item (and fails on the pairs)."""
    return " ".join(f"{int(s)}:{int(b)}" for s, b in schedule)


def parse_batch_schedule(value) -> tuple[tuple[int, int], ...]:
    """``format_batch_schedule``'s string back as ``(start, batch)`` pairs; a list of pairs as an experiment
    written before it holds them."""
    if isinstance(value, str):
        return tuple((int(s), int(b)) for s, b in (pair.split(":") for pair in value.split()))
    return tuple((int(s), int(b)) for s, b in value)


def validation_configs(br: ResolvedBranchSettings, schedule: Sequence[Sequence[int]], alpha: float,
                       controls: Sequence[tuple[str, int]],
                       tuned: Optional[dict[int, tuple[float, float]]] = None) -> list[dict]:
    """Every run of the schedule's validation: the schedule and each fixed-batch control (``(name, batch)``)
    on ``br.validation_seeds`` seeds, seed by seed (seed s of every kind shares its initial weights and data
    order). The seeds are held out from the trunk's (offsets 1…n; the trunk is offset 0): the run the schedule
    was read from is not one of its controls. ``tuned``: batch → (alpha, warmup fraction) of the controls that
    train at a from-scratch search's best configuration (``branch.controls_from``); the rest at the trunk's."""
    configs = []
    for seed in validation_seed_offsets(br):
        configs.append(schedule_config(br, schedule, alpha, seed_offset=seed))
        for name, batch in controls:
            configs.append(schedule_config(br, [[0, int(batch)]], alpha, control=name, seed_offset=seed,
                                           tuned=(tuned or {}).get(int(batch))))
    return configs


def validation_seed_offsets(br: ResolvedBranchSettings) -> range:
    """The validation's seed offsets, disjoint from the trunk's 0: 1…``validation_seeds``."""
    return range(1, br.validation_seeds + 1)
