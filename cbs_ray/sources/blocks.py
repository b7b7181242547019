"""Which modules of a model FSDP shards one by one (``training.parallelism: fsdp``; ``train.fsdp`` shards them), in
this order:

1. ``training.fsdp_block_class``: every module of that class name;
2. the model's ``_no_split_modules`` (Hugging Face's list of the classes that must not be split across devices,
   e.g. ``GPT2Block``, ``BertLayer``): every module of those class names;
3. the children of every ``nn.ModuleList`` whose children are all of one class: a user
   model's ``self.layers = nn.ModuleList([Block() for _ in range(n)])``, an encoder-decoder's encoder layers and
   decoder layers both.

A block nested in another is left to its parent. None found is a ``FsdpPlanError``; ``check_fsdp_plan`` makes it
the one-line ``SpecError`` the driver stops on before Ray starts (``tune.prepare``, ``sources.object_checks``).
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["FsdpPlanError", "transformer_blocks", "check_fsdp_plan"]


class FsdpPlanError(ValueError):
    """No modules to shard one by one: the model has no blocks by the rule (the message says how to name them)."""


def _class_name(module: torch.nn.Module) -> str:
    return type(module).__name__


def _repeated_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The children of every ``nn.ModuleList`` whose children are all of one class (rule 3), in ``modules()``
    order; lists inside a found block are left to it by the caller."""
    return [child for module in model.modules()
            if isinstance(module, torch.nn.ModuleList) and len(module) and len({type(c) for c in module}) == 1
            for child in module]


def transformer_blocks(model: torch.nn.Module, block_class: Optional[str] = None) -> list[torch.nn.Module]:
    """The modules FSDP shards one by one (the module docstring's rule), outermost first. Raises ``FsdpPlanError``
    where the rule finds none."""
    names = [block_class] if block_class else list(getattr(model, "_no_split_modules", None) or [])
    if names:
        found = [m for m in model.modules() if m is not model and _class_name(m) in names]
    else:
        found = _repeated_layers(model)
    inside: set[int] = set()
    for block in found:
        inside.update(id(m) for m in block.modules() if m is not block)
    blocks = [block for block in found if id(block) not in inside]
    if not blocks:
        where = f"no module of class {block_class!r}" if block_class else (
            f"no module of its _no_split_modules {names}" if names
            else "no _no_split_modules and no nn.ModuleList of repeated layers")
        raise FsdpPlanError(f"training.parallelism: fsdp: {_class_name(model)} has {where} to shard block by "
                            f"block; name its block class in training.fsdp_block_class")
    return blocks


def check_fsdp_plan(model: torch.nn.Module, block_class: Optional[str]) -> int:
    """The number of blocks FSDP would shard (on the driver, before Ray starts: a model built on the meta device
    will do); a ``SpecError`` where there are none."""
    from cbs_ray.spec.errors import SpecError

    try:
        from torch.distributed import fsdp
    except ImportError:
        fsdp = None  # type: ignore[assignment]  # a torch built without distributed
    # set_custom_reduce_scatter: what the noise probe reads each rank's gradient by
    if not hasattr(getattr(fsdp, "FSDPModule", None), "set_custom_reduce_scatter"):
        raise SpecError(f"training.parallelism: fsdp needs FSDP2 with set_custom_reduce_scatter (torch "
                        f"{torch.__version__} has not); use a newer torch (2.13 is tested), or ddp")
    try:
        return len(transformer_blocks(model, block_class))
    except FsdpPlanError as e:
        raise SpecError(str(e)) from None
