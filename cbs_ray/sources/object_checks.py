"""The driver's checks of a user's own objects (``run_search(model_init=..., train_dataset=..., ...)``), before
Ray starts: the spec leaves the model and data sections to them, the datasets have lengths and items that
collate, one micro-batch runs through a fresh model and gives a loss, ``compute_metrics`` returns finite
numbers, unused columns are dropped as HF's ``remove_unused_columns`` does; and what the experiment's metadata
records of them, which ``--resume`` checks. The objects themselves and how a trial uses them:
``sources.user_objects``."""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Optional

import torch

from cbs_ray.data.parquet import StreamedData, prepare_parquet_data
from cbs_ray.maths.budget import plan_batch
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.sources.blocks import check_fsdp_plan
from cbs_ray.sources.model import quiet_default_loss
from cbs_ray.sources.user_objects import (
    ARGUMENTS,
    LOOP_METRICS,
    UserObjects,
    checking_trial,
    forward_columns,
    kept_logits,
    metric_numbers,
    model_inputs,
    one_line,
    required_parameters,
    shifts_labels,
    to_host,
)
from cbs_ray.sources.user_stream import CORPUS_COLUMNS, CorpusRows, StreamedObjects
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import DataSpec, ModelSpec, SearchSpec

__all__ = ["check_objects", "check_resume", "objects_meta", "token_budget_tokens_per_sample", "TOKEN_ITEMS",
           "check_same_architecture", "check_streamed_objects", "check_model_for_corpus", "corpus_mismatch",
           "model_vocabulary"]

TOKEN_ITEMS = 512
"""How many training items (the first ones, and the last) a token budget measures ``input_ids`` on."""


def _set_fields(section, default) -> str:
    """The fields of a spec section that differ from its default, as ``model.name=bert-base-uncased``."""
    from dataclasses import fields

    name = "model" if isinstance(section, ModelSpec) else "data"
    return ", ".join(f"{name}.{f.name}={getattr(section, f.name)!r}" for f in fields(section)
                     if getattr(section, f.name) != getattr(default, f.name))


def _no_clash_with_the_spec(spec: SearchSpec) -> None:
    """The spec's model and data sections are the objects' to fill: a spec that sets either (anything but
    its default) names the same thing twice. A section written out with the default values cannot be
    told from one left out, and is not an error."""
    if spec.model != ModelSpec():
        raise SpecError(f"model_init: the spec names a model too ({_set_fields(spec.model, ModelSpec())}); "
                        f"drop the spec's model section or model_init")
    if spec.data != DataSpec():
        raise SpecError(f"train_dataset/eval_dataset: the spec names data too ({_set_fields(spec.data, DataSpec())}); "
                        f"drop the spec's data section or the datasets")


def _options_the_objects_cannot_take(spec: SearchSpec) -> None:
    t = spec.training
    if t.label_smoothing:
        raise SpecError("training.label_smoothing: the model from model_init computes its own loss; smooth the "
                        "labels there")


