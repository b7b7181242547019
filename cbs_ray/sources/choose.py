"""Which source the loop trains on: the user's objects as they are, the spec path's arrays through
``BuiltinSource`` (a seq2seq task's through ``Seq2SeqSource``).
"""

from __future__ import annotations

from cbs_ray.data.parquet import StreamedData
from cbs_ray.sources.builtin import BuiltinSource
from cbs_ray.sources.protocol import Source
from cbs_ray.sources.seq2seq import Seq2SeqSource
from cbs_ray.sources.streamed import StreamedSource
from cbs_ray.sources.user_objects import UserObjects

__all__ = ["loop_source"]


def loop_source(data: object, task: str) -> Source:
    """What the loop trains on: the user's objects as they are, the spec path's arrays through
    ``BuiltinSource`` (a seq2seq task's through ``seq2seq.Seq2SeqSource``)."""

    if isinstance(data, UserObjects):
        return data
    if isinstance(data, StreamedData):  # a Parquet corpus, streamed (data.parquet)
        return StreamedSource(data, task)
    if task == "seq2seq":
        return Seq2SeqSource(data, task)
    return BuiltinSource(data, task)
