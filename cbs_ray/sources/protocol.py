"""The seam between the loop and what it trains on: a ``Source`` (the model, the training data, a
micro-batch's items and summed loss, the evaluation) and the ``TrialSettings`` a source reads of its
trial. ``train.config.TrialConfig`` is the one implementation of ``TrialSettings``; the sources see it only
through this protocol, so they import nothing of the loop that calls them."""

from __future__ import annotations

from typing import Any, Protocol

import torch

from cbs_ray.spec.schema import SearchSpec

__all__ = ["Source", "TrialSettings"]


class TrialSettings(Protocol):
    """What a source reads of its trial (``train.config.TrialConfig`` has these and more)."""

    spec: SearchSpec
    model_config: Any

    @property
    def task(self) -> str: ...

    @property
    def metric(self) -> str: ...

    @property
    def model(self) -> dict: ...


class Source(Protocol):
    """What the loop trains on: ``sources.builtin.BuiltinSource``, ``sources.seq2seq.Seq2SeqSource`` or the
    user's ``sources.user_objects.UserObjects``."""

    def build_model(self, cfg: TrialSettings) -> torch.nn.Module: ...

    def training_data(self): ...

    def items_in(self, batch) -> int: ...

    def inputs(self, batch, device) -> dict: ...

    def summed_loss(self, forward, inputs: dict, cfg: TrialSettings, items: int) -> torch.Tensor: ...

    def evaluate(self, model, session, cfg: TrialSettings, **kwargs) -> dict: ...
