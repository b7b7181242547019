"""FSDP2 for a trial (``training.parallelism: fsdp``): PyTorch's ``fully_shard`` on each transformer block, then on
the root, as Ray Train's FSDP2 template and torchtitan do (PyTorch, "Getting Started with Fully Sharded Data
Parallel (FSDP2)"; ``torch.distributed.fsdp.fully_shard``). Every parameter becomes a ``DTensor`` sharded on dim 0
over the workers; a block's full parameters exist only while it runs forward or backward, and its gradients are
reduce-scattered (averaged, as DDP's all-reduce averages) as soon as its backward ends.

Which modules are blocks is ``sources.blocks.transformer_blocks``'s rule (checked on the driver before Ray starts).

What the loop needs besides: ``set_requires_gradient_sync(False)`` on the micro-batches before a step's last (the
gradients accumulate unsharded, as DDP's ``no_sync``), and the noise probe's reading of each rank's own gradient
(``attach_reduce_scatter_probe``): the reduce-scatter's input *is* that gradient, the same quantity DDP's
communication hook reads of its buckets.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from cbs_ray.sources.blocks import transformer_blocks

__all__ = ["shard_model", "is_fsdp", "uses_fsdp", "attach_reduce_scatter_probe", "full_tensor", "local_tensors",
           "restore_local_tensors", "local_part", "reshard"]


def shard_model(model: torch.nn.Module, *, block_class: Optional[str], param_dtype: Optional[torch.dtype] = None):
    """``fully_shard`` each block, then the root (which then holds the embeddings, the head and the rest, tied
    weights included). ``param_dtype`` (a GPU's bf16 or fp16): the blocks compute in it with gradients reduced in
    fp32 (``MixedPrecisionPolicy``), the sharded master weights staying fp32; None: fp32 throughout (CPU).
    Needs the process group (gloo or NCCL) that Ray Train started; the model already on its device."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {}
    if param_dtype is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for block in transformer_blocks(model, block_class):
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def is_fsdp(model) -> bool:
    """Whether ``model`` is sharded by ``fully_shard`` (never, with a torch before FSDP2's public API)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return isinstance(model, FSDPModule)


def uses_fsdp(training, world_size: int) -> bool:
    """Whether a trial's worker shards its model: ``training.parallelism: fsdp`` with more than one worker."""
    return training.parallelism == "fsdp" and world_size > 1


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """A ``DTensor``'s whole value (the gradient norm ``clip_grad_norm_`` returns over DTensor gradients is one,
    replicated); a plain tensor as it is."""
    gather = getattr(value, "full_tensor", None)
    return gather() if gather is not None else value


def attach_reduce_scatter_probe(model: torch.nn.Module):
    """Every FSDP module's reduce-scatter through a wrapper that adds its input's squared norm to a device
    scalar: the input is this rank's unsharded gradient of the step (every micro-batch's, accumulated without
    sync), laid end to end with zero padding, before any division (fp32 reduction: no pre-division), exactly what
    DDP's hook reads of its buckets. Returns ``local_sqnorm()``: the step's sum, then reset."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

    state = {"sq": torch.zeros((), dtype=torch.float64, device=_device_of(model))}

    class ProbedReduceScatter(DefaultReduceScatter):
        """FSDP2's default reduce-scatter, reading its input's squared norm first."""

        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            state["sq"] += torch.linalg.vector_norm(input_tensor.detach()).double() ** 2
            return super().__call__(output_tensor, input_tensor, group, op, async_op)

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_reduce_scatter(ProbedReduceScatter())

    def local_sqnorm() -> torch.Tensor:
        value, state["sq"] = state["sq"], torch.zeros_like(state["sq"])
        return value

    return local_sqnorm


def _device_of(model: torch.nn.Module) -> torch.device:
    parameter = next(model.parameters())
    local = getattr(parameter, "to_local", None)
    return (local() if local is not None else parameter).device


def local_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy, on the host, of this rank's part of every parameter and buffer (a DTensor's local shard, a plain
    tensor whole): what ``restore_local_tensors`` puts back after the micro-batch probe's steps, no collective."""
    held: dict[str, torch.Tensor] = dict(reshard(model).named_parameters())
    held.update(model.named_buffers())
    return {name: local_part(value).detach().to("cpu", copy=True) for name, value in held.items()}


@torch.no_grad()
def restore_local_tensors(model: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    """Copy ``local_tensors``' values back into the same model's parameters and buffers, shard by shard."""
    held: dict[str, torch.Tensor] = dict(reshard(model).named_parameters())
    held.update(model.named_buffers())
    for name, value in held.items():
        local_part(value).copy_(saved[name])


def local_part(value: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (a view: writing it writes the parameter), a plain tensor itself."""
    to_local = getattr(value, "to_local", None)
    return to_local() if to_local is not None else value


def reshard(model: torch.nn.Module) -> torch.nn.Module:
    """Every FSDP module of ``model`` back to its sharded parameters (the root keeps its gathered ones after a
    forward without backward, an evaluation's: then ``parameters()`` are the full tensors, not the shards);
    returns ``model``. A model without FSDP modules as it is."""
    if is_fsdp(model):
        from torch.distributed.fsdp import FSDPModule

        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()
    return model
