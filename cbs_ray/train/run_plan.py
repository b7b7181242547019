"""What one run of a branch search trains (``search.method: branch``; Merrill et al. 2025,
arXiv 2505.23971): its role, its batch in samples, where it starts and stops, where it reports and saves, and
the LR of every step (``BranchPlan``), and the Tune configs that name each run.

The LR of every branch-mode run follows the trunk's warmup-and-decay shape laid out in samples, at the level
the alpha rule gives the batch in use::

    lr(samples, B) = trunk_peak_lr · (B / B_trunk) ** alpha · lr_multiplier(samples // B_trunk, trunk schedule)

so a branch from a checkpoint continues the trunk's schedule where the trunk was, and the schedule run's LR
steps up with its batch. A branch keeps the checkpoint's weights *and* optimizer state (Adam's moments and step
count): the moments estimate per-example gradient statistics, which do not depend on the batch, and restarting
them would add a warm-up transient that has nothing to do with the batch size and would bias CBS(t) down.
A branch also continues the trunk's data order from the checkpoint, so trunk and branches see the same
examples in the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from cbs_ray.maths.lr_schedule import lr_multiplier
from cbs_ray.spec.branch_section import Branching, resolve_branching
from cbs_ray.spec.schema import SearchSpec

__all__ = ["BranchPlan", "ROLES", "plan_from_config", "trunk_config", "branch_configs", "schedule_config"]

ROLES = ("trunk", "branch", "schedule")
"""The runs of a branch search: the trunk (which is also the fixed small batch the schedule is validated
against: same seed, same data order, same samples), the branches, and the recommended schedule's run."""


@dataclass(frozen=True)
class BranchPlan:
    """What one run of a branch search trains, in samples."""

    role: str
    """``trunk``, ``branch`` or ``schedule`` (``ROLES``)."""
    trunk_batch: int
    batch_schedule: tuple[tuple[int, int], ...]
    """``(from_samples, batch)`` pairs, ascending; the first starts at ``start_samples``."""
    start_samples: int
    """0, or the trunk checkpoint a branch starts from."""
    stop_samples: int
    """The budget, or a branch's checkpoint + window."""
    report_at: tuple[int, ...]
    """Absolute samples at which the run evaluates and reports (ascending; the last is ``stop_samples``)."""
    save_at: tuple[int, ...] = ()
    """The trunk's branch checkpoints (absolute samples), saved under ``checkpoint_path``."""
    checkpoint_dir: str = ""
    alpha: float = 1.0
    trunk_peak_lr: float = 0.0
    trunk_warmup_steps: int = 0
    trunk_total_steps: int = 1
    lr_decay: str = "linear"
    largest_batch: int = 0
    """The search's largest batch (trunk's and branches'). Every run of the search trains on a whole number of
    these from the training set (0: all of it), so that every run, whatever its micro-batch, has the same epoch
    boundaries: a branch continues the trunk's data order exactly, and so does a restart of either."""

    def batch_at(self, samples: int) -> int:
        """The batch of the step that starts at ``samples``."""
        batch = self.batch_schedule[0][1]
        for start, b in self.batch_schedule:
            if samples >= start:
                batch = b
        return batch

    def peak_lr(self, batch: int) -> float:
        """The alpha rule's peak LR at ``batch``: the trunk's peak scaled from the trunk's batch."""
        return self.trunk_peak_lr * (batch / self.trunk_batch) ** self.alpha

    def lr_at(self, samples: int, batch: Optional[int] = None) -> float:
        """The LR of the step that starts at ``samples`` (module docstring)."""
        batch = self.batch_at(samples) if batch is None else batch
        multiplier = lr_multiplier(samples // self.trunk_batch, self.trunk_warmup_steps, self.trunk_total_steps,
                                   decay=self.lr_decay)
        return self.peak_lr(batch) * multiplier

    def steps(self) -> tuple[tuple[int, int], ...]:
        """``(samples at its start, batch)`` of every optimizer step this run takes, from ``start_samples`` to
        ``stop_samples``. A ``ValueError`` where the steps would not land exactly on the stop, a report point
        or a save point (a point inside a step would be silently skipped)."""
        steps, samples = [], self.start_samples
        while samples < self.stop_samples:
            batch = self.batch_at(samples)
            steps.append((samples, batch))
            samples += batch
        landed = {start for start, _ in steps[1:]} | {samples}
        missed = [p for p in (self.stop_samples, *self.report_at, *self.save_at) if p not in landed]
        if missed:
            raise ValueError(f"{self.role} run: its steps (batches {self.batch_schedule} from {self.start_samples}) "
                             f"do not land on sample {missed[0]}")
        return tuple(steps)

    def checkpoint_path(self, samples: int) -> str:
        """Where the trunk's checkpoint at ``samples`` is written and branches read it: a directory holding
        ``checkpoint.STATE_FILE``."""
        return f"{self.checkpoint_dir.rstrip('/')}/samples_{samples}"


