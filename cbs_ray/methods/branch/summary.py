"""Parts of branch mode's summary (``methods.branch.reading.BranchSummary``) as typed records, each with ``to_dict``
(the mapping ``summary.json`` holds, keys in the order it has always written them) and ``from_dict`` (that mapping
read back): the trunk, each branch run, and CBS(t) read on both losses. A key only some summaries carry (the
trunk's warmup where the experiment recorded its warmup fraction, a run's ``trial_id``) is a field that is None
where the key is absent: ``to_dict`` leaves it out there, so summary.json and the report read byte for byte as
before these types (``tests/golden/test_branch_summary_types.py``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from cbs_ray.analysis.json_values import json_clean
from cbs_ray.records.columns import Column

__all__ = ["TrunkRecord", "BranchRun", "LossReading", "LossComparison"]


def _present(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class TrunkRecord:
    """The trunk: its batch, peak LR, last report and, where the experiment recorded a warmup fraction, its LR
    warmup in optimizer steps and in samples (``integrations`` lays the LR out in samples)."""

    batch_size: int
    peak_lr: Optional[float]
    """The recorded ``trunk_peak_lr``, else the trunk's last report's."""
    final_eval_loss: Optional[float]
    """None where the trunk never reported or its last report diverged."""
    samples_seen: Optional[int]
    steps: Optional[float]
    warmup_steps: Optional[int] = None
    warmup_samples: Optional[int] = None

    def to_dict(self) -> dict:
        return json_clean({Column.batch_size: self.batch_size, Column.peak_lr: self.peak_lr,
                           "final_eval_loss": self.final_eval_loss, Column.samples_seen: self.samples_seen,
                           Column.steps: self.steps,
                           **_present(**{Column.warmup_steps: self.warmup_steps,
                                         "warmup_samples": self.warmup_samples})})

    @classmethod
    def from_dict(cls, d: Mapping) -> TrunkRecord:
        return cls(d[Column.batch_size], d[Column.peak_lr], d["final_eval_loss"], d[Column.samples_seen],
                   d[Column.steps], d.get(Column.warmup_steps), d.get("warmup_samples"))


@dataclass(frozen=True)
class BranchRun:
    """One branch run: where it started, its batch, alpha and peak LR, its eval loss at the window's end (None if
    it never got there or diverged), and how far it trained."""

    start_samples: int
    batch_size: int
    alpha: Optional[float]
    peak_lr: Optional[float]
    eval_loss: Optional[float]
    diverged: bool
    seed_offset: int
    samples_seen: int
    steps: Optional[float]
    trial_id: Optional[str] = None
    """Tune's trial id, where the history has the column."""

    def to_dict(self) -> dict:
        return json_clean({Column.start_samples: self.start_samples, Column.batch_size: self.batch_size,
                           Column.alpha: self.alpha, Column.peak_lr: self.peak_lr, Column.eval_loss: self.eval_loss,
                           Column.diverged: self.diverged, Column.seed_offset: self.seed_offset,
                           Column.samples_seen: self.samples_seen, Column.steps: self.steps,
                           **_present(**{Column.trial_id: self.trial_id})})

    @classmethod
    def from_dict(cls, d: Mapping) -> BranchRun:
        return cls(d[Column.start_samples], d[Column.batch_size], d[Column.alpha], d[Column.peak_lr],
                   d[Column.eval_loss], d[Column.diverged], d[Column.seed_offset], d[Column.samples_seen],
                   d[Column.steps], d.get(Column.trial_id))


@dataclass(frozen=True)
class LossReading:
    """CBS(t) at one checkpoint read on one loss (a ``CbsPoint``'s headline fields)."""

    batch_size: Optional[int]
    bound: Optional[str]
    interval: Optional[list[Any]]
    resolvable: bool
    trunk_improvement: Optional[float]

    def to_dict(self) -> dict:
        return json_clean({Column.batch_size: self.batch_size, "bound": self.bound, "interval": self.interval,
                           "resolvable": self.resolvable, "trunk_improvement": self.trunk_improvement})

    @classmethod
    def from_dict(cls, d: Mapping) -> LossReading:
        return cls(d[Column.batch_size], d["bound"], d["interval"], d["resolvable"], d["trunk_improvement"])


@dataclass(frozen=True)
class LossComparison:
    """One checkpoint's CBS(t) on the eval loss and on the EMA-smoothed training loss, and whether they agree
    (the same CBS(t), bound and resolvability)."""

    samples_seen: int
    eval: LossReading
    train_ema: LossReading
    agree: bool

    def to_dict(self) -> dict:
        return {Column.samples_seen: self.samples_seen, "eval": self.eval.to_dict(),
                "train_ema": self.train_ema.to_dict(), "agree": bool(self.agree)}

    @classmethod
    def from_dict(cls, d: Mapping) -> LossComparison:
        return cls(d[Column.samples_seen], LossReading.from_dict(d["eval"]), LossReading.from_dict(d["train_ema"]),
                   d["agree"])