def _length(dataset, name: str) -> int:
    kind = type(dataset).__name__
    if kind == "DatasetDict":
        raise SpecError(f"{name}: got a DatasetDict ({', '.join(dataset)}); pass one split, e.g. dataset['train']")
    if isinstance(dataset, torch.utils.data.IterableDataset) or not (
            hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise SpecError(f"{name}: must be a map-style dataset (a datasets.Dataset, or a torch Dataset with "
                        f"__len__ and __getitem__), got {kind}")
    size = len(dataset)
    if size == 0:
        raise SpecError(f"{name}: is empty")
    try:  # a __len__ that claims more than the dataset holds fails every trial at its end, not here
        dataset[size - 1]
    except Exception as e:
        raise SpecError(f"{name}: its __len__ says {size} items, but item {size - 1} cannot be read "
                        f"({one_line(e)}); make __len__ count what __getitem__ holds") from None
    return size


def _fresh_model(spec: SearchSpec, objects: UserObjects) -> torch.nn.Module:
    model_init = objects.model_init
    if isinstance(model_init, torch.nn.Module) or not callable(model_init):
        raise SpecError(f"model_init: must be a function that returns a fresh torch.nn.Module, got a "
                        f"{type(model_init).__name__} (pass the function that builds the model)")
    required = required_parameters(model_init)
    if required > 1:
        raise SpecError(f"model_init: takes {required} arguments; it must take none or one, the trial (as HF "
                        f"Trainer's model_init)")
    try:
        model = model_init(checking_trial(spec)) if required == 1 else model_init()
    except Exception as e:
        raise SpecError(f"model_init: raised {one_line(e)}") from None
    if not isinstance(model, torch.nn.Module):
        raise SpecError(f"model_init: must return a torch.nn.Module, returned a {type(model).__name__}")
    return model


def _batch_of(objects: UserObjects, name: str, size: int) -> Mapping:
    """The first ``size`` items of the dataset ``name``, collated."""
    dataset = getattr(objects, name)
    try:
        items = [dataset[i] for i in range(size)]
    except Exception as e:
        raise SpecError(f"{name}: cannot read its items: {one_line(e)}") from None
    try:
        batch = objects.collate(items)
    except Exception as e:
        who = "data_collator" if objects.data_collator is not None else \
            f"{name} (the default collator, transformers.default_data_collator; pass a data_collator)"
        raise SpecError(f"{who}: cannot batch {size} items of {name} ({type(items[0]).__name__}): "
                        f"{one_line(e)}") from None
    if not isinstance(batch, Mapping) or not any(torch.is_tensor(v) for v in batch.values()):
        raise SpecError(f"data_collator: must return a dict of tensors, returned a {type(batch).__name__}")
    return batch


def _output_of(model, batch: Mapping, name: str, objects: Optional[UserObjects] = None):
    columns = ", ".join(k for k in batch if k != "num_items_in_batch")
    try:
        out = model(**model_inputs(batch, "cpu"))
    except Exception as e:
        dropped = _unused(objects, objects.columns).get(name) if objects is not None else None
        note = (f" (dropped before the collator: {', '.join(dropped)}, which {type(model).__name__}.forward does "
                f"not take)" if dropped else "")
        raise SpecError(f"{name}: the model rejects a batch with columns {columns}: {one_line(e)}{note}") from None
    if not isinstance(out, Mapping):
        raise SpecError(f"model_init: model(**batch) must return a dict or ModelOutput with loss and logits, "
                        f"returned a {type(out).__name__}")
    loss = out.get("loss")
    if loss is None:
        raise SpecError(f"model_init: the model's output has no loss on a batch of {name} with columns {columns} "
                        f"(a Hugging Face model computes it when the batch holds labels)")
    if not torch.is_tensor(loss) or loss.ndim != 0:
        raise SpecError(f"model_init: the model's loss must be a scalar tensor (the mean over the batch's items), "
                        f"got {tuple(loss.shape) if torch.is_tensor(loss) else type(loss).__name__}")
    return out


def _check_metrics(spec: SearchSpec, objects: UserObjects, out, batch: Mapping) -> None:
    from transformers import EvalPrediction
    from transformers.trainer_pt_utils import nested_numpify

    metric = spec.search.metric
    if objects.compute_metrics is None:
        if metric not in LOOP_METRICS:
            raise SpecError(f"compute_metrics: required for search.metric {metric} (without it the loop reports "
                            f"only {' and '.join(LOOP_METRICS)})")
        return
    if out.get("logits") is None:
        raise SpecError("model_init: the model's output has no logits, which compute_metrics needs")
    labels = batch.get("labels")
    try:
        kept = kept_logits(objects, out["logits"], labels if torch.is_tensor(labels) else None)
    except Exception as e:
        raise SpecError(f"preprocess_logits_for_metrics: raised {one_line(e)} (on one batch of "
                        f"eval_dataset)") from None
    # transformers annotates label_ids without None, which its Trainer itself passes where there are no labels
    label_ids = labels.cpu().numpy() if torch.is_tensor(labels) else None
    prediction = EvalPrediction(predictions=nested_numpify(to_host(kept)),
                                label_ids=label_ids)  # type: ignore[arg-type]
    try:
        metrics = objects.compute_metrics(prediction)
    except Exception as e:
        raise SpecError(f"compute_metrics: raised {one_line(e)} (on one batch of eval_dataset)") from None
    if not isinstance(metrics, Mapping):
        raise SpecError(f"compute_metrics: must return a dict, returned a {type(metrics).__name__}")
    if metric not in LOOP_METRICS:
        if metric not in metrics:
            raise SpecError(f"compute_metrics: returned no {metric!r} (search.metric); it returned "
                            f"{', '.join(map(repr, metrics)) or 'an empty dict'}")
        if metric not in metric_numbers(metrics):
            raise SpecError(f"compute_metrics: {metric!r} must be a number, got {metrics[metric]!r}")
        if not math.isfinite(float(metrics[metric])):  # NaN would lose to every number: no trial could win
            raise SpecError(f"compute_metrics: {metric!r} must be a finite number, got {metrics[metric]!r} "
                            f"(on one batch of eval_dataset)")


def _unused(objects: UserObjects, keep: Optional[tuple]) -> dict[str, list[str]]:
    """Per dataset, the keys of its first item that are not in ``keep`` (``forward_columns``)."""
    unused = {}
    for name in ("train_dataset", "eval_dataset"):
        try:
            item = getattr(objects, name)[0]
        except Exception:  # _batch_of names the dataset that cannot be read
            continue
        if keep is not None and isinstance(item, Mapping) and any(k not in keep for k in item):
            unused[name] = [str(k) for k in item if k not in keep]
    return unused


def _collates(objects: UserObjects, size: int) -> bool:
    try:
        objects.collate([objects.train_dataset[i] for i in range(size)])
        return True
    except Exception:
        return False


def _without_unused_columns(objects: UserObjects, keep: Optional[tuple], model, size: int) -> UserObjects:
    """The bundle with the item keys ``model.forward`` does not take (``keep``: ``forward_columns``) dropped
    before the collator, as HF Trainer's ``remove_unused_columns`` does (a leftover string column would
    otherwise reach a padding collator, whose error speaks of truncation and padding), saying once which.
    Kept where the collator needs them: it batches ``size`` items with them and fails without (a collator that
    tokenizes a text column itself)."""
    unused = _unused(objects, keep)
    dropping = replace(objects, columns=keep)
    if not unused or (not _collates(dropping, size) and _collates(objects, size)):
        return objects
    for name, columns in unused.items():
        print(f"{name}: dropping the column{'s' if len(columns) > 1 else ''} {', '.join(columns)}, which "
              f"{type(model).__name__}.forward does not take (as HF Trainer's remove_unused_columns)", flush=True)
    return dropping


def _say_if_inexact(spec: SearchSpec, objects: UserObjects, batch: Mapping) -> None:
    """One line where a step's loss cannot be weighted by what the loss averages over: no
    ``num_items_in_batch`` and no integer labels to count, and a step of several micro-batches or workers."""
    labels = batch.get("labels")
    if batch.get("num_items_in_batch") is not None or (torch.is_tensor(labels) and not labels.is_floating_point()):
        return
    workers, cap = spec.resources.workers_per_trial, spec.training.micro_batch_size
    split = [b for b in spec.batch_sizes if plan_batch(b, workers, cap).accumulation > 1 or workers > 1]
    if split:
        print(f"data_collator: its batches have neither num_items_in_batch nor integer labels, so a step of several "
              f"micro-batches (B={', '.join(map(str, split))}) weighs each by its examples: exact for a loss that "
              f"is a mean over examples, not for one that is a mean over tokens (return num_items_in_batch, the "
              f"tokens the loss averages over, to make it exact)", flush=True)


def _model_takes_the_training(spec: SearchSpec, model: torch.nn.Module) -> Any:
    """The training options the model must allow (gradient checkpointing, FSDP's blocks, layer-wise LR decay);
    returns its HF config (None for a plain module). Its default loss is quieted (``quiet_default_loss``)."""
    t = spec.training
    quiet_default_loss(model)
    if t.gradient_checkpointing and not (hasattr(model, "gradient_checkpointing_enable")
                                         or hasattr(model, "activation_checkpointing_enable")):
        raise SpecError(f"training.gradient_checkpointing: the {type(model).__name__} from model_init has no "
                        f"gradient_checkpointing_enable() (a Hugging Face model's switch)")
    if t.parallelism == "fsdp":
        check_fsdp_plan(model, t.fsdp_block_class)
    config = getattr(model, "config", None)
    if t.layer_lr_decay != 1.0 and not (getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)):
        raise SpecError(f"training.layer_lr_decay: needs a model whose config counts its layers (a Hugging Face "
                        f"model's num_hidden_layers); the {type(model).__name__} from model_init has none")
    return config


