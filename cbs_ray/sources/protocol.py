"""The seam between the loop and what it trains on: a ``Source`` (the model, the training data, a
micro-batch's items and summed loss, the evaluation) and the ``TrialSettings`` a source reads of its
trial. ``train.config.TrialConfig`` is the one implementation of ``TrialSettings``; the sources see it only
through this protocol, so they import nothing of the loop that calls them. A ``Position`` is where the loop
(and a source's evaluation, batch by batch: ``counted``) stands, so that an error names its place."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Optional, Protocol

import torch

from cbs_ray.spec.schema import SearchSpec

__all__ = ["Source", "TrialSettings", "Position", "counted", "lockstep_forwards"]


@dataclass
class Position:
    """Where a trial's worker stands, for the error that would end it (``train.failure``): the phase, the
    batch within it and the samples seen. The loop sets the phase and samples; a source's evaluation sets the
    batch as it draws each one (``counted``)."""

    phase: str = "set-up"
    """``set-up``, ``training``, ``evaluation``, ``dev evaluation`` or ``report`` (the checkpoint and report)."""
    batch: Optional[int] = None
    """The batch index within the phase: training, the micro-batch's index in this worker's data order;
    evaluation, the index of the eval batch in this worker's shard. None where there is none."""
    samples: int = 0
    """Samples seen (the trial's, over all workers) when it got there."""


def counted(batches: Iterable, position: Optional[Position]) -> Iterator:
    """``batches`` as they are, with ``position.batch`` set to each one's index before it is drawn: an error
    while collating batch i, or while the caller uses it, is at batch i."""
    iterator = iter(batches)
    index = 0
    while True:
        if position is not None:
            position.batch = index
        try:
            batch = next(iterator)
        except StopIteration:
            return
        yield batch
        index += 1


def lockstep_forwards(examples: int, world_size: int, batch_size: int, own: int) -> int:
    """The forwards a rank adds, their outputs discarded, after evaluating its ``own`` examples of ``examples``
    (sharded rank::world_size) in batches of ``batch_size``, so that it runs as many forwards as rank 0, which
    holds the most (⌈examples / world_size⌉): under FSDP every forward gathers each block's parameters from all
    ranks (a collective), and a rank that stopped early would leave the others waiting."""
    most = -(-examples // world_size)
    return -(-most // batch_size) - -(-own // batch_size)


class TrialSettings(Protocol):
    """What a source reads of its trial (``train.config.TrialConfig`` has these and more; read-only, as the
    frozen config holds them)."""

    @property
    def spec(self) -> SearchSpec: ...

    @property
    def model_config(self) -> Any: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def alpha(self) -> float: ...

    @property
    def warmup_fraction(self) -> float: ...

    @property
    def seed(self) -> int: ...

    @property
    def trial_id(self) -> str: ...

    @property
    def task(self) -> str: ...

    @property
    def metric(self) -> str: ...

    @property
    def model(self) -> dict: ...

    @property
    def peak_lr(self) -> float: ...


class Source(Protocol):
    """What the loop trains on: ``sources.builtin.BuiltinSource``, ``sources.seq2seq.Seq2SeqSource`` or the
    user's ``sources.user_objects.UserObjects`` (``train.setup.TrainingParts.source``)."""

    @property
    def items_vary(self) -> bool:
        """Whether a micro-batch's items (its loss's denominator) differ from one to the next: counted per step."""

    @property
    def has_dev(self) -> bool:
        """Whether a dev set is held out of the training data (reported as ``dev_*``)."""

    def build_model(self, cfg: TrialSettings) -> torch.nn.Module: ...

    def training_data(self): ...

    def items_in(self, batch) -> int: ...

    def inputs(self, batch, device) -> dict: ...

    def summed_loss(self, forward, inputs: dict, cfg: TrialSettings, items: int) -> torch.Tensor: ...

    def evaluate(self, model, session, cfg: TrialSettings, *, on_dev: bool = False, batch_size: Optional[int] = None,
                 position: Optional[Position] = None, limit: Optional[int] = None) -> dict: ...
