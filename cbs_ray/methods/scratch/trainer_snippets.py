"""What to paste from a from-scratch search's recommendation: its keys for a training config
(``recommendation_snippet``), and HF ``TrainingArguments`` laid out as the trials trained (``training_arguments``).
"""

from __future__ import annotations

from cbs_ray.maths.budget import plan_batch
from cbs_ray.methods.scratch.summary import Summary

__all__ = ["recommendation_snippet", "training_arguments"]


SNIPPET_KEYS = ["batch_size", "alpha", "peak_lr", "warmup_fraction", "warmup_steps", "budget_samples",
                "optimizer_steps"]  # the recommendation's lines to paste into a training config


def recommendation_snippet(summary: Summary) -> str:
    rec = summary.recommendation
    if not rec:
        return ""
    return "\n".join(f"{k}: {getattr(rec, k)}" for k in SNIPPET_KEYS) + "\n"


# training.lr_decay -> HF's lr_scheduler_type: warmup, then that decay (constant: HF's constant after warmup).
HF_SCHEDULERS = {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}


def training_arguments(summary: Summary) -> str:
    """HF ``TrainingArguments`` for the recommendation, from it and the experiment's spec: the per-device batch
    is the spec's micro-batch and the rest is accumulation, B = per-device × accumulation × workers (as the
    trials made it, ``maths.budget.plan_batch``; a micro-batch probe may have lowered it further), the peak LR,
    warmup and the budget in optimizer steps, and the spec's schedule, weight decay, clipping and Adam betas.
    "" without a recommendation or a spec (a bare history)."""
    rec, spec = summary.recommendation, summary.spec
    if not rec or not spec:
        return ""
    t, workers = spec.get("training", {}), int(spec.get("resources", {}).get("workers_per_trial") or 1)
    plan = plan_batch(rec.batch_size, workers, t.get("micro_batch_size"))
    clip = t.get("grad_clip_norm")
    decay = t.get("lr_decay", "linear")
    optimizer = t.get("optimizer", "adamw")
    lines = [f"per_device_train_batch_size={plan.micro_batch},  # the micro-batch",
             (f"gradient_accumulation_steps={plan.accumulation},  # B={rec.batch_size} = {plan.micro_batch} × "
              f"{plan.accumulation} × {workers} device{'s' if workers > 1 else ''}"),
             f"learning_rate={rec.peak_lr:.4g},  # the peak: base_lr × (B / base_batch) ** {rec.alpha:.3g}",
             f"warmup_steps={rec.warmup_steps},  # {rec.warmup_fraction:.3g} of the steps",
             f"max_steps={rec.optimizer_steps},  # the budget, {rec.budget_samples} samples at B={rec.batch_size}",
             f'lr_scheduler_type="{HF_SCHEDULERS.get(decay, decay)}",',
             f"weight_decay={t.get('weight_decay', 0.0)},",
             f"max_grad_norm={clip if clip is not None else 0.0},{'  # no clipping' if clip is None else ''}",
             f"adam_beta1={t.get('adam_beta1', 0.9)},",
             f"adam_beta2={t.get('adam_beta2', 0.999)},"]
    if optimizer == "sgd":
        lines.append('optim="sgd",  # the search\'s SGD had momentum 0.9')
    note = "" if optimizer != "lamb" else "# the search trained with LAMB, which HF's Trainer does not offer\n"
    return ("from transformers import TrainingArguments\n\n" + note + "args = TrainingArguments(\n"
            + "".join(f"    {line}\n" for line in lines) + ")\n")