def check_objects(spec: SearchSpec, objects: UserObjects) -> tuple[UserObjects, Any]:
    """Everything about the objects that can fail on bad input, on the driver, before any Ray process
    starts; each error is one ``SpecError`` naming the argument. One micro-batch of the smallest batch size
    (as a worker of its trials would draw it) goes through a fresh model on the CPU, and one batch of the
    eval set through the model and ``compute_metrics``. Returns the bundle with what the check found for the
    workers (the model's class, whether its labels shift, the columns its forward takes) and the model's HF
    config (None for a plain module), which layer-wise LR decay counts the layers of."""

    _no_clash_with_the_spec(spec)
    _options_the_objects_cannot_take(spec)
    for name in ("train_dataset", "eval_dataset"):
        if type(getattr(objects, name)).__module__.startswith("ray.data"):  # (Ray is not imported to ask)
            raise SpecError(f"{name}: a ray.data.Dataset is taken as run_search's train_dataset without "
                            f"eval_dataset (written as Parquet shards and streamed, its last shard the evaluation "
                            f"set; docs/large-models.md), not beside map-style datasets")
    train_size = _length(objects.train_dataset, "train_dataset")
    eval_size = _length(objects.eval_dataset, "eval_dataset")
    largest = spec.batch_sizes[-1]
    if train_size < largest:
        raise SpecError(f"train_dataset: {train_size} items, fewer than the largest batch size {largest} "
                        f"(search.batch_sizes)")
    for name in ("data_collator", "compute_metrics", "preprocess_logits_for_metrics"):
        if getattr(objects, name) is not None and not callable(getattr(objects, name)):
            raise SpecError(f"{name}: must be a function, got a {type(getattr(objects, name)).__name__}")
    if objects.preprocess_logits_for_metrics is not None and objects.compute_metrics is None:
        raise SpecError("preprocess_logits_for_metrics: only used with compute_metrics, which is not given")
    model = _fresh_model(spec, objects)
    t = spec.training
    micro = plan_batch(spec.batch_sizes[0], spec.resources.workers_per_trial, t.micro_batch_size).micro_batch
    objects = _without_unused_columns(
        replace(objects, model_class=type(model).__name__, label_shift=shifts_labels(model)),
        forward_columns(model), model, micro)
    config = _model_takes_the_training(spec, model)
    model.train()
    train_batch = _batch_of(objects, "train_dataset", micro)
    out = _output_of(model, train_batch, "train_dataset", objects)
    if not out["loss"].requires_grad:
        raise SpecError("model_init: the model's loss does not depend on any trainable parameter")
    _say_if_inexact(spec, objects, train_batch)
    model.eval()
    eval_batch = _batch_of(objects, "eval_dataset", min(micro, eval_size))
    with torch.no_grad():
        out = _output_of(model, eval_batch, "eval_dataset", objects)
    _check_metrics(spec, objects, out, eval_batch)
    return objects, config


