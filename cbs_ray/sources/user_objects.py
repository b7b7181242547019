"""The user's own model, data and metric, under HF ``Trainer``'s names: ``run_search(spec, model_init=…,
train_dataset=…, eval_dataset=…, data_collator=…, compute_metrics=…)``.

The contract, as in HF Trainer:

* ``model_init()`` returns a fresh ``torch.nn.Module``. Each worker of each trial calls it once, after
  seeding torch with the trial's seed (so every worker starts from the same weights); the driver calls it
  once more to check it. A ``model_init(trial)`` (one required parameter, as HF's ``Trainer.call_model_init``
  tells them apart) is given the trial's hyperparameters as a dict (``trial_hyperparameters``: ``trial_id``,
  ``batch_size``, ``alpha``, ``warmup_fraction``, ``peak_lr``, ``seed``); the driver's check passes the
  smallest batch size's seeded configuration. The experiment is named after the model's class
  (``experiment_name``: ``GPT2LMHeadModel`` → ``gpt2-lm-head-model``) when the spec's ``name`` is the default.
* ``model(**batch)`` returns a mapping or ``ModelOutput`` holding ``loss``, the mean over the batch's
  items, and ``logits``.
* ``train_dataset`` / ``eval_dataset``: a ``datasets.Dataset`` (in torch format, or any whose rows the
  collator batches) or any map-style ``torch.utils.data.Dataset``. The equal-sample budget counts the
  training set's items; it is sharded by the loop's own DistributedSampler, as the built-in data are. Or
  neither: ``model_init`` alone on the spec's streamed corpus (``data.source: parquet``), whose batches hold
  ``input_ids``, ``attention_mask`` and ``labels`` (``sources.user_stream``).
* ``data_collator(list_of_items) -> dict`` (optional): default ``transformers.default_data_collator``,
  which stacks tensors and renames ``label`` to ``labels``. Item keys that ``model.forward`` does not name
  (a leftover ``text`` column) are dropped before the collator, as HF Trainer's ``remove_unused_columns`` does
  (its signature read by ``inspect``; nothing dropped from a ``forward(**batch)``, nor where the collator
  needs them), and the driver says once which.
* ``compute_metrics(EvalPrediction) -> dict`` (optional): called at every report on
  ``EvalPrediction(predictions=logits, label_ids=labels)`` of the whole eval set, gathered over the
  workers and in the eval set's order (logits of different lengths padded with -100, as HF's Trainer
  does). Its dict must hold the spec's ``search.metric``, unless that is ``eval_loss`` or ``perplexity``,
  which the loop computes itself and always reports (a ``compute_metrics`` value of the same name is
  overridden). ``preprocess_logits_for_metrics(logits, labels)`` (optional, HF's) is applied to each eval
  batch's logits on the device before they are kept and gathered (an LM's argmax instead of its full logits).

Accumulation stays exact: a micro-batch adds its loss × its items to the step, and the step divides by
the items of the whole effective batch (summed over micro-batches and workers), so the gradient is the
mean over the effective batch as one step of B computes it. A micro-batch's items (``items_in``) are, as HF
Trainer counts ``num_items_in_batch``: the collator's ``num_items_in_batch`` where it gives one (removed from
the batch before the model sees it); else, where the batch has integer ``labels``, the labels other than
-100, counted after the shift (``labels[..., 1:]``) when the model is a causal LM (``shifts_labels``: found
on the driver) — what a token-mean loss divides by, so HF's ``DataCollatorForLanguageModeling`` accumulates
exactly; else the batch's first dimension, which is exact for a loss that is a mean over examples. Without
labels or a count a loss that is a mean over tokens would accumulate as a mean of the micro-batches' token
means; where that can happen (accumulation or several workers) the driver says so once. The budget still
counts examples (``samples_seen``) either way.

How the loop uses the bundle: ``UserObjects`` answers the same questions as the built-in path's
``sources.builtin.BuiltinSource`` (build the model, the training set and its collator, the items of a batch,
a batch's inputs, its summed loss, the evaluation), and the loop asks whichever one it was given. It
travels as the ``data`` of ``tune.prepare.prepare``'s result: the driver puts it in Ray's object store once
per Tune experiment, and trials and their Ray Train workers carry only its ``train.trial.DataRef`` and fetch it
where the loop runs (numpy arrays zero-copy; torch tensors are copied into each process unless Ray's
``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1``), never in any trial's config.

The noise scale needs nothing of the model beyond its gradients: more than one worker (DDP's
communication hook) or gradient accumulation on one. Bad input is found on the driver, before any Ray
process starts (``check_objects``): one micro-batch of the smallest batch size runs through a fresh model
on the CPU, and one through ``compute_metrics``.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import numpy as np
import torch

from cbs_ray.maths.lr_schedule import scaled_lr, seed_warmup_fraction
from cbs_ray.sources.amp import autocast_dtype
from cbs_ray.sources.model import quiet_default_loss
from cbs_ray.sources.protocol import Position, counted, lockstep_forwards
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec

__all__ = ["UserObjects", "ARGUMENTS", "LOOP_METRICS", "user_objects", "items_in", "model_inputs", "evaluate",
           "experiment_name", "takes_trial", "trial_hyperparameters",
           "shifts_labels", "forward_columns", "checking_trial", "kept_logits", "metric_numbers", "one_line",
           "required_parameters", "to_host", "item_size"]

ARGUMENTS = ("model_init", "train_dataset", "eval_dataset", "data_collator", "compute_metrics",
             "preprocess_logits_for_metrics")
"""``run_search``'s and ``resume_search``'s keyword arguments for the objects, HF Trainer's names."""

