"""The source of a streamed Parquet corpus (``data.parquet.StreamedData``): evaluation as the spec path's
(``sources.builtin``, on the evaluation rows the driver read), training micro-batches read as the loop draws them,
in the corpus's one global order (``data.parquet``'s docstring: every trial trains on the same first n rows).

Where the loop runs in Ray (a Tune trial or a Ray Train worker), the rows come through Ray Data (the epoch's shards
in order, each read by a map task that holds no CPU, at most 2 of them at once per CPU the worker holds, its function
in ``data.shard_reads``, which imports no torch,
``preserve_order`` on, streamed in record-batch blocks through the object store: never the corpus whole); outside
Ray (tests, benches) through ``pyarrow.parquet`` in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from cbs_ray.data.parquet import StreamedData, epoch_files, rows_to_arrays
from cbs_ray.data.parquet_checks import causes, first_line
from cbs_ray.data.shard_reads import ShardReadError, read_one, read_shards
from cbs_ray.sources.builtin import BuiltinSource

__all__ = ["StreamedSource", "rows_in_order", "global_order", "read_shards", "read_plan", "ShardReadError"]


READS_PER_CPU = 2
"""Shard-reading tasks in flight at once, per CPU the reading worker holds: the tasks ask for no CPU (the trial's
workers hold the cluster's), so this, not Ray's scheduler, bounds them (10 000 shards started more than 92 worker
processes on 2 cores, unbounded)."""
MAX_READ_BLOCKS = 1000
"""At most this many read tasks an epoch: past it, a task reads several consecutive shards (in order)."""


def read_plan(files: int, cpus: float) -> tuple[int, int]:
    """(blocks, tasks): the epoch's ``files`` shard paths cut into this many blocks (one read task each, at most
    ``MAX_READ_BLOCKS``), of which at most ``tasks`` run at once: ``READS_PER_CPU`` per CPU the reading worker
    holds (``cpus``; one where it holds none, as a driver)."""
    return max(1, min(files, MAX_READ_BLOCKS)), max(1, int(READS_PER_CPU * max(cpus, 1.0)))


def _held_cpus() -> float:
    """The CPUs Ray assigned to this process (a trial's, a Ray Train worker's); 0 on a driver."""
    import ray

    if not ray.is_initialized():
        return 0.0
    try:
        return float(ray.get_runtime_context().get_assigned_resources().get("CPU", 0.0))
    except AssertionError:  # asked on a driver, not a worker: Ray asserts
        return 0.0


def _shard_error(error: BaseException) -> Exception | None:
    """The ``ShardReadError`` inside Ray's wrapping of a read task's failure, if that is what failed."""
    found = [c for c in causes(error) if isinstance(c, ShardReadError)]  # the last: the task's own, not Ray's copy
    return ShardReadError(first_line(found[-1])) if found else None  # Ray Data adds lines of its own


def _ray_data_rows(files: list[str], column: str) -> Iterator[list]:
    """The rows of ``files`` in this order, through Ray Data: the paths as a dataset, each block read by a map task
    holding no CPU (``read_shards``), at most ``read_plan``'s tasks at once. Not ``ray.data.read_parquet``: its
    file-listing task holds a CPU, and the trial's workers hold the cluster's CPUs, so it would wait for ever
    (Ray 2.60)."""
    import ray.data

    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # blocks come out in the order of the files, row order kept
    context.enable_progress_bars = False  # an epoch's read is a trial's background, not a line of its log
    context.print_on_execution_start = False
    blocks, tasks = read_plan(len(files), _held_cpus())
    items = ray.data.from_items([{"path": path} for path in files], override_num_blocks=blocks)
    # Ray's annotation of the function omits its fn_kwargs, hence the ignore
    dataset: Any = items.map_batches(read_shards, batch_size=1, batch_format="pyarrow",  # type: ignore[arg-type]
                                     num_cpus=0, compute=ray.data.TaskPoolStrategy(size=tasks),
                                     fn_kwargs={"column": column})
    try:
        for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
            yield batch.column(column).to_pylist()
    except Exception as e:
        clean = _shard_error(e)
        if clean is None:
            raise
        raise clean from None


def _pyarrow_rows(files: list[str], column: str) -> Iterator[list]:
    for path in files:
        for batch in read_one(path, column):
            yield batch.column(column).to_pylist()


def rows_in_order(data: StreamedData, seed: int, epoch: int, skip: int, *, use_ray: bool) -> Iterator:
    """The rows of ``epoch`` after its first ``skip``: whole shards skipped by their row counts, without reading."""
    order = [int(i) for i in epoch_files(len(data.train_files), seed, epoch)]
    while order and skip >= data.train_rows[order[0]]:
        skip -= data.train_rows[order.pop(0)]
    files = [data.train_files[i] for i in order]
    for rows in (_ray_data_rows if use_ray else _pyarrow_rows)(files, data.column):
        if skip >= len(rows):
            skip -= len(rows)
            continue
        yield from rows[skip:]
        skip = 0


def global_order(data: StreamedData, seed: int, whole: int, start: int = 0, *, use_ray: bool = False) -> Iterator:
    """The corpus's rows in the global training order from row ``start``, epoch after epoch, each epoch cut to a
    whole number of ``whole`` rows (the search's largest batch)."""
    per_epoch = data.train_examples // whole * whole
    if per_epoch == 0:
        raise ValueError(f"the Parquet training shards ({data.train_examples} rows) hold no whole batch of {whole}")
    epoch, offset = divmod(start, per_epoch)
    while True:
        taken = offset
        for row in rows_in_order(data, seed, epoch, offset, use_ray=use_ray):
            if taken == per_epoch:
                break
            yield row
            taken += 1
        epoch, offset = epoch + 1, 0


class StreamedSource(BuiltinSource):
    """``BuiltinSource`` whose training data are streamed (``micro_batches``), its evaluation the same."""

    def training_data(self):
        raise TypeError("a streamed corpus has no training set in memory; the loop draws micro_batches")

    def micro_batches(self, *, seed: int, rank: int, workers: int, micro: int, drawn: int, whole: int,
                      use_ray: bool) -> Iterator:
        """This rank's endless (ids, mask, labels) micro-batches of ``micro`` rows: rows rank, rank + workers, …
        of the global order, after the ``drawn`` this rank took before a checkpoint."""
        data = self.data
        encode = None
        if data.tokenizer:
            from cbs_ray.data.tokenize import pretrained_tokenizer

            encode = pretrained_tokenizer(data.tokenizer, data.max_seq_length)[0]
        rows = global_order(data, seed, whole, start=drawn * workers, use_ray=use_ray)
        while True:
            step_rows = [next(rows) for _ in range(micro * workers)]
            ids, mask = rows_to_arrays(step_rows[rank::workers], data.max_seq_length, data.pad_id, encode)
            yield torch.from_numpy(ids), torch.from_numpy(mask), torch.zeros(len(ids), dtype=torch.long)

