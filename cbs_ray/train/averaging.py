"""The average of a run's iterates the ladder reads (``ladder.reading: ewa``): ``torch.optim.swa_utils.AveragedModel``
with polynomial-decay weights (``maths.averaging``), updated after every optimizer step and evaluated beside the raw
model at every evaluation. Not checkpointed: a run restarted from its checkpoint starts its average again there.

Under FSDP (``training.parallelism: fsdp``) the module cannot be copied whole, and need not be: the average is
elementwise, so each rank averages its own shards (``ShardedAverage``), the same numbers DDP's copy holds, split as
the parameters are. To evaluate it, the averaged shards are swapped into the sharded model for the evaluation's
forwards (which gather them block by block, as a training forward does) and the trained ones put back after.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional, Union

import torch
from torch.optim.swa_utils import AveragedModel

from cbs_ray.maths.averaging import POLYNOMIAL_DECAY_ETA, polynomial_decay_weight
from cbs_ray.train.fsdp import is_fsdp, local_part, reshard

__all__ = ["AVERAGED_PREFIX", "iterate_average", "ShardedAverage", "averaged_module"]

AVERAGED_PREFIX = "ewa_"
"""The averaged model's metrics are reported as ``ewa_eval_loss``, ``ewa_excess_loss``, …"""


def iterate_average(model: torch.nn.Module, eta: float = POLYNOMIAL_DECAY_ETA) -> Union[AveragedModel, ShardedAverage]:
    """A copy of ``model`` (the module itself, not a DDP wrapper) whose ``update_parameters(model)`` folds in the
    current weights with w_t = (η + 1) / (t + η) (the first update copies them), all tensors at once; an FSDP
    model's own shards averaged in place of a copy (``ShardedAverage``)."""
    if is_fsdp(model):
        return ShardedAverage(model, eta)

    @torch.no_grad()
    def polynomial_decay(averaged: list[torch.Tensor] | tuple[torch.Tensor, ...],
                         current: list[torch.Tensor] | tuple[torch.Tensor, ...],
                         averaged_so_far: torch.Tensor | int) -> None:
        weight = polynomial_decay_weight(int(averaged_so_far) + 1, eta)
        torch._foreach_lerp_(averaged, current, weight)

    return AveragedModel(model, multi_avg_fn=polynomial_decay)


class ShardedAverage:
    """The average of an FSDP model's iterates, as this rank's local shards of its parameters: the first update
    copies them, the t-th folds them in with ``AveragedModel``'s rule above (w_t = (η + 1) / (t + η)). The
    buffers are the model's own (``AveragedModel``'s default, ``use_buffers=False``, keeps a copy's: the same for
    a model whose buffers training does not change)."""

    def __init__(self, model: torch.nn.Module, eta: float = POLYNOMIAL_DECAY_ETA):
        self.model, self.eta = model, eta
        self.n_averaged = 0
        self.shards: Optional[list[torch.Tensor]] = None

    @torch.no_grad()
    def update_parameters(self, model: torch.nn.Module) -> None:
        """Fold in the current weights: the sharded model's this average was made of (``model`` names it, as
        ``AveragedModel``'s argument does)."""
        current = [local_part(p).detach() for p in reshard(self.model).parameters()]
        if self.shards is None:
            self.shards = [c.clone() for c in current]
        else:
            torch._foreach_lerp_(self.shards, current, polynomial_decay_weight(self.n_averaged + 1, self.eta))
        self.n_averaged += 1

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[torch.nn.Module]:
        """The model holding the averaged shards (a collective forward on every rank, as training's), the
        trained shards back in place after, also when the evaluation raises."""
        if self.shards is None:
            raise RuntimeError("the average of the iterates is read before its first update")
        with torch.no_grad():
            locals_ = [local_part(p) for p in reshard(self.model).parameters()]
            trained = [t.clone() for t in locals_]
            torch._foreach_copy_(locals_, self.shards)
        try:
            yield self.model
        finally:
            reshard(self.model)  # the evaluation left the root's averaged weights gathered
            with torch.no_grad():
                torch._foreach_copy_(locals_, trained)


@contextlib.contextmanager
def averaged_module(average) -> Iterator[torch.nn.Module]:
    """The module holding the average of the iterates for an evaluation: ``AveragedModel``'s copy, or the FSDP
    model with its averaged shards swapped in for the time of the ``with``."""
    if isinstance(average, ShardedAverage):
        with average.swapped_in() as module:
            yield module
    else:
        yield average.module
