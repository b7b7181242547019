"""What branch mode's runs add to the training loop (``train.hooks.TrainingHooks``), built with their plans on the
driver (``methods.branch.runs``): every run says in its reports what it is and reports the EMA of its training loss
(``RunLabel``); the trunk publishes its state at each branch point for the branches and marks its end
(``PublishesCheckpoints``); a branch starts from the trunk's state at its point (``StartsFromCheckpoint``).

The state travels as ``train.checkpoint`` writes and reads it: published whole into a directory of its own
(``publish_state``), waited for (``wait_for_trunk``) and loaded (``load_branch_start``) by the branch; the driver's
side of it is ``methods.branch.gate`` (a branch starts once its checkpoint is there) and ``trunk_watch``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from cbs_ray.train.hooks import TrainingHooks, Trial

if TYPE_CHECKING:
    from cbs_ray.train.run_plan import RunPlan

__all__ = ["RunLabel", "PublishesCheckpoints", "StartsFromCheckpoint"]


@dataclass(frozen=True)
class RunLabel(TrainingHooks):
    """Every run of a branch search: its reports carry its role, start, seed offset and (a validation run's) kind,
    the history's columns the branch reading sorts the runs by, and the EMA of its training loss (what
    ``branch.loss: train_ema`` reads)."""

    role: str
    """The run's kind (``methods.branch.runs.ROLES``): the report's ``role`` column, the trial's first line."""
    control: Optional[str] = None
    """The schedule validation's run kind (``schedule``, ``small``, ``large``, ``iso_steps``, …); None otherwise."""

    def title(self, plan: RunPlan) -> str:
        return (f"{self.role}, samples {plan.start_samples} to {plan.stop_samples}, batches "
                f"{[b for _, b in plan.batch_schedule]}")

    def report_fields(self, plan: RunPlan, train_loss_ema: Optional[float]) -> dict:
        return {"role": self.role, "start_samples": plan.start_samples, "seed_offset": plan.seed_offset,
                "control": self.control, "train_loss_ema": train_loss_ema}


@dataclass(frozen=True)
class PublishesCheckpoints(RunLabel):
    """The trunk: at each of ``publish_at`` (report points of its plan) it publishes its state for the branches
    from there, and it marks its end in ``checkpoint_dir`` (``train.checkpoint.TRUNK_DONE``), so a branch waiting on
    a point it never reached stops waiting."""

    checkpoint_dir: str = ""
    """Where it publishes (``train.checkpoint.trunk_checkpoint_path``) and marks its end."""
    publish_at: tuple[int, ...] = ()
    """The branch points (absolute samples)."""

    def at_checkpoint(self, trial: Trial) -> None:
        """Its state at a branch point, where the branches from it read it: everything a restart would take, and
        the data position a branch continues its data order from. Under FSDP every rank gathers the state
        (``train.checkpoint.state_dicts``, a collective) and rank 0 writes it."""
        from cbs_ray.train.checkpoint import publish_state, state_dicts, trunk_checkpoint_path  # torch: in the worker

        parts, progress, rank = trial.parts, trial.progress, trial.session.rank
        if progress.samples not in self.publish_at or not (rank == 0 or parts.is_fsdp):
            return
        states = state_dicts(parts.model, parts.optimizer) if parts.is_fsdp else None
        if rank != 0:
            return
        path = trunk_checkpoint_path(self.checkpoint_dir, progress.samples)
        if publish_state(path, parts.model, parts.optimizer, parts.scheduler, parts.scaler, progress.step, {
                "samples_drawn": progress.drawn, "first_loss": progress.first_loss, "samples_seen": progress.samples,
                "micro_batch": parts.batching.micro_batch}, states=states):
            print(f"trunk: checkpoint for the branches at {progress.samples} samples: {path}", flush=True)

    def at_end(self, trial: Trial) -> None:
        from cbs_ray.train.checkpoint import mark_trunk_done

        if trial.session.rank == 0:
            mark_trunk_done(self.checkpoint_dir, str(trial.progress.samples))


@dataclass(frozen=True)
class StartsFromCheckpoint(RunLabel):
    """A branch: a fresh start (not a restart from its own checkpoint) waits for the trunk's state at its
    ``start_samples`` and continues from it: its weights, optimizer state (unless ``resets_optimizer``), data
    position and first loss (the divergence test's reference), not its clocks; its LR is its own plan's."""

    checkpoint_dir: str = ""
    """Where the trunk publishes its state (``PublishesCheckpoints``)."""
    resets_optimizer: bool = False
    """Start with fresh optimizer state (``branch.optimizer_state: reset``)."""

    def start(self, trial: Trial) -> TrainingHooks:
        from cbs_ray.train.checkpoint import load_branch_start, trunk_checkpoint_path, wait_for_trunk

        if trial.restarted:
            return self
        parts, plan, rank = trial.parts, trial.cfg.plan, trial.session.rank
        path = trunk_checkpoint_path(self.checkpoint_dir, plan.start_samples)
        wait_for_trunk(path, self.checkpoint_dir, log=lambda line: print(line, flush=True) if rank == 0 else None)
        trunk = load_branch_start(path, parts.model, parts.optimizer, parts.scaler,
                                  keep_optimizer=not self.resets_optimizer)
        for group, lr in zip(parts.optimizer.param_groups, parts.scheduler.get_last_lr()):
            group["lr"] = lr  # the loaded state carries the trunk's
        if rank == 0:
            print(f"branch: started from the trunk's checkpoint at {plan.start_samples} samples"
                  + (" (Adam's state reset)" if self.resets_optimizer else ""), flush=True)
        trial.progress.drawn, trial.progress.first_loss = trunk["samples_drawn"], trunk.get("first_loss")
        return self
