"""The spec path's source (``BuiltinSource``): the spec's HF model and the driver's tokenized arrays;
the summed loss of a micro-batch, its items (examples; for a causal LM the target tokens), and the evaluation
summed over each worker's exact shard of the eval set and all-reduced.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from cbs_ray.data.markov import excess_loss_sum
from cbs_ray.sources.amp import autocast_dtype
from cbs_ray.sources.model import build_model
from cbs_ray.sources.protocol import Position, TrialSettings, counted, lockstep_forwards

__all__ = ["evaluate", "WORST_METRIC", "BuiltinSource"]

WORST_METRIC = {"accuracy": 0.0, "eval_loss": float("inf"), "perplexity": float("inf"), "bleu": 0.0,
                "excess_loss": float("inf")}
METRICS_OF_EVERY_TASK = ("eval_loss", "perplexity")


def summed_loss(model, batch: dict, cfg: TrialSettings) -> torch.Tensor:
    """The micro-batch's loss summed over its items (see ``items_in``): the model's own mean loss times the
    examples for classification; the (label-smoothed) cross-entropy on the logits otherwise."""
    task, label_smoothing = cfg.task, cfg.spec.training.label_smoothing
    if task != "causal-lm" and not label_smoothing:
        return model(**batch).loss * len(batch["labels"])
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    labels = batch["labels"]
    if task == "causal-lm":
        logits, labels = logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten()
    return torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum",
                                             label_smoothing=label_smoothing)


def items_in(batch, task: str) -> int:
    """What the loss averages over in a host micro-batch (ids, mask, labels): its examples, or for a causal
    LM its target tokens (each token after the first that is not padding)."""
    ids, mask, _ = batch
    return int(mask[:, 1:].sum()) if task == "causal-lm" else len(ids)


def _inputs(batch, task: str, device) -> dict:
    # Asynchronous from pinned memory (training.pin_memory): the copy overlaps the device's work in flight.
    ids, mask, labels = (t.to(device, non_blocking=True) for t in batch)
    if task == "causal-lm":
        labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class BuiltinSource:
    """The spec path's model and data: the HF model built from ``cfg.model_config``, the driver's tokenized
    arrays (``data.arrays.PreparedData``) as (ids, mask, labels) micro-batches, and this module's loss, item count
    and evaluation. ``sources.user_objects.UserObjects`` answers the same questions for the user's own model and
    data; ``_setup`` picks one and the stages ask it."""

    def __init__(self, data, task: str):
        self.data, self.task = data, task
        self.items_vary = task == "causal-lm"  # a causal LM's target tokens; else examples, known per step
        self.has_dev = data.dev_ids is not None

    def build_model(self, cfg: TrialSettings) -> torch.nn.Module:
        return build_model(cfg.model, cfg.task, cfg.model_config)

    def training_data(self):
        """(the training set, its collator: None for torch's default)."""
        d = self.data
        return torch.utils.data.TensorDataset(
            torch.tensor(d.train_ids), torch.tensor(d.train_mask), torch.tensor(d.train_labels)), None

    def items_in(self, batch) -> int:
        return items_in(batch, self.task)

    def inputs(self, batch, device) -> dict:
        return _inputs(batch, self.task, device)

    def summed_loss(self, forward, inputs: dict, cfg: TrialSettings, items: int) -> torch.Tensor:
        return summed_loss(forward, inputs, cfg)

    def evaluate(self, model, session, cfg: TrialSettings, **kwargs) -> dict:
        return evaluate(model, session, self.data, cfg, **kwargs)


@torch.no_grad()
def evaluate(model, session, data, cfg: TrialSettings, *, on_dev: bool = False,
             batch_size: Optional[int] = None, position: Optional[Position] = None,
             limit: Optional[int] = None) -> dict:
    """Metric over the whole eval set (``on_dev``: the dev set), or its first ``limit`` examples, with the ``markov``
    language's exact ``excess_loss`` (``data.markov.excess_loss_sum``) beside ``eval_loss``: each rank sums over its
    exact shard (rank::world_size, no padding duplicates) in batches of ``batch_size`` (default
    ``training.eval_batch_size``), sums are all-reduced, then divided. ``position.batch`` follows the batches."""
    model.eval()
    shard = slice(session.rank, limit, session.world_size)
    arrays = (data.dev_ids, data.dev_mask, data.dev_labels) if on_dev else (data.eval_ids, data.eval_mask,
                                                                             data.eval_labels)
    ids, mask, labels = (torch.tensor(a[shard]) for a in arrays)
    sums = torch.zeros(4, dtype=torch.float64)  # loss sum, correct, count, excess loss sum (markov)
    true_next = None if on_dev else data.true_next_log_probs
    task = cfg.task
    size = batch_size or cfg.spec.training.eval_batch_size
    amp_dtype = autocast_dtype(cfg.spec.training.precision, session.device)  # the model is evaluated as it trains
    for start in counted(range(0, len(ids), size), position):
        batch = _inputs((ids[start:start + size], mask[start:start + size], labels[start:start + size]),
                        task, session.device)
        with torch.autocast(session.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logits = logits.float()
        if task == "causal-lm":
            shifted, target = logits[:, :-1].flatten(0, 1), batch["labels"][:, 1:].flatten()
            loss = torch.nn.functional.cross_entropy(shifted, target, ignore_index=-100, reduction="sum")
            excess = 0.0 if true_next is None else excess_loss_sum(
                torch.log_softmax(shifted, dim=-1).cpu().numpy(), batch["input_ids"][:, :-1].flatten().cpu().numpy(),
                true_next)  # the markov language's sequences are full length: no padding among the targets
            sums += torch.tensor([loss.item(), 0.0, float((target != -100).sum()), excess], dtype=torch.float64)
        else:
            loss = torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum")
            correct = (logits.argmax(-1) == batch["labels"]).sum()
            sums += torch.tensor([loss.item(), float(correct), float(len(logits)), 0.0], dtype=torch.float64)
    everything = len(arrays[0]) if limit is None else min(limit, len(arrays[0]))
    for _ in range(lockstep_forwards(everything, session.world_size, size, len(ids))):  # FSDP's collectives
        spare = _inputs(tuple(torch.tensor(a[:1]) for a in arrays), task, session.device)
        with torch.autocast(session.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            model(input_ids=spare["input_ids"], attention_mask=spare["attention_mask"])
    sums = session.all_reduce(sums.to(session.device)).cpu()
    eval_loss = float(sums[0] / sums[2])
    model.train()
    metrics = {"eval_loss": eval_loss, "perplexity": math.exp(min(eval_loss, 700.0))}
    if true_next is not None and task == "causal-lm":
        metrics["excess_loss"] = float(sums[3] / sums[2])
    if task == "sequence-classification":
        metrics["accuracy"] = float(sums[1] / sums[2])
        metrics["eval_examples"] = int(sums[2])  # what the accuracy's standard error is computed from
    return metrics
