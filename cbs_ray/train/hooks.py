"""What a search method adds to the training loop of its runs (``TrainingHooks``), and what the loop hands a hook
(``Trial``).

A run's plan (``train.run_plan.RunPlan``) says what every trial trains: its batches, span, reports and LR. What only
some methods' runs do besides (branch mode's trunk publishes its state for the branches and a branch starts from it,
``methods.branch.hooks``; a ladder run evaluates the average of its iterates, ``methods.ladder.hooks``) is a
``TrainingHooks`` the method puts into the plans it builds; the loop calls it and knows no method. The plans are built
on the driver and travel to the trial's workers inside its config, so a method's hooks are a plain frozen dataclass of
settings (picklable, importable where the loop runs); what a run keeps while it trains (the average of its iterates)
lives in the object its ``start`` returns, made in the worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    import torch

    from cbs_ray.train.config import TrialConfig
    from cbs_ray.train.run_plan import RunPlan
    from cbs_ray.train.setup import TrialParts, TrialProgress

__all__ = ["TrainingHooks", "Trial"]


@dataclass
class Trial:
    """One rank's trial as the loop runs it, what every hook is handed."""

    cfg: TrialConfig
    """The trial: its spec and plan (``cfg.plan``)."""
    session: Any
    """Where it runs (``train.sessions``): ``rank``, ``world_size``, ``device``, ``all_reduce``."""
    parts: TrialParts
    """What trains: the model, optimizer, LR schedule, fp16 scaler, the source that evaluates, the batch plan."""
    progress: TrialProgress
    """Where it stands: the step, samples seen, examples drawn, the first loss."""

    @property
    def restarted(self) -> bool:
        """Whether it continues from its own checkpoint (a dead worker's restart, a resumed experiment)."""
        return self.progress.resumed_from_samples > 0


@dataclass(frozen=True)
class TrainingHooks:
    """The calls a method's runs get from the training loop besides training their plan: every one does nothing
    here, and a method's hooks (a frozen dataclass of its settings: the module docstring) override what they need
    (``methods.branch.hooks``, ``methods.ladder.hooks``).

    The loop calls them on every rank of the trial (under FSDP every rank must take part in a collective), in this
    order:

    1. ``title(plan)`` as the trial is set up (rank 0 prints it; a plan's error messages ask it too): what the
       trial's first line says of the run.
    2. ``start(trial)`` once, when the model, optimizer, LR schedule and (a restart's) own checkpoint are in place and
       before the data: it may load another run's state into the trial and set where it continues
       (``trial.progress``: ``drawn``, ``first_loss``), and returns the hooks the rest of the run calls: ``self``,
       or an object that keeps this run's state (made here, in the worker; never pickled).
    3. ``after_step(trial)`` after every optimizer step taken (not after an fp16 overflow's skipped step).
    4. At each of the plan's report points: ``at_evaluation(trial, evaluate)`` after the model's evaluation, for
       metrics to add to it (``evaluate(module)`` evaluates another module as this report evaluates the model);
       then ``report_fields(plan, train_loss_ema)``, for fields of the report (``records.trial_report.TrialReport``)
       beside the loop's, also asked for the report of a diverged run (``train_loss_ema`` None); then the report,
       with the trial's checkpoint; then ``at_checkpoint(trial)``.
    5. ``at_end(trial)`` once, when the run stops training: at its stop, or diverged. Not after an error.

    For example, hooks that report the weights' norm beside every evaluation, set in the plans a method builds
    (``RunPlan(..., hooks=WeightNorm())``)::

        @dataclass(frozen=True)
        class WeightNorm(TrainingHooks):
            def at_evaluation(self, trial, evaluate):
                norms = [p.detach().norm() for p in trial.parts.params]
                return {"weight_norm": float(torch.stack(norms).norm())}
    """

    def title(self, plan: RunPlan) -> str:
        """What the trial's first line says of the run ("" : nothing; the line shows its batch plan)."""
        return ""

    def start(self, trial: Trial) -> TrainingHooks:
        """The hooks the rest of this run calls (step 2 of the class docstring)."""
        return self

    def after_step(self, trial: Trial) -> None:
        """After every optimizer step taken."""

    def at_evaluation(self, trial: Trial, evaluate: Callable[[torch.nn.Module], dict]) -> dict:
        """Metrics to add to the report's evaluation (none)."""
        return {}

    @property
    def evaluation_forwards(self) -> int:
        """Passes over the evaluation set a report takes: the model's, and one per further module ``at_evaluation``
        evaluates (what a dry run's time estimate counts)."""
        return 1

    def report_fields(self, plan: RunPlan, train_loss_ema: Optional[float]) -> dict:
        """Fields of every report of the run beside the loop's (none). ``train_loss_ema``: the workers' mean EMA of
        the training loss (``train.loop.EMA_ALPHA`` per step) at a milestone's report, for a method whose reading
        compares it; None in a diverged run's report."""
        return {}

    def at_checkpoint(self, trial: Trial) -> None:
        """After a report and its checkpoint, at ``trial.progress.samples``."""

    def at_end(self, trial: Trial) -> None:
        """When the run stops training (its stop reached, or diverged)."""
