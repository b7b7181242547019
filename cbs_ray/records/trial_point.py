"""A trial's batch size as Tune holds it, encoded and decoded in this one place.

A trial's point (its Tune config: what a searcher chose, or what a method listed) names its batch size by the
key ``BATCH_KEY``, ``"log2_batch"``, holding log2 of the batch (an ordered integer for TPE's and Optuna's
samplers, a power of two back). Every writer of a point puts ``{BATCH_KEY: encode_batch(batch), ...}`` and every
reader takes ``batch_of(point)``; the recorded experiments (their ``params.json``, Tune's state, an Optuna
study's parameters) keep the key, so nothing on disk changes.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["BATCH_KEY", "encode_batch", "decode_batch", "batch_of"]

BATCH_KEY = "log2_batch"
"""The key of a trial's point (Tune config, Optuna parameter) that holds log2 of its batch size."""


def encode_batch(batch: int) -> int:
    """The value ``BATCH_KEY`` holds for ``batch`` (a power of two): its log2."""
    return int(batch).bit_length() - 1


def decode_batch(value: Any) -> int:
    """The batch size a ``BATCH_KEY`` value stands for (an int, or what Tune or Optuna hand back for one)."""
    return int(2 ** int(value))


def batch_of(point: Mapping[str, Any]) -> int:
    """The batch size of a trial's point (its Tune config)."""
    return decode_batch(point[BATCH_KEY])
