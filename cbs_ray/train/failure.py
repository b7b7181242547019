"""Where a trial failed, and whether it failed there before: a deterministic error ends the trial instead of
being retried.

Tune retries a failed trial up to ``resources.max_failures`` times (Ray Train a failed worker group likewise),
whatever the error: Ray Tune 2.60 has no per-error decision (``FailureConfig`` counts failures;
``Trial.should_recover`` compares only the count). An error in the data or the model (an eval row longer than
the model's positions, a column the collator cannot batch) fails every attempt at the same place, each attempt
after training up to it again. So the loop locates every error it ends on (a ``FailurePoint``: the phase,
the batch index within it, the samples seen), says where in its message (the error keeps its type:
``located``), and records it in the trial's directory (one file per rank); an attempt that fails at the same
point with the same error as the attempt before it knows the error repeats, and fails with a message that
says so. Any retry Tune or Train still starts after that ends at its first line, before building anything
(``end_if_repeated``), so no training is repeated.

The record lives in the trial's working directory (``tune.get_context().get_trial_dir()``), on the node of the
trial's actor: a retry on another node, or a resumed search (a new Ray session), finds none and runs once more.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Optional

from cbs_ray.sources.protocol import Position

__all__ = ["FailurePoint", "FailureLog", "REPEATED", "located"]

REPEATED = "the same error at the same point as the attempt before, so it is not retried"
"""What the message of an error that repeated says, before where and what it is."""


@dataclass(frozen=True)
class FailurePoint:
    """Where and with what a trial's worker failed."""

    phase: str
    """``Position.phase``: set-up, training, evaluation, dev evaluation or report."""
    batch: Optional[int]
    """The batch index within the phase (``Position.batch``)."""
    samples: int
    """Samples seen when it failed."""
    error: str
    """The error's type and the first line of its message: ``IndexError: index out of range in self``."""

    @classmethod
    def of(cls, error: BaseException, position: Position) -> FailurePoint:
        lines = str(error).strip().splitlines()
        return cls(position.phase, position.batch, position.samples,
                   f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__)

    def where(self) -> str:
        """'in evaluation (batch index 3), at 1024 samples'."""
        batch = f" (batch index {self.batch})" if self.batch is not None else ""
        return f"in {self.phase}{batch}, at {self.samples} samples"

    def text(self) -> str:
        """The located error, one line; the place first, so that a message searched for in it (the
        micro-batch probe's) is still found whole at the end."""
        return f"{self.where()}: {self.error}"


class FailureLog:
    """One rank's record of where its trial last failed: read when the attempt starts, written when it fails.
    Without a directory (outside Tune) nothing is recorded and every error is only located."""

    def __init__(self, directory: Optional[str], rank: int = 0):
        self.path = os.path.join(directory, f"failure-rank{rank}.json") if directory else None
        self.previous = self._read()

    def _read(self) -> Optional[dict]:
        if not self.path:
            return None
        try:
            with open(self.path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def end_if_repeated(self) -> None:
        """Raise the repeated error again at once, where the attempt before found that it repeats."""
        if self.previous and self.previous.get("repeated"):
            raise RuntimeError(f"{REPEATED}: {self.previous.get('text', '')}")

    def failed(self, error: Exception, position: Position) -> Exception:
        """The error to end the attempt with, recorded: ``error`` itself with the place before its message
        (``located``), and where it is the same error at the same point as the attempt before's, saying so."""
        point = FailurePoint.of(error, position)
        previous = {k: v for k, v in (self.previous or {}).items() if k in ("phase", "batch", "samples", "error")}
        repeated = previous == asdict(point)
        self._write({**asdict(point), "text": point.text(), "repeated": repeated})
        where = None if point.phase == "set-up" else point.where()  # before training: the place adds nothing
        return located(error, ": ".join(part for part in (REPEATED if repeated else None, where) if part))

    def _write(self, record: dict) -> None:
        if not self.path:
            return
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(f"{self.path}.tmp", "w") as f:
                json.dump(record, f)
            os.replace(f"{self.path}.tmp", self.path)
        except OSError:  # the record is a help, never a second error
            pass


def located(error: Exception, prefix: str) -> Exception:
    """``error`` with ``prefix`` before its message, its type kept (``MemoryError: in evaluation (batch index 3),
    at 1024 samples: …``), where its message is its first argument; else a ``RuntimeError`` naming its type
    after the prefix. ``error`` itself when there is no prefix."""
    if not prefix:
        return error
    before, args = str(error), error.args
    if type(error) is not KeyError and args and isinstance(args[0], str):  # KeyError's message quotes its key
        error.args = (f"{prefix}: {args[0]}", *args[1:])
        if str(error) != before:
            return error
        error.args = args  # a message of its own making: left as it is
    return RuntimeError(f"{prefix}: {FailurePoint.of(error, Position()).error}")
