"""The optimizer a trial trains with, built from the spec's ``training`` section: AdamW, LAMB or SGD, weight
decay on weight matrices only, and layer-wise LR decay as one parameter group per LR scale."""

from __future__ import annotations

import re
from typing import Any

import torch

__all__ = ["make_optimizer", "layer_lr_scale"]

_LAYER = re.compile(r"(?:^|\.)(?:layer|layers|h|block|blocks)\.(\d+)\.")


def layer_lr_scale(name: str, num_layers: int, decay: float) -> float:
    """LR multiplier of a parameter under layer-wise decay: encoder layer i of L gets decay^(L − i),
    embeddings decay^(L + 1), everything else (pooler, head, final norm) 1."""
    if decay == 1.0:
        return 1.0
    match = _LAYER.search(name)
    if match:
        return decay ** (num_layers - int(match.group(1)))
    if "embed" in name or re.search(r"(?:^|\.)(wte|wpe)\.", name):
        return decay ** (num_layers + 1)
    return 1.0


def make_optimizer(model: torch.nn.Module, training, lr: float, *, model_config=None) -> torch.optim.Optimizer:
    """AdamW, LAMB or SGD (``training.optimizer``); weight decay on weight matrices only (not biases or
    LayerNorm), as in BERT; one parameter group per (decay, LR scale) so layer-wise LR decay rides on the
    same scheduler. ``training``: the spec's ``TrainingSpec`` (its optimizer, adam_beta1/adam_beta2,
    weight_decay, layer_lr_decay);
    ``model_config``: the HF config whose layer count layer-wise decay counts down from."""
    num_layers = getattr(model_config, "num_hidden_layers", None) or getattr(model_config, "n_layer", 0) or 0
    groups: dict[tuple[bool, float], list] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            key = (p.ndim >= 2, layer_lr_scale(name, num_layers, training.layer_lr_decay))
            groups.setdefault(key, []).append(p)
    param_groups: list[dict[str, Any]] = [
        {"params": params, "weight_decay": training.weight_decay if decayed else 0.0, "lr": lr * scale}
        for (decayed, scale), params in sorted(groups.items(), key=lambda kv: (not kv[0][0], -kv[0][1]))]
    betas = (training.adam_beta1, training.adam_beta2)
    if training.optimizer == "sgd":
        return torch.optim.SGD(param_groups, lr=lr, momentum=0.9)
    if training.optimizer == "lamb":
        import pytorch_optimizer

        # The paper's LAMB (v3): weight decay inside the trust ratio, no bias correction on the step size.
        return pytorch_optimizer.Lamb(param_groups, lr=lr, betas=betas, eps=1e-6, weight_decouple=False,
                                      adam_debias=True)
    # On a GPU the fused kernel: one launch for all parameters' update instead of a foreach loop over them.
    on_gpu = all(p.is_cuda for group in param_groups for p in group["params"])
    return torch.optim.AdamW(param_groups, lr=lr, betas=betas, eps=1e-8, fused=on_gpu or None)