# ---- the experiment's record -------------------------------------------------------------------------

def _describe(x) -> Optional[str]:
    if x is None:
        return None
    func = getattr(x, "func", x)  # a functools.partial: the function it calls
    if callable(func) and hasattr(func, "__qualname__"):
        return f"{getattr(func, '__module__', '?')}.{func.__qualname__}"
    try:
        return f"{type(x).__name__} of {len(x)} items"
    except TypeError:
        return type(x).__name__


def objects_meta(data) -> dict:
    """What the experiment's ``cbs_spec.json`` records of the objects ({} on the spec path): that they were
    used (so that ``--resume`` can say it cannot rebuild them) and what they were, for the reader."""
    if not isinstance(data, UserObjects):
        return {}
    described = {name: _describe(getattr(data, name)) for name in ARGUMENTS
                 if name != "preprocess_logits_for_metrics" or data.preprocess_logits_for_metrics}
    if isinstance(data, StreamedObjects):  # the spec's data.path is the data: its rows, streamed
        described["train_dataset"] = f"data.path: {data.train_examples} rows streamed"
        described["eval_dataset"] = f"data.path: {len(data.eval_dataset)} evaluation rows"
        described["data_collator"] = None
    return {"user_objects": described}


def check_resume(meta: ExperimentMeta, objects: Optional[UserObjects], path: str) -> None:
    """An experiment run with objects resumes only with objects (in Python), one run from its spec only
    without them."""
    recorded = meta.user_objects
    if recorded and objects is None:
        raise SpecError(f"--resume: {path} was run with Python objects ({recorded.get('model_init')}, ...), which "
                        f"the command line cannot rebuild; resume it in Python: resume_search(path, "
                        f"model_init=..., train_dataset=..., eval_dataset=..., ...)")
    if objects is not None and not recorded:
        raise SpecError(f"model_init: {path} was run on its spec's own model and data; resume it without objects")