_REQUIRED = ARGUMENTS[:3]

PROBE_ITEMS = 512
"""How many of the first training items the micro-batch probe looks through for the longest."""

LOOP_METRICS = ("eval_loss", "perplexity")
"""What the loop computes itself from the model's loss; any other ``search.metric`` needs compute_metrics."""


@dataclass(frozen=True)
class UserObjects:
    """The user's model, data and metric, and the loop's questions about them (the interface of
    ``sources.builtin.BuiltinSource``)."""

    model_init: Callable[..., torch.nn.Module]
    """Returns a fresh model; called once in each worker of each trial."""
    train_dataset: Any
    """Map-style: ``len`` and ``dataset[i]``; the budget counts its items."""
    eval_dataset: Any
    """Map-style; evaluated whole at every report, each worker its exact shard (rank::workers)."""
    data_collator: Optional[Callable[[list], Mapping]] = None
    """Items → a dict of tensors (default ``transformers.default_data_collator``)."""
    compute_metrics: Optional[Callable[[Any], Mapping]] = None
    """``EvalPrediction`` → a dict holding ``search.metric`` (not needed for eval_loss or perplexity)."""
    preprocess_logits_for_metrics: Optional[Callable[[Any, Any], Any]] = None
    """HF's ``(logits, labels)`` → what is kept of each eval batch for ``compute_metrics`` (on the device,
    before gathering); only with ``compute_metrics``."""

    # What the driver's check found (``check_objects``), for the workers; unset on the bundle as passed.
    model_class: Optional[str] = None
    """The class of the model ``model_init`` returns, e.g. ``GPT2LMHeadModel``."""
    label_shift: bool = False
    """The model is a causal LM (``shifts_labels``): a batch's target tokens are counted after the shift."""
    columns: Optional[tuple] = None
    """The item keys ``model.forward`` takes (``forward_columns``); the others are dropped before the collator.
    None: every key (a ``forward(**batch)``, items without unused keys, or a collator that needs them)."""

    items_vary: ClassVar[bool] = True
    """A batch's items may be a collator's ``num_items_in_batch``: the step sums them over the workers."""
    has_dev: ClassVar[bool] = False
    """No dev set beside the eval set (``data.holdout_examples`` is the spec path's)."""

    @property
    def collate(self) -> Callable[[list], Mapping]:
        """The collator, after the columns ``model.forward`` does not take are dropped from the items."""
        if self.data_collator is not None:
            collate = self.data_collator
        else:
            from transformers import default_data_collator

            collate = default_data_collator
        return collate if self.columns is None else DropColumns(collate, self.columns)

    @property
    def train_examples(self) -> int:
        return len(self.train_dataset)

    # ---- what the loop asks (train_loop.BuiltinSource has the same) -------------------------------
    def build_model(self, cfg) -> torch.nn.Module:
        model = self.model_init(trial_hyperparameters(cfg)) if takes_trial(self.model_init) else self.model_init()
        return quiet_default_loss(model)

    def training_data(self):
        """(the training set, its collator) for the loop's DataLoader."""
        return self.train_dataset, self.collate

    def items_in(self, batch: Mapping) -> int:
        return items_in(batch, label_shift=self.label_shift)

    def inputs(self, batch: Mapping, device) -> dict:
        return model_inputs(batch, device)

    def summed_loss(self, forward, inputs: dict, cfg, items: int) -> torch.Tensor:
        """The micro-batch's loss summed over its items: the model's mean × ``items`` (see the module)."""
        return forward(**inputs)["loss"] * items

    def evaluate(self, model, session, cfg, *, on_dev: bool = False, batch_size: Optional[int] = None,
                 position: Optional[Position] = None, limit: Optional[int] = None) -> dict:
        return evaluate(self, model, session, cfg, batch_size=batch_size, position=position, limit=limit)

    def probe_workload(self, model: torch.nn.Module, device) -> tuple[dict, int, Callable[[int], dict]]:
        """What the micro-batch probe (``training.probe_micro_batch``) trains on instead of random tokens:
        (the probe cache's model key, the items' length, ``batch_of(m)``). ``batch_of(m)`` collates ``m``
        copies of the longest of the first ``PROBE_ITEMS`` training items, on ``device``: the largest batch the
        collator makes from them, so a size that fits the probe fits the training steps drawn from the
        same data. The key names the model's class, its parameter count and that length."""
        sample = [self.train_dataset[i] for i in range(min(PROBE_ITEMS, len(self.train_dataset)))]
        longest = max(sample, key=item_size)
        size = item_size(longest)
        params = sum(p.numel() for p in model.parameters())
        key = {"name": f"model_init:{type(model).__module__}.{type(model).__name__}:{params}-params"}

        def batch_of(m: int) -> dict:
            return model_inputs(self.collate([longest] * m), device)

        return key, size, batch_of


