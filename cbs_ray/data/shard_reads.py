"""What a streamed Parquet corpus's read tasks run (``sources.streamed``: Ray Data's map over the epoch's shard paths):
each shard's record batches of the column, any pyarrow error as one ``ShardReadError`` line.

A read task runs in a Ray worker process of its own, started for it (Ray stops idle ones within seconds, so an epoch's
read starts them afresh), which imports the module its function comes from: this one imports pyarrow and nothing
heavier (no torch, whose import took longer than the whole read of a small epoch).
"""

from __future__ import annotations

from collections.abc import Iterator

from cbs_ray.data.parquet_checks import first_line

__all__ = ["ShardReadError", "read_one", "read_shards"]


class ShardReadError(ValueError):
    """A shard that cannot be read where the loop reads it (a corrupt page its footer did not show): one line
    naming the shard and the column."""


def read_one(path: str, column: str) -> Iterator:
    """``path``'s record batches of ``column``; any error of pyarrow's as one ``ShardReadError`` line."""
    import pyarrow.parquet as pq

    try:
        yield from pq.ParquetFile(path).iter_batches(columns=[column])
    except Exception as e:
        raise ShardReadError(f"data.path: cannot read column {column} of {path}: {first_line(e)}") from None


def read_shards(batch, column: str) -> Iterator:
    """Ray Data's map over a batch of shard paths: each shard's record batches of ``column``, yielded one by one (a
    generator: Ray Data gathers them into output blocks of up to its ``target_max_block_size``, so a block holds at
    most the shard, never more; ``bench/streaming_rss.py --ray`` measures the object store)."""
    import pyarrow as pa

    for path in batch.column("path").to_pylist():
        for record_batch in read_one(path, column):
            yield pa.Table.from_batches([record_batch])
