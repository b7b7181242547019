"""What every search returns (``run_search``, ``resume_search``, whatever ``search.method``): one
``SearchResult`` with the headline's answer, the method's typed summary (its payload: the type its folder defines,
written and read there), the history and where everything is on disk, and each built-in method's best-known readings
as properties read off that summary by name (no other attribute is forwarded to it). This module names no method's
type: the methods sit above it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from cbs_ray.report.reading import Reading
from cbs_ray.spec.schema import SearchSpec

if TYPE_CHECKING:  # a type only
    import pandas as pd

__all__ = ["SearchResult"]


@dataclass
class SearchResult:
    """What a search produced: the answer, the summary, the history, and where everything is on disk.

    ``answer`` is the critical batch the report stands behind, with its bound: from scratch an
    ``methods.scratch.summary.Answer`` (``answer.batch_size``; ``answer.bound`` "upper": the critical batch is at
    most ``batch_size``, "≤ 8", the drop comes right after the smallest batch measured; "lower": at least, "≥ 128",
    no drop seen up to the largest; None: a value; ``answer.resolved``, whether the noise lets the tolerance be
    told apart; ``answer.text``, the headline's line); in branch mode the critical batch at the latest checkpoint
    read, and for the ladder the recommended batch at the full budget (a ``report.reading.MethodAnswer``:
    ``batch_size``, ``bound``, ``text``). ``summary`` is the method's typed summary (summary.json is its
    ``to_json``). ``critical_batch`` is ``answer.batch_size`` alone: read it with ``answer.bound``, since 8 may
    mean "≤ 8"."""

    spec: SearchSpec
    reading: Reading
    experiment_path: str
    report_dir: Path

    @property
    def method(self) -> str:
        return self.spec.search.method

    @property
    def summary(self) -> Any:
        """The method's own summary (its folder's type; summary.json is its ``to_json``)."""
        return self.reading.summary

    @property
    def history(self) -> pd.DataFrame:
        return self.reading.history

    @property
    def answer(self):
        return self.reading.answer

    @property
    def decision(self):
        """What to train the run at, and why (``analysis.decision.Decision``: summary.json's ``decision``, every
        method); None for a summary without one."""
        return getattr(self.summary, "decision", None)

    @property
    def output_dir(self) -> Path:
        """``report_dir``, by its earlier name."""
        return self.report_dir

    def to_json(self) -> str:
        """summary.json: the method's summary (``summary.to_json()``)."""
        return self.reading.to_json()

    @property
    def critical_batch(self) -> Optional[int]:
        """The critical batch's number, without its bound: ``answer.batch_size`` (see ``answer.bound``)."""
        return self.answer.batch_size if self.answer is not None else None

    # ---- from scratch ----------------------------------------------------------------------------------
    @property
    def trials(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(getattr(self.summary, "trials", []))

    @property
    def per_batch(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(getattr(self.summary, "per_batch", []))

    @property
    def pareto(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(getattr(self.summary, "pareto", []))

    # ---- branch mode ------------------------------------------------------------------------------------
    @property
    def critical_batch_over_training(self) -> tuple[Any, ...]:
        """Branch mode's CBS(t), one typed point per checkpoint (summary.json's ``critical_batch_over_training``)."""
        return self.summary.critical_batch_over_training

    @property
    def batch_size_schedule(self) -> list[list[int]]:
        """Branch mode's recommended ``[start_samples, batch_size]`` pairs."""
        return self.summary.batch_size_schedule

    @property
    def schedule_experiment_path(self) -> Optional[str]:
        return self.reading.extras.get("schedule_experiment_path")

    # ---- the ladder -------------------------------------------------------------------------------------
    @property
    def prediction(self) -> Any:
        """The ladder's prediction at the full budget (its ``to_dict()``: summary.json's ``prediction``)."""
        return self.summary.prediction

    @property
    def ladder(self) -> Any:
        """The ladder's rungs and fits (its ``to_dict()``: summary.json's ``ladder``)."""
        return self.summary.ladder