def user_objects(*, streamed: bool = False, **given) -> Optional[UserObjects]:
    """The bundle of ``run_search``'s object arguments; None when none is given (the spec's own model and
    data). ``model_init``, ``train_dataset`` and ``eval_dataset`` go together; on a ``streamed`` corpus (the spec's
    ``data.source: parquet``: ``sources.user_stream``) ``model_init`` goes alone, the corpus being the data."""
    present = [name for name in ARGUMENTS if given.get(name) is not None]
    if not present:
        return None
    if streamed:
        if given.get("model_init") is None:
            raise SpecError(f"model_init: required with {', '.join(present)} (the spec's data.source: parquet is "
                            f"the data; model_init is the model trained on it)")
        clash = [name for name in ("train_dataset", "eval_dataset", "data_collator") if given.get(name) is not None]
        if clash:
            raise SpecError(f"{clash[0]}: not taken with data.source: parquet (the corpus is the data: its last shard "
                            f"the evaluation set, its rows batched as input_ids, attention_mask, labels); pass "
                            f"model_init alone, or drop data.source and data.path")
        return UserObjects(model_init=given["model_init"], train_dataset=None, eval_dataset=None,
                           compute_metrics=given.get("compute_metrics"),
                           preprocess_logits_for_metrics=given.get("preprocess_logits_for_metrics"))
    missing = [name for name in _REQUIRED if given.get(name) is None]
    if missing:
        raise SpecError(f"{missing[0]}: required with {', '.join(present)} (model_init, train_dataset and "
                        f"eval_dataset go together; or model_init alone on a streamed corpus: data.source: "
                        f"parquet, data.path)")
    objects: dict[str, Any] = {name: given.get(name) for name in ARGUMENTS}
    return UserObjects(**objects)


