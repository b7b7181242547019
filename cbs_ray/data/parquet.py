"""A corpus of Parquet shards (``data.source: parquet``), streamed: the driver reads only the shards' schemas and row
counts (Parquet footers) and materialises the small evaluation set; the training rows are read by each worker as it
trains (``sources.streamed``), never loaded whole, never put whole into Ray's object store.

The folder's ``*.parquet`` files, in name order, share one schema: an ``input_ids`` column of token-id lists, or a
``data.text_column`` of texts tokenised by ``model.tokenizer``. The last shard is the evaluation set's (its first
``data.eval_examples`` rows) and is never trained on; the others are the training set.

The training order is one global sequence of rows: each epoch the training shards in a permutation drawn from
(seed, epoch), each shard's rows in file order, cut to a whole number of the search's largest batch so that every
batch size walks the same epochs. Worker r of W trains on rows r, r + W, r + 2W, … of it, micro-batch after
micro-batch (as ``torch.utils.data.DistributedSampler`` deals indices), so after n samples every trial, whatever
its batch or micro-batch, has trained on exactly the first n rows of the sequence: the equal-sample contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from cbs_ray.data.arrays import PreparedData
from cbs_ray.data.parquet_checks import check_texts, check_token_ids, column_type_problem, first_line, read_footers
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.scale_rules import parquet_shards
from cbs_ray.spec.schema import SearchSpec

__all__ = ["StreamedData", "prepare_parquet_data", "epoch_files", "rows_to_arrays"]


@dataclass
class StreamedData(PreparedData):
    """``PreparedData`` whose evaluation arrays are held and whose training rows are not: the training shards'
    paths and row counts, read where the loop runs (``sources.streamed``). Its training arrays are empty."""

    train_files: list = field(default_factory=list)
    """The training shards' absolute paths, in name order."""
    train_rows: list = field(default_factory=list)
    """Rows in each training shard (from its footer)."""
    column: str = "input_ids"
    """The column read: ``input_ids`` (token-id lists) or the text column."""
    tokenizer: Optional[str] = None
    """The text column's tokenizer (``model.tokenizer``); None for ``input_ids``."""
    max_seq_length: int = 0
    """Tokens per sample: longer rows are cut, shorter padded (and masked)."""

    @property
    def train_examples(self) -> int:
        return int(sum(self.train_rows))

    def fingerprint(self) -> str:
        """``PreparedData.fingerprint`` of the evaluation arrays, with the training shards' names, sizes in bytes
        and row counts, the column and the tokenizer (``--resume`` compares it; the rows are not hashed: that
        would read the corpus)."""
        import hashlib

        digest = hashlib.blake2b(super().fingerprint().encode(), digest_size=16)
        for path, rows in zip(self.train_files, self.train_rows):
            digest.update(f"{Path(path).name}:{Path(path).stat().st_size}:{rows};".encode())
        digest.update(f"{self.column}:{self.tokenizer}:{self.max_seq_length}".encode())
        return digest.hexdigest()


def _column(schema, spec: SearchSpec) -> str:
    """``input_ids`` where the shards hold it, else the text column (which needs ``model.tokenizer``)."""
    if "input_ids" in schema.names:
        return "input_ids"
    text = spec.data.text_column
    if text not in schema.names:
        raise SpecError(f"data.path: the shards have neither an input_ids column nor data.text_column {text!r} "
                        f"(columns: {', '.join(schema.names)})")
    if not spec.model.tokenizer:
        raise SpecError("model.tokenizer: a Parquet text column is tokenised by a pretrained tokenizer (the corpus "
                        "is never read whole to train one); set model.tokenizer, or write input_ids")
    return text


def rows_to_arrays(rows, length: int, pad_id: int, encode=None) -> tuple[np.ndarray, np.ndarray]:
    """(ids, mask), int64 [rows, length]: each row's token ids cut to ``length`` or padded with ``pad_id`` (mask 0);
    ``encode`` (texts → (ids, mask)) for a text column."""
    if encode is not None:
        return encode([("" if t is None else str(t)) for t in rows])
    ids = np.full((len(rows), length), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), length), dtype=np.int64)
    for i, row in enumerate(rows):
        tokens = np.asarray(row if row is not None else [], dtype=np.int64)[:length]
        ids[i, :len(tokens)] = tokens
        mask[i, :len(tokens)] = 1
    return ids, mask


