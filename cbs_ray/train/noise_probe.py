"""The gradient noise scale's probe (McCandlish et al. 2018): the squared gradient norm of one
worker's micro-batch and of the whole step, read from a DDP comm hook, FSDP's reduce-scatter or across
accumulation.
"""

from __future__ import annotations

import torch

from cbs_ray.maths.budget import BatchPlan
from cbs_ray.maths.noise_scale import NoiseScaleMeter
from cbs_ray.train.fsdp import attach_reduce_scatter_probe, is_fsdp


def sqnorm(params) -> torch.Tensor:
    # One fused kernel over all gradients (the same one clip_grad_norm_ uses), not one per parameter.
    norms = torch._foreach_norm([p.grad.detach() for p in params if p.grad is not None])
    return torch.linalg.vector_norm(torch.stack(norms)) ** 2


def attach_noise_probe(model, params, batching: BatchPlan):
    """Set up the two gradients B_simple needs (see noise_scale.py). Returns (meter, local_sqnorm) where
    ``local_sqnorm()`` gives the small-batch squared norm of the step just taken (a tensor on the device:
    reading it is left to the loop's one sync per step), or (None, None).

    Several workers: a DDP communication hook sums each bucket's squares before the default all-reduce,
    i.e. the worker's own gradient over micro × accumulation samples, at no extra pass. One worker with
    accumulation: the first micro-batch's gradient, read before the next micro-batch adds to it. Under FSDP
    (``train.fsdp``) the reduce-scatter's input is the worker's own gradient, read the same way."""
    if batching.workers > 1 and is_fsdp(model):
        return NoiseScaleMeter(batching.micro_batch * batching.accumulation, batching.batch_size), \
            attach_reduce_scatter_probe(model)
    if batching.workers > 1 and hasattr(model, "register_comm_hook"):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        state = {"sq": torch.zeros((), dtype=torch.float64, device=next(model.parameters()).device)}
        group = model.process_group  # the group DDP all-reduces over without a hook (its default: every worker)

        def hook(state, bucket):
            # One fused norm over the flat bucket, no copy; stays on the device, so no sync here.
            state["sq"] += torch.linalg.vector_norm(bucket.buffer().detach()).double() ** 2
            return allreduce_hook(group, bucket)

        model.register_comm_hook(state, hook)

        def local_sqnorm() -> torch.Tensor:
            value, state["sq"] = state["sq"], torch.zeros_like(state["sq"])
            return value

        return NoiseScaleMeter(batching.micro_batch * batching.accumulation, batching.batch_size), local_sqnorm
    if batching.accumulation > 1:
        return NoiseScaleMeter(batching.micro_batch, batching.batch_size), None
    return None, None