def token_budget_tokens_per_sample(spec: SearchSpec, objects: UserObjects) -> Optional[int]:
    """With a token budget (``training.budget_tokens``), the tokens of one training item: the length of its
    ``input_ids``, which must be the same for every item (texts packed into blocks, as HF's ``run_clm`` groups
    them), so that a sample is a fixed number of tokens. Measured on the first ``TOKEN_ITEMS`` items and the
    last; a ``SpecError`` (one line) where the items carry no ``input_ids`` or their lengths differ. None
    without a token budget."""
    if spec.training.budget_tokens is None:
        return None
    dataset, size = objects.train_dataset, objects.train_examples
    lengths: dict[int, int] = {}
    for i in dict.fromkeys([*range(min(TOKEN_ITEMS, size)), size - 1]):
        item = dataset[i]
        ids = item.get("input_ids") if isinstance(item, Mapping) else None
        if ids is None:
            raise SpecError("training.budget_tokens: your train_dataset's items carry no input_ids to count tokens "
                            "in; set training.budget_samples")
        lengths.setdefault(int(ids.numel()) if torch.is_tensor(ids) else len(ids), i)
    if len(lengths) > 1:
        (a, i), (b, j) = list(lengths.items())[:2]
        raise SpecError(f"training.budget_tokens: your train_dataset's items have input_ids of different lengths "
                        f"({a} tokens at item {i}, {b} at item {j}); a token budget needs every item the same "
                        f"length (pack the texts into blocks); set training.budget_samples")
    return next(iter(lengths))


