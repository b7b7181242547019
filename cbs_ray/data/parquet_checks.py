"""The driver's checks of a Parquet corpus's shards (``data.source: parquet``), before Ray starts: every shard's
footer read once (its schema, its row count, its column statistics), the column's type, and the token ids of every
shard inside the vocabulary with no row empty. A bad shard is one ``SpecError`` line naming the shard and the
column, never a raw pyarrow or numpy error, nor a trial failing a minute into the search.

The ids are checked from the footer's statistics where the writer kept them (the min, max and null count of the
list column's leaf, ``input_ids.list.element``): a corpus of many shards is checked without reading its rows. A
shard without statistics, or whose statistics count nulls (an empty row, a null row and a null id all count as a
null leaf), has its column read to say which.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from cbs_ray.spec.errors import SpecError

__all__ = ["ShardFooter", "causes", "read_footers", "column_type_problem", "leaf_statistics", "check_token_ids",
           "check_texts", "first_line"]


def first_line(error: BaseException) -> str:
    """The first non-empty line of an error's text (pyarrow's and Ray's run to many), or its class's name."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def causes(error: Optional[BaseException], depth: int = 10) -> Iterator[BaseException]:
    """``error`` and the errors inside it: Ray's ``RayTaskError`` keeps a task's own error as ``.cause``, Python
    as ``__cause__``."""
    while error is not None and depth > 0:
        yield error
        error, depth = getattr(error, "cause", None) or error.__cause__, depth - 1


@dataclass
class ShardFooter:
    """What the driver knows of a shard without reading its rows."""

    path: Path
    metadata: Any
    """``pyarrow.parquet.FileMetaData``."""
    schema: Any
    """Its ``pyarrow.Schema``."""

    @property
    def rows(self) -> int:
        return int(self.metadata.num_rows)


def read_footers(shards: list[Path]) -> list[ShardFooter]:
    """Every shard's footer, each file opened once; a ``SpecError`` naming the first shard that is not Parquet
    (a corrupt footer included) or whose schema differs from the first's."""
    import pyarrow.parquet as pq

    footers: list[ShardFooter] = []
    for shard in shards:
        try:
            metadata = pq.read_metadata(shard)
            schema = metadata.schema.to_arrow_schema()
        except Exception as e:
            raise SpecError(f"data.path: cannot read {shard.name} as Parquet: {first_line(e)}") from None
        if footers and not schema.equals(footers[0].schema):
            first = footers[0].schema
            raise SpecError(f"data.path: mixed schemas: {shard.name} has ({schema.to_string().replace(chr(10), ', ')})"
                            f", {shards[0].name} has ({first.to_string().replace(chr(10), ', ')})")
        footers.append(ShardFooter(shard, metadata, schema))
    return footers


def column_type_problem(kind, column: str, *, ids: bool) -> Optional[str]:
    """What is wrong with a column of Arrow type ``kind``, or None: token ids are a list of integers (not of
    floats, strings or booleans, which would be cut or parsed without a word, nor nested), texts are strings."""
    import pyarrow as pa

    if not ids:
        if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
            return None
        return f"column {column} is {kind}, not text (string)"
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list, pa.types.is_list_view,
             pa.types.is_large_list_view)
    if not any(is_list(kind) for is_list in lists):
        return f"column {column} is {kind}, not a list of token ids (list<int64>)"
    if not pa.types.is_integer(kind.value_type):
        return f"column {column} is {kind}, not a list of integer token ids (list<int64>)"
    return None


def _leaf(metadata, column: str) -> Optional[int]:
    """The index of ``column``'s (first) leaf in the Parquet schema: the column itself, or its list's element."""
    return next((i for i in range(metadata.num_columns)
                 if metadata.schema.column(i).path.split(".")[0] == column), None)


