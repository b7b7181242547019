"""What the method's runs add to the training loop (``train.hooks.TrainingHooks``): the weights' norm beside every
evaluation (``weight_norm``, and the order it was taken in, ``weight_norm_order``). A frozen dataclass of its
settings, built with the plans on the driver and pickled to the trial's workers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from cbs_ray.train.hooks import TrainingHooks, Trial

__all__ = ["ReportsWeightNorm"]


@dataclass(frozen=True)
class ReportsWeightNorm(TrainingHooks):
    """Reports the ``norm_order``-norm of the trial's trainable weights at each evaluation."""

    norm_order: int = 2

    def title(self, plan) -> str:
        return f"weight norm (order {self.norm_order}) at each report"

    def at_evaluation(self, trial: Trial, evaluate: Callable[[Any], dict]) -> dict:
        import torch  # in the worker

        with torch.no_grad():
            norms = torch.stack([p.detach().float().norm(p=self.norm_order) for p in trial.parts.params])
        return {"weight_norm": float(norms.norm(p=self.norm_order)), "weight_norm_order": float(self.norm_order)}