def check_same_architecture(spec: SearchSpec, objects: UserObjects, batches: tuple[int, ...]) -> None:
    """Branch mode on the user's objects: a branch loads the trunk's state dict (weights and optimizer state)
    into a model of its own, so ``model_init`` must rebuild one architecture. Two fresh models (for the trial of
    the first and of the last of ``batches``: a ``model_init(trial)`` sees their hyperparameters) must hold the
    same parameter and buffer names with the same shapes, and one micro-batch must run through each; a
    ``SpecError`` in one line if not."""
    def fresh(batch: int) -> torch.nn.Module:
        trial = {**checking_trial(spec), "batch_size": batch}
        model = objects.model_init(trial) if required_parameters(objects.model_init) == 1 else objects.model_init()
        return quiet_default_loss(model)

    try:
        first, second = fresh(batches[0]), fresh(batches[-1])
    except Exception as e:
        raise SpecError(f"model_init: raised {one_line(e)}") from None
    shapes = [{k: tuple(v.shape) for k, v in m.state_dict().items()} for m in (first, second)]
    if shapes[0] != shapes[1]:
        differs = next((k for k in {**shapes[0], **shapes[1]} if shapes[0].get(k) != shapes[1].get(k)))
        raise SpecError(f"model_init: builds two different architectures (branch mode loads the trunk's weights into "
                        f"each branch's model): {differs} is {shapes[0].get(differs, 'missing')} in one model and "
                        f"{shapes[1].get(differs, 'missing')} in the other")
    micro = plan_batch(batches[0], spec.resources.workers_per_trial, spec.training.micro_batch_size).micro_batch
    batch = objects.first_batch(micro, batches[-1]) if isinstance(objects, StreamedObjects) else \
        _batch_of(objects, "train_dataset", micro)
    for model in (first, second):
        model.train()
        _output_of(model, batch, "train_dataset", objects)


# ---- the user's model on a streamed corpus (sources.user_stream) ----------------------------------------

def corpus_mismatch(model: torch.nn.Module) -> Optional[str]:
    """Why ``model(**batch)`` cannot take a batch of the corpus (``user_stream.CORPUS_COLUMNS``), in one line; None
    where it can: ``forward`` names ``input_ids`` and ``labels`` (or takes ``**kwargs``) and requires nothing else
    (a parameter without a default that is not a column, or one that is positional-only)."""
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):  # a forward without a signature: the batch run through it says
        return None
    parameters = list(signature.parameters.values())
    by_name = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters)
    forward = f"{type(model).__name__}.forward{signature}"
    gives = ("the Parquet shards give input_ids, attention_mask and labels (the input_ids again, for the loss); "
             "name forward's parameters after them, e.g. forward(input_ids, labels=None)")
    required = [p.name for p in parameters if p.default is p.empty
                and (p.kind is p.POSITIONAL_ONLY or (p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                                                     and p.name not in CORPUS_COLUMNS))]
    if required:
        return f"{forward} requires {required[0]!r}, which the corpus does not give: {gives}"
    for column, what in (("input_ids", "the tokens"), ("labels", "the targets its loss is the mean over")):
        if column not in by_name and not takes_any:
            return f"{forward} does not take {column} ({what}): {gives}"
    return None


def check_model_for_corpus(spec: SearchSpec, model_init) -> torch.nn.Module:
    """A fresh model from ``model_init`` whose forward takes the corpus's batches (``corpus_mismatch``): a
    ``SpecError`` in one line where it does not, before any data are read or written (a ``ray.data.Dataset``'s
    shards, ``sources.ray_dataset``). Returns the model."""
    model = _fresh_model(spec, UserObjects(model_init=model_init, train_dataset=None, eval_dataset=None))
    mismatch = corpus_mismatch(model)
    if mismatch:
        raise SpecError(f"model_init: {mismatch}")
    return model


