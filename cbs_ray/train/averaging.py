"""The average of a run's iterates the ladder reads (``ladder.reading: ewa``): ``torch.optim.swa_utils.AveragedModel``
with polynomial-decay weights (``maths.averaging``), updated after every optimizer step and evaluated beside the raw
model at every evaluation. Not checkpointed: a run restarted from its checkpoint starts its average again there.
"""

from __future__ import annotations

import torch
from torch.optim.swa_utils import AveragedModel

from cbs_ray.maths.averaging import POLYNOMIAL_DECAY_ETA, polynomial_decay_weight

__all__ = ["AVERAGED_PREFIX", "iterate_average"]

AVERAGED_PREFIX = "ewa_"
"""The averaged model's metrics are reported as ``ewa_eval_loss``, ``ewa_excess_loss``, …"""


def iterate_average(model: torch.nn.Module, eta: float = POLYNOMIAL_DECAY_ETA) -> AveragedModel:
    """A copy of ``model`` (the module itself, not a DDP wrapper) whose ``update_parameters(model)`` folds in the
    current weights with w_t = (η + 1) / (t + η) (the first update copies them), all tensors at once."""

    @torch.no_grad()
    def polynomial_decay(averaged: list[torch.Tensor] | tuple[torch.Tensor, ...],
                         current: list[torch.Tensor] | tuple[torch.Tensor, ...],
                         averaged_so_far: torch.Tensor | int) -> None:
        weight = polynomial_decay_weight(int(averaged_so_far) + 1, eta)
        torch._foreach_lerp_(averaged, current, weight)

    return AveragedModel(model, multi_avg_fn=polynomial_decay)