class DropColumns:
    """A collator that first drops the keys of mapping items that are not in ``keep`` (HF Trainer's
    ``RemoveColumnsCollator``); a class, so that the bundle pickles."""

    def __init__(self, collate: Callable[[list], Mapping], keep: tuple):
        self.collate, self.keep = collate, frozenset(keep)

    def __call__(self, items: list) -> Mapping:
        return self.collate([{k: v for k, v in item.items() if k in self.keep} if isinstance(item, Mapping) else item
                             for item in items])


def experiment_name(model_class: str) -> str:
    """The experiment's name after the model's class, in lower-case kebab: ``GPT2LMHeadModel`` →
    ``gpt2-lm-head-model``, ``MLP`` → ``mlp``."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", model_class)
    return re.sub(r"[^a-z0-9]+", "-", words.lower()).strip("-") or "model"


def takes_trial(model_init) -> bool:
    """Whether ``model_init`` takes the trial, as HF's ``Trainer.call_model_init`` tells: one parameter (a
    ``functools.partial``'s bound ones removed). Only a required one counts, so that a class with a default
    in its ``__init__`` (``MLP(hidden=64)``) is called with none."""
    return required_parameters(model_init) == 1


def required_parameters(func) -> int:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: called with none
        return 0
    return sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def trial_hyperparameters(cfg) -> dict:
    """What a ``model_init(trial)`` gets: the trial's hyperparameters, as HF's Ray Tune backend gives its
    trial's config."""
    return {"trial_id": cfg.trial_id, "batch_size": cfg.batch_size, "alpha": cfg.alpha,
            "warmup_fraction": cfg.warmup_fraction, "peak_lr": cfg.peak_lr, "seed": cfg.seed}


def checking_trial(spec: SearchSpec) -> dict:
    """The driver's check's trial: the smallest batch size's seeded configuration."""
    s, t = spec.search, spec.training
    batch, alpha = spec.batch_sizes[0], sum(s.alpha_range) / 2
    return {"trial_id": "", "batch_size": batch, "alpha": alpha,
            "warmup_fraction": seed_warmup_fraction(s.warmup_fraction_range, batch, t.base_batch),
            "peak_lr": scaled_lr(t.base_lr, batch, t.base_batch, alpha), "seed": s.seed}


def shifts_labels(model) -> bool:
    """Whether the model's loss predicts ``labels[..., 1:]`` (a causal LM), as HF Trainer decides how to count
    ``num_items_in_batch``: its loss is transformers' causal-LM loss, or its class is a causal LM
    (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``, which also holds classes whose name names no loss, such as
    ``GPT2LMHeadModel``), and it is not an encoder-decoder (whose labels are its decoder's targets, unshifted)."""
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False) or not hasattr(model, "config"):
        return False
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    causal = {name for names in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()
              for name in ((names,) if isinstance(names, str) else names)}
    if type(model).__name__ in causal:
        return True
    try:  # transformers >= 4.46: the loss each model class uses
        from transformers.loss.loss_utils import LOSS_MAPPING, ForCausalLMLoss
    except ImportError:
        return False
    return LOSS_MAPPING.get(getattr(model, "loss_type", None) or "") is ForCausalLMLoss