def epoch_files(count: int, seed: int, epoch: int) -> np.ndarray:
    """The training shards' order in ``epoch`` (indices into the name order): a permutation drawn from
    (seed, epoch), the same on every rank and in every trial of that seed."""
    return np.random.default_rng([seed, epoch]).permutation(count)


def prepare_parquet_data(spec: SearchSpec) -> StreamedData:
    """The driver's part: the shards' footers, each read once (``data.parquet_checks``: one schema, the column's
    type, every shard's ids inside the vocabulary and no row without tokens, a ``SpecError`` line naming the shard
    and the column otherwise), the training shards' row counts, and the evaluation set read from the last shard."""
    d = spec.data
    assert d.path is not None  # data.path is required with data.source: parquet (spec.scale_rules)
    shards = parquet_shards(d.path)
    if len(shards) < 2:
        raise SpecError(f"data.path: {d.path} holds one shard; the last shard is the evaluation set's, so at least "
                        f"two are needed")
    footers = read_footers(shards)
    column = _column(footers[0].schema, spec)
    problem = column_type_problem(footers[0].schema.field(column).type, column, ids=column == "input_ids")
    if problem:
        raise SpecError(f"data.path: {shards[0].name} (and every shard: one schema): {problem}")
    length = d.max_seq_length
    encode, vocab_size, pad_id = None, (spec.model.config or {}).get("vocab_size", spec.model.vocab_size), 0
    if column == "input_ids":
        check_token_ids(footers, column, vocab_size)
    else:
        check_texts(footers, column)
        from cbs_ray.data.tokenize import pretrained_tokenizer

        if spec.model.tokenizer is None:
            raise SpecError("model.tokenizer: required to tokenise a Parquet text column")
        encode, _, vocab_size, pad_id = pretrained_tokenizer(spec.model.tokenizer, length)
    eval_ids, eval_mask = _evaluation_rows(shards[-1], column, d.eval_examples, length, pad_id, encode)
    empty = np.zeros((0, length), dtype=np.int64)
    rows = [footer.rows for footer in footers[:-1]]
    print(f"parquet: {len(rows)} training shards, {sum(rows)} rows streamed; {len(eval_ids)} evaluation rows "
          f"from {shards[-1].name}", flush=True)
    return StreamedData(empty, empty, np.zeros(0, dtype=np.int64), eval_ids, eval_mask,
                        np.zeros(len(eval_ids), dtype=np.int64), vocab_size, 0, pad_id,
                        train_files=[str(s.resolve()) for s in shards[:-1]], train_rows=rows, column=column,
                        tokenizer=spec.model.tokenizer if encode is not None else None, max_seq_length=length)


def _evaluation_rows(shard: Path, column: str, count: int, length: int, pad_id: int, encode):
    """(ids, mask) of the first ``count`` rows of the evaluation shard; a corrupt page, an empty shard or a text
    that tokenises to nothing is one ``SpecError`` line naming the shard."""
    import pyarrow.parquet as pq

    try:
        first = next(pq.ParquetFile(shard).iter_batches(batch_size=count, columns=[column]), None)
    except Exception as e:
        raise SpecError(f"data.path: cannot read column {column} of {shard.name}: {first_line(e)}") from None
    evaluation = [] if first is None else first.column(column).to_pylist()
    if not evaluation:
        raise SpecError(f"data.path: the evaluation shard {shard.name} is empty")
    ids, mask = rows_to_arrays(evaluation, length, pad_id, encode)
    blank = np.flatnonzero(mask.sum(axis=1) == 0)
    if len(blank):
        raise SpecError(f"data.path: {shard.name}: row {int(blank[0])} of column {column} tokenises to no token; "
                        f"every row needs at least one (an empty row evaluates to NaN)")
    return ids, mask