def model_vocabulary(model: torch.nn.Module) -> Optional[int]:
    """The token ids the model embeds (0…V−1): a Hugging Face model's ``config.vocab_size``, else the rows of
    ``get_input_embeddings()`` where the model has that method; None otherwise (a plain module's embeddings are
    not guessed at: a position table may come first)."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(size, int):
        return size
    embeddings = getattr(model, "get_input_embeddings", None)
    table = embeddings() if callable(embeddings) else None
    return table.num_embeddings if isinstance(table, torch.nn.Embedding) else None


def _corpus_read_for(spec: SearchSpec, vocabulary: Optional[int]) -> StreamedData:
    """The corpus (``data.parquet.prepare_parquet_data``), its token ids checked against the model's
    ``vocabulary`` (None: not known, so not checked there) instead of the spec's model section, which model_init
    leaves unset."""
    reading = copy.deepcopy(spec)
    reading.model.config, reading.model.vocab_size = None, vocabulary or 2 ** 62
    try:
        return prepare_parquet_data(reading)
    except SpecError as e:
        said = str(e)
        if said.startswith("model.vocab_size"):
            raise SpecError(f"model_init: the model's vocabulary: {said.split(': ', 1)[1].split(';')[0]}") from None
        if said.startswith("data.path") and "not below the vocabulary's" in said:  # a shard's ids, from its footer
            raise SpecError(f"model_init: the model's vocabulary: {said.split(': ', 1)[1].split(';')[0]}; "
                            f"the model's vocabulary must exceed every token id") from None
        raise


def check_streamed_objects(spec: SearchSpec, objects: UserObjects) -> tuple[StreamedObjects, Any]:
    """``check_objects`` for ``model_init`` on the spec's streamed corpus (``data.source: parquet``,
    ``sources.user_stream``): the spec's model section unset (but a text column's ``model.tokenizer``),
    ``forward`` takes the corpus's columns (``corpus_mismatch``), the corpus's footers and evaluation rows read,
    one micro-batch of its first rows through a fresh model on the CPU and one of its evaluation rows through the
    model and ``compute_metrics``. Returns the ``StreamedObjects`` the trials train on and the model's HF config
    (None for a plain module). ``objects`` may be a ``StreamedObjects`` checked before (then checked again)."""
    if replace(spec.model, tokenizer=None) != ModelSpec():
        raise SpecError(f"model_init: the spec names a model too ({_set_fields(spec.model, ModelSpec())}); with "
                        f"model_init the spec's model section holds a Parquet text column's model.tokenizer only")
    _options_the_objects_cannot_take(spec)
    for name in ("compute_metrics", "preprocess_logits_for_metrics"):
        if getattr(objects, name) is not None and not callable(getattr(objects, name)):
            raise SpecError(f"{name}: must be a function, got a {type(getattr(objects, name)).__name__}")
    if objects.preprocess_logits_for_metrics is not None and objects.compute_metrics is None:
        raise SpecError("preprocess_logits_for_metrics: only used with compute_metrics, which is not given")
    model = check_model_for_corpus(spec, objects.model_init)
    config = _model_takes_the_training(spec, model)
    stream = _corpus_read_for(spec, model_vocabulary(model))
    largest = spec.batch_sizes[-1]
    if largest > stream.train_examples:
        raise SpecError(f"search.batch_sizes: largest batch {largest} exceeds the {stream.train_examples} training "
                        f"rows of data.path")
    checked = StreamedObjects(model_init=objects.model_init, train_dataset=None,
                              eval_dataset=CorpusRows(stream.eval_ids, stream.eval_mask),
                              compute_metrics=objects.compute_metrics,
                              preprocess_logits_for_metrics=objects.preprocess_logits_for_metrics,
                              model_class=type(model).__name__, label_shift=True, columns=forward_columns(model),
                              stream=stream)
    micro = plan_batch(spec.batch_sizes[0], spec.resources.workers_per_trial, spec.training.micro_batch_size)
    model.train()
    out = _output_of(model, checked.first_batch(micro.micro_batch, largest), "data.path")
    if not out["loss"].requires_grad:
        raise SpecError("model_init: the model's loss does not depend on any trainable parameter")
    model.eval()
    evaluation = checked.collate([checked.eval_dataset[i] for i in range(min(micro.micro_batch, len(stream.eval_ids)))])
    with torch.no_grad():
        out = _output_of(model, evaluation, "data.eval_examples")
    _check_metrics(spec, checked, out, evaluation)
    return checked, config