def forward_columns(model) -> Optional[tuple]:
    """The item keys the model takes, as HF Trainer's ``_set_signature_columns_if_needed``: the named
    parameters of ``model.forward`` (a Hugging Face model's ``**kwargs`` are its loss's options, not columns)
    and the label names (``label``, ``label_ids``, ``labels``); None where ``forward`` names none (``forward(self,
    **batch)``: every key may be an argument)."""
    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return None
    named = [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return tuple(dict.fromkeys([*named, "label", "label_ids", "labels"])) if named else None


# ---- in the workers --------------------------------------------------------------------------------

def items_in(batch: Mapping, *, label_shift: bool = False) -> int:
    """What the model's loss averages over in a collated batch, as HF Trainer counts ``num_items_in_batch``:
    the collator's ``num_items_in_batch``; else the integer ``labels`` other than -100 (``labels[..., 1:]``
    with ``label_shift``, a causal LM's targets); else the batch's first dimension. Float labels (a
    regression's, multi-label targets) count by the first dimension."""
    count = batch.get("num_items_in_batch")
    if count is not None:
        return int(count)
    labels = batch.get("labels")
    if torch.is_tensor(labels) and labels.ndim and not labels.is_floating_point() and not labels.is_complex():
        return int(((labels[..., 1:] if label_shift else labels) != -100).sum())
    first = labels if torch.is_tensor(labels) else next(v for v in batch.values() if torch.is_tensor(v))
    return len(first)


def model_inputs(batch: Mapping, device) -> dict:
    """The batch as the model's keyword arguments on ``device`` (``num_items_in_batch`` is the loop's)."""
    return {key: value.to(device, non_blocking=True) if torch.is_tensor(value) else value
            for key, value in batch.items() if key != "num_items_in_batch"}


@torch.no_grad()
def evaluate(objects: UserObjects, model, session, cfg, *, batch_size: Optional[int] = None,
             position: Optional[Position] = None, limit: Optional[int] = None) -> dict:
    """eval_loss (the mean over the eval set's items, or its first ``limit`` examples', summed per rank over its
    exact shard rank::workers, all-reduced), perplexity and eval_examples; with ``compute_metrics`` its metrics,
    computed once on the logits (``preprocess_logits_for_metrics``'s of each batch, where given) and labels gathered
    from every rank
    (rank 0 computes, the others receive the result). ``position.batch`` follows the eval batches."""
    from transformers.trainer_pt_utils import nested_concat

    model.eval()
    dataset = objects.eval_dataset
    evaluated = len(dataset) if limit is None else min(limit, len(dataset))
    shard = torch.utils.data.Subset(dataset, range(session.rank, evaluated, session.world_size))
    size = batch_size or cfg.spec.training.eval_batch_size
    loader = torch.utils.data.DataLoader(shard, batch_size=size, shuffle=False, collate_fn=objects.collate)
    amp_dtype = autocast_dtype(cfg.spec.training.precision, session.device)  # the model is evaluated as it trains
    sums = torch.zeros(3, dtype=torch.float64)  # loss × items, items, examples
    keep = objects.compute_metrics is not None
    logits = labels = None
    for batch in counted(loader, position):
        items = objects.items_in(batch)
        inputs = model_inputs(batch, session.device)
        with torch.autocast(session.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            out = model(**inputs)
        examples = len(next(v for v in inputs.values() if torch.is_tensor(v)))
        sums += torch.tensor([float(out["loss"].float()) * items, items, examples], dtype=torch.float64)
        if keep:
            batch_logits = to_host(kept_logits(objects, out["logits"], inputs.get("labels")))
            logits = batch_logits if logits is None else nested_concat(logits, batch_logits, padding_index=-100)
            if torch.is_tensor(batch.get("labels")):
                batch_labels = batch["labels"].cpu()
                labels = batch_labels if labels is None else nested_concat(labels, batch_labels, padding_index=-100)
    for _ in range(lockstep_forwards(evaluated, session.world_size, size, len(shard))):  # FSDP's collectives
        with torch.autocast(session.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            model(**model_inputs(objects.collate([dataset[0]]), session.device))
    sums = session.all_reduce(sums.to(session.device)).cpu()
    eval_loss = float(sums[0] / sums[1])
    metrics = {}
    if keep:
        metrics = _metrics_over_all_ranks(objects.compute_metrics, logits, labels, session, evaluated)
    model.train()
    return {**metrics, "eval_loss": eval_loss, "perplexity": math.exp(min(eval_loss, 700.0)),
            "eval_examples": int(sums[2])}


def kept_logits(objects: UserObjects, logits, labels):
    """What is kept of a batch's logits for ``compute_metrics``: ``preprocess_logits_for_metrics(logits,
    labels)`` where given (on the device, as HF Trainer applies it before gathering), else the logits."""
    preprocess = objects.preprocess_logits_for_metrics
    return logits if preprocess is None else preprocess(logits, labels)


def to_host(x):
    """Logits (a tensor, or a tuple/list of them) on the CPU, floating point as float32; integers (a
    ``preprocess_logits_for_metrics``' argmax) keep their type."""
    if isinstance(x, (tuple, list)):
        return type(x)(to_host(t) for t in x)
    x = x.detach()
    return (x.float() if x.is_floating_point() else x).cpu()


def _take(x, order):
    """``x[order]`` along the first dimension, through tuples and lists."""
    if isinstance(x, (tuple, list)):
        return type(x)(_take(t, order) for t in x)
    return x[order]


def _metrics_over_all_ranks(compute_metrics, logits, labels, session, examples: int) -> dict:
    """compute_metrics on the whole eval set's predictions, in the eval set's order: each rank holds items
    rank, rank + W, …; rank 0 gathers, restores the order, computes, and sends the result to the others."""
    from transformers import EvalPrediction
    from transformers.trainer_pt_utils import nested_concat, nested_numpify

    if session.world_size == 1:
        label_ids = None if labels is None else labels.numpy()
        # transformers annotates label_ids without None, which its Trainer itself passes where there are no labels
        return metric_numbers(compute_metrics(EvalPrediction(predictions=nested_numpify(logits),
                                                             label_ids=label_ids)))  # type: ignore[arg-type]
    import torch.distributed as dist

    shards: Optional[list[Any]] = [None] * session.world_size if session.rank == 0 else None
    dist.gather_object((logits, labels), shards, dst=0)
    result: list[Any] = [None]
    if shards is not None:  # rank 0
        held = [(rank, shard) for rank, shard in enumerate(shards) if shard[0] is not None]
        all_logits, all_labels = held[0][1]
        for _, (more_logits, more_labels) in held[1:]:
            all_logits = nested_concat(all_logits, more_logits, padding_index=-100)
            if all_labels is not None and more_labels is not None:
                all_labels = nested_concat(all_labels, more_labels, padding_index=-100)
        # Position in the concatenation -> index in the eval set; argsort puts the eval set's order back.
        where = torch.cat([torch.arange(rank, examples, session.world_size) for rank, _ in held])
        order = torch.argsort(where)
        label_ids = None if all_labels is None else all_labels[order].numpy()
        prediction = EvalPrediction(predictions=nested_numpify(_take(all_logits, order)),
                                    label_ids=label_ids)  # type: ignore[arg-type]  # None allowed, as above
        result = [metric_numbers(compute_metrics(prediction))]
    dist.broadcast_object_list(result, src=0)
    return result[0]


def metric_numbers(metrics) -> dict:
    """compute_metrics' dict with its numeric values as floats (what Tune and the report read)."""
    if not isinstance(metrics, Mapping):
        raise TypeError(f"compute_metrics must return a dict, returned a {type(metrics).__name__}")
    return {str(k): float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) or (hasattr(v, "dtype") and getattr(v, "ndim", 1) == 0)}


# ---- on the driver, before Ray starts ----------------------------------------------------------------

def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def item_size(item) -> int:
    """An item's size as the collator sees it: the elements of its tensors, arrays and lists."""
    values = item.values() if isinstance(item, Mapping) else item if isinstance(item, (tuple, list)) else [item]
    return sum(v.numel() if torch.is_tensor(v) else int(np.size(v)) for v in values)