def leaf_statistics(metadata, column: str) -> Optional[tuple[int, int, int]]:
    """(smallest id, largest id, nulls) of ``column``'s leaf over every row group, from the footer's statistics;
    None where a row group has none (the column is then read). Nulls count empty rows, null rows and null ids."""
    leaf = _leaf(metadata, column)
    if metadata.num_row_groups == 0 or leaf is None:
        return None
    low, high, nulls = None, None, 0
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(leaf).statistics
        if stats is None or not stats.has_null_count:
            return None
        nulls += stats.null_count
        if stats.has_min_max:
            low = stats.min if low is None else min(low, stats.min)
            high = stats.max if high is None else max(high, stats.max)
        elif metadata.row_group(group).num_rows and stats.null_count == 0:
            return None  # values, but no statistics of them
    return (0 if low is None else int(low)), (0 if high is None else int(high)), int(nulls)


def _read_column(footer: ShardFooter, column: str):
    """The shard's column, whole (a shard without statistics, or with nulls to name); a corrupt page is one line."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(footer.path, columns=[column]).column(column)
    except Exception as e:
        raise SpecError(f"data.path: cannot read column {column} of {footer.path.name}: {first_line(e)}") from None


def _ids_from_column(footer: ShardFooter, column: str) -> tuple[int, int, int]:
    """(smallest id, largest id, nulls) read from the column itself; a ``SpecError`` naming the first row that is
    null, empty or holds a null id."""
    import pyarrow.compute as pc

    values = _read_column(footer, column).combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(values), 0)
    empty = pc.or_(pc.is_null(values), pc.equal(lengths, 0))
    if pc.any(empty).as_py():
        row = pc.index(empty, True).as_py()
        raise SpecError(f"data.path: {footer.path.name}: row {row} of column {column} holds no tokens; every row "
                        f"needs at least one (an empty row trains on nothing and evaluates to NaN)")
    flat = pc.list_flatten(values)
    if flat.null_count:
        rows = pc.list_parent_indices(values)
        row = rows[pc.index(pc.is_null(flat), True).as_py()].as_py()
        raise SpecError(f"data.path: {footer.path.name}: row {row} of column {column} holds a null token id")
    low, high = pc.min_max(flat).values()
    return int(low.as_py()), int(high.as_py()), 0


def check_token_ids(footers: list[ShardFooter], column: str, vocab_size: int) -> None:
    """Every shard's ids in [0, ``vocab_size``) and no row without tokens: from the footers' statistics where they
    hold them, else from the column read (``leaf_statistics``)."""
    for footer in footers:
        if footer.rows == 0:
            continue
        summary = leaf_statistics(footer.metadata, column)
        if summary is None or summary[2]:
            summary = _ids_from_column(footer, column)
        low, high, _ = summary
        if low < 0:
            raise SpecError(f"data.path: {footer.path.name}: column {column} holds a negative token id ({low}); "
                            f"token ids are 0 to the vocabulary's size - 1")
        if high >= vocab_size:
            raise SpecError(f"data.path: {footer.path.name}: column {column} holds token id {high}, not below the "
                            f"vocabulary's {vocab_size}; set model.vocab_size (or model.config's vocab_size) above "
                            f"the largest id")


def check_texts(footers: list[ShardFooter], column: str) -> None:
    """No null or empty text in any shard (a row without tokens trains on nothing and evaluates to NaN): from
    the footers' statistics (null count, the smallest text) where they hold them, else from the column read."""
    import pyarrow.compute as pc

    for footer in footers:
        if footer.rows == 0:
            continue
        leaf = _leaf(footer.metadata, column)
        groups = [footer.metadata.row_group(g).column(leaf).statistics
                  for g in range(footer.metadata.num_row_groups)] if leaf is not None else []
        if groups and all(s is not None and s.has_null_count and s.has_min_max and not s.null_count
                          and s.min not in ("", b"") for s in groups):
            continue
        values = _read_column(footer, column)
        empty = pc.fill_null(pc.equal(pc.utf8_length(values), 0), True)
        if pc.any(empty).as_py():
            row = pc.index(empty, True).as_py()
            raise SpecError(f"data.path: {footer.path.name}: row {row} of column {column} is empty or null; every "
                            f"row needs text (an empty row trains on nothing and evaluates to NaN)")
