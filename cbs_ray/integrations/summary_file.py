"""Reading a cbs-ray ``summary.json`` into a schedule's arguments, trusting nothing in it.

A summary is a file a user may have edited, truncated or pointed at by mistake: every field is checked for its
type and range before it is used, and anything wrong is one ``ScheduleError`` naming the file and the field (no
``KeyError``, ``TypeError`` or silent truncation: ``8.5`` is refused, not read as 8, and ``"8"`` is refused, not
read as 8). The path must be a regular file of at most ``MAX_SUMMARY_BYTES``, checked on the open descriptor (a FIFO
or a device is never read, even one swapped in after a check). Three shapes are read:

- branch mode (``batch_size_schedule``, ``schedule_alpha``, ``trunk``: its ``peak_lr`` and ``warmup_steps``);
- a from-scratch search (``recommendation``: one stage at its ``batch_size``, ``alpha``, ``peak_lr``,
  ``warmup_samples`` or ``warmup_steps``);
- the ladder (``prediction``: branch mode's schedule, with its trunk's ``peak_lr`` and warmup, where one is
  carried as ``prediction.batch_size_schedule``, else the predicted ``batch_size`` as one stage).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Optional

from cbs_ray.integrations.errors import ScheduleError
from cbs_ray.records.bounded_file import read_regular_file

__all__ = ["MAX_SUMMARY_BYTES", "MAX_WHOLE", "schedule_arguments", "whole_number", "real_number"]

MAX_SUMMARY_BYTES = 64 * 2**20
"""The largest summary.json read (a branch summary with every branch's record is well under a megabyte)."""
MAX_WHOLE = 2**53
"""The largest sample count or batch accepted: beyond it a float no longer holds every whole number."""


def whole_number(value: Any, field: str, *, minimum: int = 0, where: str = "") -> int:
    """``value`` as an int when it is a whole number in [minimum, MAX_WHOLE] (an int, or a float with no
    fraction: JSON writes 16 and 16.0 alike); otherwise a ``ScheduleError`` naming ``field``."""
    ok = (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if not ok or not minimum <= value <= MAX_WHOLE:
        raise ScheduleError(f"{where}{field} must be a whole number from {minimum} to 2**53, got {value!r}")
    return int(value)


def real_number(value: Any, field: str, *, low: float = 0.0, high: float = 1e6, low_open: bool = False,
                where: str = "") -> float:
    """``value`` as a float when it is a finite number in [low, high] ((low, high] with ``low_open``)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (low < value if low_open else low <= value) or value > high:
        raise ScheduleError(f"{where}{field} must be a number in {'(' if low_open else '['}{low:g}, {high:g}], "
                            f"got {value!r}")
    return float(value)


def _read_json(path: Path) -> Any:
    """The JSON at ``path``, read through ``records.bounded_file.read_regular_file``: checked on the open
    descriptor, so a FIFO swapped in after a check never blocks the reader."""
    try:
        data = read_regular_file(path, MAX_SUMMARY_BYTES, what="a summary.json")
    except OSError as e:
        raise ScheduleError(f"cannot read a summary.json at {path}: {e.strerror or e}") from None
    except ValueError as e:
        if str(e) == "not a regular file":
            raise ScheduleError(f"{path} is not a regular file (a summary.json is)") from None
        size = str(e).split()[0]  # "<n> bytes, over the ..."
        raise ScheduleError(f"{path} holds {size} bytes, more than a summary.json's {MAX_SUMMARY_BYTES}") from None
    try:
        return json.loads(data.decode("utf-8"))  # Infinity and NaN read as floats, and refused by the field they sit in
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ScheduleError(f"cannot read {path} as JSON: {str(e)[:200] or type(e).__name__}") from None


def _section(summary: dict, key: str, where: str) -> Optional[dict]:
    value = summary.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ScheduleError(f"{where}{key} must be an object, got {type(value).__name__}")
    return value


def _stages(value: Any, field: str, where: str) -> list[tuple[int, int]]:
    if not isinstance(value, list) or not value:
        raise ScheduleError(f"{where}{field} must be a non-empty list of [start_samples, batch_size] pairs, "
                            f"got {type(value).__name__}")
    if len(value) > 10_000:
        raise ScheduleError(f"{where}{field} holds {len(value)} stages, more than 10000")
    pairs = []
    for i, pair in enumerate(value):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ScheduleError(f"{where}{field}[{i}] must be a [start_samples, batch_size] pair, got {pair!r:.80}")
        pairs.append((whole_number(pair[0], f"{field}[{i}][0] (start)", where=where),
                      whole_number(pair[1], f"{field}[{i}][1] (batch)", minimum=1, where=where)))
    return pairs


def _optional(section: dict, key: str, field: str, where: str, *, whole: bool = False, positive: bool = True):
    value = section.get(key)
    if value is None:
        return None
    if whole:
        return whole_number(value, field, minimum=1 if positive else 0, where=where)
    return real_number(value, field, low_open=positive, where=where)


def _warmup_samples(section: dict, field: str, batch: int, where: str) -> Optional[int]:
    """The warmup in samples: ``warmup_samples`` where written, else ``warmup_steps`` × ``batch``."""
    samples = _optional(section, "warmup_samples", f"{field}.warmup_samples", where, whole=True, positive=False)
    if samples is not None:
        return samples
    steps = _optional(section, "warmup_steps", f"{field}.warmup_steps", where, whole=True, positive=False)
    return None if steps is None else steps * batch


def _branch(summary: dict, where: str) -> dict:
    stages = _stages(summary["batch_size_schedule"], "batch_size_schedule", where)
    trunk = _section(summary, "trunk", where) or {}
    alpha = summary.get("schedule_alpha")
    return {"stages": stages, "alpha": 0.5 if alpha is None else real_number(alpha, "schedule_alpha", high=4.0,
                                                                             where=where),
            "peak_lr": _optional(trunk, "peak_lr", "trunk.peak_lr", where),
            "warmup_samples": _warmup_samples(trunk, "trunk", stages[0][1], where),
            "budget_samples": _optional(summary, "budget_samples", "budget_samples", where, whole=True)}


def _scratch(rec: dict, summary: dict, where: str) -> dict:
    if "batch_size" not in rec:
        raise ScheduleError(f"{where}recommendation has no batch_size")
    batch = whole_number(rec["batch_size"], "recommendation.batch_size", minimum=1, where=where)
    alpha = rec.get("alpha")
    budget = _optional(rec, "budget_samples", "recommendation.budget_samples", where, whole=True)
    return {"stages": [(0, batch)], "alpha": 0.5 if alpha is None else real_number(alpha, "recommendation.alpha",
                                                                                   high=4.0, where=where),
            "peak_lr": _optional(rec, "peak_lr", "recommendation.peak_lr", where),
            "warmup_samples": _warmup_samples(rec, "recommendation", batch, where),
            "budget_samples": budget if budget is not None else
            _optional(summary, "budget_samples", "budget_samples", where, whole=True)}


def _ladder(prediction: dict, where: str) -> dict:
    budget = _optional(prediction, "budget_samples", "prediction.budget_samples", where, whole=True)
    carried = prediction.get("batch_size_schedule")
    if carried is not None:  # branch mode's schedule for the same spec: {"batch_size_schedule", "alpha", ...}
        if not isinstance(carried, dict):
            raise ScheduleError(f"{where}prediction.batch_size_schedule must be an object, got "
                                f"{type(carried).__name__}")
        stages = _stages(carried.get("batch_size_schedule"), "prediction.batch_size_schedule.batch_size_schedule",
                         where)
        alpha = carried.get("alpha")
        return {"stages": stages, "budget_samples": budget,
                "peak_lr": _optional(carried, "peak_lr", "prediction.batch_size_schedule.peak_lr", where),
                "warmup_samples": _warmup_samples(carried, "prediction.batch_size_schedule", stages[0][1], where),
                "alpha": 0.5 if alpha is None else real_number(alpha, "prediction.batch_size_schedule.alpha",
                                                               high=4.0, where=where)}
    if prediction.get("batch_size") is None:
        raise ScheduleError(f"{where}prediction has no batch_size (the ladder refused: "
                            f"{str(prediction.get('refusal'))[:120]})")
    batch = whole_number(prediction["batch_size"], "prediction.batch_size", minimum=1, where=where)
    alpha = prediction.get("alpha")
    return {"stages": [(0, batch)], "budget_samples": budget,
            "alpha": 0.5 if alpha is None else real_number(alpha, "prediction.alpha", high=4.0, where=where),
            "peak_lr": _optional(prediction, "peak_lr", "prediction.peak_lr", where),
            "warmup_samples": _warmup_samples(prediction, "prediction", batch, where)}


def schedule_arguments(path) -> dict:
    """The keyword arguments of ``BatchSizeSchedule`` that a cbs-ray ``summary.json`` (a path to it or to its
    report folder) holds: ``stages``, ``alpha``, ``peak_lr``, ``warmup_samples``, ``budget_samples``,
    ``tokens_per_sample`` (module docstring: which shapes, and what is refused)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ScheduleError(f"from_summary takes the path of a summary.json or of its report folder, got "
                            f"{type(path).__name__} {path!r:.60}")
    path = Path(path)
    if path.is_dir():
        path = path / "summary.json"
    summary = _read_json(path)
    where = f"{path}: "
    if not isinstance(summary, dict):
        raise ScheduleError(f"{where}a summary.json holds a JSON object, got {type(summary).__name__}")
    tokens = _optional(summary, "tokens_per_sample", "tokens_per_sample", where, whole=True)
    if summary.get("batch_size_schedule") is not None:
        arguments = _branch(summary, where)
    elif (rec := _section(summary, "recommendation", where)) is not None:
        arguments = _scratch(rec, summary, where)
    elif (prediction := _section(summary, "prediction", where)) is not None:
        arguments = _ladder(prediction, where)
    else:
        raise ScheduleError(f"{path} holds neither a batch_size_schedule (branch mode), a recommendation (from "
                            "scratch) nor a prediction (the ladder)")
    return {**arguments, "tokens_per_sample": tokens}
