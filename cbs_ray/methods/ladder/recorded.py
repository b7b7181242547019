"""The ladder's settings as its experiment's metadata recorded them (``methods.ladder.settings.Ladder.to_meta``, beside
``max_seq_length``), read back in one place: ``RecordedLadderSettings.from_json`` takes the metadata's flat mapping
(``ExperimentMeta.recorded``: its fields and the method's record beside them) and fills every key an older
experiment did not write with the value that experiment ran with; ``to_json`` writes the keys back. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from cbs_ray.records.columns import Column

__all__ = ["RecordedLadderSettings"]

REQUIRED = ("budget_samples", "ladder_stop_samples", "ladder_batches", "ladder_seeds", "ladder_alpha", "base_lr",
            "base_batch", "warmup_fraction")
"""What every ladder experiment recorded: without them there is no ladder to read."""


@dataclass(frozen=True)
class RecordedLadderSettings:
    """The ladder's recorded settings (``ladder:`` resolved against the budget; ``methods.ladder.settings.Ladder``)."""

    budget_samples: int
    """D, the full budget the prediction is for."""
    stop_samples: int
    """``ladder_stop_samples``: the fraction of D where the smallest batch's runs stop (the last rung)."""
    batches: tuple[int, ...]
    seeds: int
    alpha: float
    """``ladder.alpha``: the LR rule's exponent (``maths.lr_schedule.scaled_lr``)."""
    base_lr: float
    base_batch: int
    warmup_fraction: float
    evaluations: tuple[int, ...] = ()
    validate: bool = False
    """``ladder.validate``: the runs went on to measure B_crit at D."""
    curve: str = "interpolate"
    """``ladder.curve``; an experiment from before the key interpolated."""
    rungs_from: int = 0
    """The first rung (twice the warmup); 0 before the key."""
    reading: str = "raw"
    """``ladder.reading``: ``raw`` or ``ewa``; an experiment that did not record it read the raw model."""
    metric: str = Column.eval_loss
    cap: float = 1.0
    """``ladder.cap``: the other batches' runs stop at cap × the fraction at most."""
    step_count: str = "optimizer"
    """``ladder.step_count``: ``optimizer`` or ``lr_weighted``."""
    warmup_steps: Optional[dict[str, int]] = None
    """Batch (a string, as in JSON) → its warmup steps."""
    run_stop: int = 0
    """Where the runs' plans stop them (the cap, or 2·D when validating); 0: not recorded."""
    predict: str = "power_law"
    """``ladder.predict``: ``power_law`` (the metadata holds no key then) or ``loss``."""
    tokens_per_sample: Optional[int] = None
    max_seq_length: Optional[int] = None
    name: Optional[str] = None
    """The experiment's name and where it is: not settings, carried into the summary."""
    experiment_path: Optional[str] = None

    @classmethod
    def from_json(cls, meta: Mapping[str, Any]) -> RecordedLadderSettings:
        """From the metadata's mapping; a ``ValueError`` (one line, as the report command prints it) where a key
        every ladder records is missing."""
        missing = [k for k in REQUIRED if k not in meta]
        if missing:
            raise ValueError(f"{', '.join(missing)} missing from the ladder experiment's metadata")
        g = meta.get
        warmups = g("ladder_warmup_steps")
        return cls(
            budget_samples=int(meta["budget_samples"]), stop_samples=int(meta["ladder_stop_samples"]),
            batches=tuple(int(b) for b in meta["ladder_batches"]), seeds=int(meta["ladder_seeds"]),
            alpha=float(meta["ladder_alpha"]), base_lr=float(meta["base_lr"]), base_batch=int(meta["base_batch"]),
            warmup_fraction=float(meta[Column.warmup_fraction]),
            evaluations=tuple(int(e) for e in g("ladder_evaluations") or ()), validate=bool(g("ladder_validate")),
            curve=g("ladder_curve", "interpolate"), rungs_from=int(g("ladder_rungs_from", 0)),
            reading=g("ladder_reading", "raw"), metric=g("ladder_metric", Column.eval_loss),
            cap=float(g("ladder_cap", 1.0)), step_count=g("ladder_step_count", "optimizer"),
            warmup_steps={str(b): int(w) for b, w in warmups.items()} if warmups is not None else None,
            run_stop=int(g("ladder_run_stop", 0) or 0), predict=g("ladder_predict", "power_law"),
            tokens_per_sample=_whole(g("tokens_per_sample")), max_seq_length=_whole(g("max_seq_length")),
            name=g("name"), experiment_path=g("experiment_path"))

    def to_json(self) -> dict[str, Any]:
        """The metadata's keys for these settings (``Ladder.to_meta``'s, and those set of the rest)."""
        return {"ladder_batches": list(self.batches), "ladder_seeds": self.seeds, "ladder_alpha": self.alpha,
                Column.warmup_fraction: self.warmup_fraction, "budget_samples": self.budget_samples,
                "ladder_stop_samples": self.stop_samples, "ladder_evaluations": list(self.evaluations),
                "ladder_validate": self.validate, "tokens_per_sample": self.tokens_per_sample,
                "ladder_rungs_from": self.rungs_from, "ladder_curve": self.curve, "ladder_reading": self.reading,
                "ladder_cap": self.cap, "ladder_metric": self.metric, "ladder_step_count": self.step_count,
                "ladder_warmup_steps": self.warmup_steps, "ladder_run_stop": self.run_stop,
                **({"ladder_predict": self.predict} if self.predict != "power_law" else {}),
                "base_lr": self.base_lr, "base_batch": self.base_batch,
                **{k: v for k, v in (("max_seq_length", self.max_seq_length), ("name", self.name),
                                     ("experiment_path", self.experiment_path)) if v is not None}}

    @property
    def column(self) -> str:
        """The history column the rungs read: ``ewa_<metric>`` through the average of the iterates."""
        return f"ewa_{self.metric}" if self.reading == "ewa" else self.metric

    @property
    def tokens(self) -> Optional[int]:
        """Tokens a sample: packed (``tokens_per_sample``), else at most ``max_seq_length``; None where neither."""
        return self.tokens_per_sample or self.max_seq_length

    @property
    def lr_warmups(self) -> Optional[dict[int, int]]:
        """Each batch's warmup steps where S(B) is counted by the LR (``ladder.step_count: lr_weighted``), else
        None (``maths.ladder.rung_readings``)."""
        if self.step_count != "lr_weighted" or not self.warmup_steps:
            return None
        return {int(b): w for b, w in self.warmup_steps.items()}


def _whole(value: Any) -> Optional[int]:
    return int(value) if value is not None else None
