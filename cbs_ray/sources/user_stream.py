"""The user's own model on a streamed Parquet corpus: ``run_search(spec, model_init=MyLM)`` with ``data.source:
parquet`` (or a ``ray.data.Dataset`` as ``train_dataset``, written as Parquet shards first: ``sources.ray_dataset``).

The corpus is the spec's (``data.path``, ``data.max_seq_length``, ``data.eval_examples``; ``data.parquet``), read as
on the spec path (``sources.streamed``: every trial on the same first n rows of one global order, through Ray Data
where the loop runs in Ray); the model is ``model_init``'s, under ``sources.user_objects``' contract. Each batch
the model gets holds the corpus's columns as a Hugging Face causal LM takes them (``CORPUS_COLUMNS``):

* ``input_ids``: int64 [rows, ``data.max_seq_length``], a shorter row padded (with 0, or the tokenizer's pad id);
* ``attention_mask``: 1 on the row's tokens, 0 on its padding;
* ``labels``: the ``input_ids`` again, -100 on the padding, *unshifted*: the model predicts ``labels[:, 1:]`` from
  the logits at ``[:, :-1]`` and returns their mean cross-entropy as ``loss``, as ``GPT2LMHeadModel`` does.

Keys that ``model.forward`` does not name (``attention_mask`` for a ``forward(input_ids, labels=None)``) are left
out; a forward that takes neither ``input_ids`` nor ``labels`` is refused on the driver, in one line
(``sources.object_checks.corpus_mismatch``). A step weighs each micro-batch by its targets (``labels[:, 1:]`` other
than -100: the tokens after the first), so accumulation and several workers give the mean over the step's targets,
as the spec's own model gets it (``sources.builtin``). The evaluation is ``sources.user_objects.evaluate`` over the
evaluation rows the driver read (``CorpusRows``), its ``eval_loss`` the mean of the model's loss over their targets.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch

from cbs_ray.data.parquet import StreamedData
from cbs_ray.sources.streamed import StreamedSource
from cbs_ray.sources.user_objects import UserObjects, model_inputs

__all__ = ["StreamedObjects", "CorpusRows", "CORPUS_COLUMNS", "corpus_batch", "stack_rows"]

CORPUS_COLUMNS = ("input_ids", "attention_mask", "labels")
"""What a batch of the corpus holds, as a Hugging Face causal LM's ``forward`` names it."""


def corpus_batch(ids: torch.Tensor, mask: torch.Tensor, columns: Optional[tuple] = None) -> dict:
    """The batch the model gets of rows ``ids`` with ``mask`` (the module's docstring): the ``CORPUS_COLUMNS`` that
    ``columns`` (``forward_columns``; None: all) names."""
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    return batch if columns is None else {k: v for k, v in batch.items() if k in columns}


def stack_rows(items: list) -> dict:
    """``CorpusRows``' items as one batch: each key's tensors stacked (the evaluation's collator)."""
    return {key: torch.stack([item[key] for item in items]) for key in items[0]}


class CorpusRows(torch.utils.data.Dataset):
    """The evaluation rows the driver read (``StreamedData.eval_ids``, ``eval_mask``) as a map-style dataset: item i
    is row i's ``corpus_batch`` (unbatched)."""

    def __init__(self, ids: np.ndarray, mask: np.ndarray):
        self.ids, self.mask = ids, mask

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        if not -len(self) <= i < len(self):  # map-style: past the end is an IndexError, as a list's
            raise IndexError(f"row {i} of {len(self)}")
        # copied: in a trial the arrays are the object store's, read-only, which torch.from_numpy warns of
        return corpus_batch(torch.tensor(self.ids[i]), torch.tensor(self.mask[i]))


@dataclass(frozen=True)
class StreamedObjects(UserObjects):
    """The user's model (``model_init``, ``compute_metrics``) on a streamed corpus (``stream``): ``UserObjects``
    whose training micro-batches are the corpus's (``micro_batches``, as ``sources.streamed.StreamedSource`` draws
    them) and whose ``eval_dataset`` is its evaluation rows (``CorpusRows``, collated by ``stack_rows``). Made by
    ``sources.object_checks.check_streamed_objects``; ``train_dataset`` is None."""

    stream: Optional[StreamedData] = None
    """The corpus: the training shards' paths and row counts, the evaluation rows."""

    @property
    def corpus(self) -> StreamedData:
        assert self.stream is not None, "made by check_streamed_objects, which sets it"
        return self.stream

    @property
    def collate(self) -> Callable[[list], Mapping]:
        """``stack_rows`` of the items, their keys those ``model.forward`` takes."""
        columns = self.columns
        return stack_rows if columns is None else _KeepColumns(columns)

    @property
    def train_examples(self) -> int:
        return self.corpus.train_examples

    def training_data(self):
        raise TypeError("a streamed corpus has no training set in memory; the loop draws micro_batches")

    def micro_batches(self, *, seed: int, rank: int, workers: int, micro: int, drawn: int, whole: int,
                      use_ray: bool) -> Iterator[dict]:
        """This rank's endless micro-batches of ``micro`` rows, the spec path's rows in its order
        (``StreamedSource.micro_batches``), each as the model takes it (``corpus_batch``)."""
        rows = StreamedSource(self.corpus, "causal-lm").micro_batches(
            seed=seed, rank=rank, workers=workers, micro=micro, drawn=drawn, whole=whole, use_ray=use_ray)
        for ids, mask, _ in rows:
            yield corpus_batch(ids, mask, self.columns)

    def first_batch(self, size: int, whole: int) -> dict:
        """The first micro-batch of ``size`` rows a trial of one worker trains on (read here, without Ray): what the
        driver's check runs through the model."""
        return next(self.micro_batches(seed=0, rank=0, workers=1, micro=size, drawn=0, whole=whole, use_ray=False))

    def fingerprint(self) -> str:
        """The corpus's (``StreamedData.fingerprint``): ``--resume`` compares it."""
        return self.corpus.fingerprint()

    def probe_workload(self, model: torch.nn.Module, device) -> tuple[dict, int, Callable[[int], dict]]:
        """``UserObjects.probe_workload`` on a full row of ``data.max_seq_length`` tokens: the longest a micro-batch
        holds (an evaluation row, every token kept)."""
        length = self.corpus.max_seq_length
        ids = torch.tensor(self.corpus.eval_ids[:1])
        row = corpus_batch(ids, torch.ones_like(ids), self.columns)
        params = sum(p.numel() for p in model.parameters())
        key = {"name": f"model_init:{type(model).__module__}.{type(model).__name__}:{params}-params"}

        def batch_of(m: int) -> dict:
            return model_inputs({k: v.expand(m, -1).contiguous() for k, v in row.items()}, device)

        return key, length, batch_of


class _KeepColumns:
    """``stack_rows`` of the items' ``keep`` keys; a class, so that the bundle pickles."""

    def __init__(self, keep: tuple):
        self.keep = frozenset(keep)

    def __call__(self, items: list) -> dict:
        return stack_rows([{k: v for k, v in item.items() if k in self.keep} for item in items])