def _reports(start: int, stop: int, every: int, extra: Sequence[int] = ()) -> tuple[int, ...]:
    regular = range(every * (start // every + 1), stop + 1, every)  # the milestones after start, up to stop
    return tuple(sorted({*regular, *(x for x in extra if start < x <= stop), stop}))


def plan_from_config(spec: SearchSpec, config: dict, budget_samples: int,
                     tokens_per_sample: Optional[int] = None) -> BranchPlan:
    """The plan of the branch-mode trial whose Tune config is ``config`` (made by ``trunk_config``,
    ``branch_configs`` or ``schedule_config``: ``role``, ``log2_batch``, ``alpha``, ``warmup_fraction``,
    ``checkpoint_dir``, and ``start_samples`` for a branch, ``batch_schedule`` for the schedule run)."""
    br = resolve_branching(spec, budget_samples, tokens_per_sample)
    role, every = config["role"], spec.training.eval_every_samples
    common = dict(trunk_batch=br.trunk_batch, checkpoint_dir=config.get("checkpoint_dir", ""),
                  alpha=float(config["alpha"]), trunk_peak_lr=br.trunk_peak_lr,
                  trunk_warmup_steps=br.trunk_warmup_steps, trunk_total_steps=br.trunk_total_steps,
                  lr_decay=spec.training.lr_decay, largest_batch=br.largest_batch)
    if role == "trunk":
        ends = [c + br.window_samples for c in br.checkpoints]
        return BranchPlan(role=role, batch_schedule=((0, br.trunk_batch),), start_samples=0,
                          stop_samples=budget_samples, report_at=_reports(0, budget_samples, every,
                                                                          [*br.checkpoints, *ends]),
                          save_at=br.checkpoints, **common)
    if role == "branch":
        start, batch = int(config["start_samples"]), 2 ** int(config["log2_batch"])
        stop = start + br.window_samples
        return BranchPlan(role=role, batch_schedule=((start, batch),), start_samples=start, stop_samples=stop,
                          report_at=_reports(start, stop, every), **common)
    if role == "schedule":
        schedule = tuple((int(s), int(b)) for s, b in config["batch_schedule"])
        return BranchPlan(role=role, batch_schedule=schedule, start_samples=0, stop_samples=budget_samples,
                          report_at=_reports(0, budget_samples, every), **common)
    raise ValueError(f"unknown branch-mode role {role!r} (known: {', '.join(ROLES)})")


def _log2(batch: int) -> int:
    return batch.bit_length() - 1


def trunk_config(br: Branching, checkpoint_dir: str) -> dict:
    """The trunk's Tune config."""
    return {"role": "trunk", "log2_batch": _log2(br.trunk_batch), "alpha": br.trunk_alpha,
            "warmup_fraction": br.warmup_fraction, "start_samples": 0, "checkpoint_dir": checkpoint_dir}


def branch_configs(br: Branching, checkpoint_dir: str) -> list[dict]:
    """One Tune config per (checkpoint, branch batch, alpha): the branches, earliest checkpoint first."""
    return [{"role": "branch", "log2_batch": _log2(batch), "alpha": alpha, "warmup_fraction": br.warmup_fraction,
             "start_samples": start, "checkpoint_dir": checkpoint_dir}
            for start in br.checkpoints for batch in br.branch_batches for alpha in br.alphas]


def schedule_config(br: Branching, schedule: Sequence[Sequence[int]], alpha: float) -> dict:
    """The recommended schedule's validation run: the trunk's seed and data order, the batch following
    ``schedule`` (``[start_samples, batch]`` pairs), the LR following the alpha rule at ``alpha``."""
    return {"role": "schedule", "log2_batch": _log2(int(schedule[0][1])), "alpha": alpha,
            "warmup_fraction": br.warmup_fraction, "start_samples": 0,
            "batch_schedule": [[int(s), int(b)] for s, b in schedule], "checkpoint_dir": ""}
