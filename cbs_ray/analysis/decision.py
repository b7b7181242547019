"""``decision`` in every summary.json: the batch to train the run at (and the schedule, where the method measured
one), its LR and warmup, for which budget, how sure, and what it rests on. What every method's rule writes and
builds it with lives here (``Decision``, its ``Evidence``, ``disagreeing``, the sentence, the next step's command);
each method's rule, which reads the one reading that answers "which batch for my run" and weighs the others against
it (``disagreeing``), lives in its folder:

* **from scratch**: the turning point, its cross-checks the tradeoff's B_crit, the 20 % rule and B_simple
  (``methods.scratch.decision``).
* **branch mode**: the schedule (``batch_size_schedule``), started at its first batch with the trunk's LR and
  warmup; its validation (``--validate-schedule``) is its test. A schedule found inferior to the small batch is
  not followed: the decision is the trunk's fixed batch (``methods.branch.decision``).
* **the ladder**: the prediction's recommended batch (the 90 % interval's low end, a power of two) with its LR and
  warmup; B_crit measured at the budget (``ladder.validate``), where there is one and it lies outside the interval
  by more than a grid step, is followed instead (the LR moved along ``ladder.alpha``'s rule;
  ``methods.ladder.decision``).

``confidence`` is one of ``CONFIDENCE``. A bound ("≥ 256", "≤ 8") or a refusal is a decision only with its next
step: ``next_step`` holds the command that answers it (``search_command``). Pure: no Ray, no pandas; the rules take
plain values.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

from cbs_ray.maths.critical_batch import agree_within, bound_interval
from cbs_ray.records.columns import Column

__all__ = ["CONFIDENCE", "RESOLVED", "UNRESOLVED", "DISAGREE", "LOWER_BOUND", "UPPER_BOUND", "REFUSED",
           "Evidence", "Decision", "disagreeing", "train_words", "with_sentence", "batch_grid", "search_command",
           "next_search_base", "NextSearch"]

RESOLVED = "resolved"
"""A value, its noise check passed (the turning point's verdict, the schedule's validation, the ladder's interval
and, where measured, its validation), and no cross-check disagrees."""
UNRESOLVED = "unresolved"
"""A value that no cross-check contradicts, but whose noise was not measured or not resolved, or a schedule not
validated: ``next_step`` says what would settle it."""
DISAGREE = "cross-checks disagree"
"""A value, and at least one other reading of the same question lies beyond its noise (``disagreements``)."""
LOWER_BOUND = "lower bound"
"""The answer is "≥ B": B costs no quality, a larger batch may not either; ``next_step`` searches past it."""
UPPER_BOUND = "upper bound"
"""The answer is "≤ B", B the smallest batch trained: ``next_step`` searches below it."""
REFUSED = "refused"
"""No reading answers (nothing determined, the ladder refused to predict): no batch; ``next_step`` measures it."""
CONFIDENCE = (RESOLVED, UNRESOLVED, DISAGREE, LOWER_BOUND, UPPER_BOUND, REFUSED)


@dataclass(frozen=True)
class Evidence:
    """One reading of the critical batch: its value, whether it is a bound, and its noise interval where it has one
    (``[low, high]``; ``high`` None: unbounded)."""

    reading: str
    batch_size: Optional[float]
    bound: Optional[str] = None
    interval: Optional[tuple[float, Optional[float]]] = None
    text: str = ""

    def allowed(self) -> Optional[tuple[float, float]]:
        """The batches it allows: its value (or bound's range) widened to its interval."""
        base = bound_interval(self.batch_size, self.bound)
        if base is None:
            return None
        if self.interval is None or self.interval[0] is None:
            return base
        high = math.inf if self.interval[1] is None else float(self.interval[1])
        return min(base[0], float(self.interval[0])), max(base[1], high)

    def to_dict(self) -> dict:
        return {"reading": self.reading, Column.batch_size: _plain(self.batch_size), "bound": self.bound,
                "interval": None if self.interval is None else [_plain(v) for v in self.interval], "text": self.text}

    @classmethod
    def from_dict(cls, d: Mapping) -> Evidence:
        interval = d.get("interval")
        return cls(d["reading"], d[Column.batch_size], d.get("bound"), tuple(interval) if interval else None,
                   d.get("text", ""))


def _plain(v):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else (
        int(v) if isinstance(v, float) and v.is_integer() else v)


def disagreeing(followed: Evidence, others: Sequence[Evidence]) -> list[Evidence]:
    """The readings in ``others`` beyond ``followed``'s noise: more than one grid step (a factor of 2) from every
    batch it allows, its interval included (``maths.critical_batch.agree_within`` on ``Evidence.allowed``). A
    reading with no value is not evidence either way."""
    anchor = followed.allowed()
    if anchor is None:
        return []
    return [o for o in others if (allowed := o.allowed()) is not None and not agree_within(anchor, allowed)]


@dataclass(frozen=True)
class Decision:
    """summary.json's ``decision``: what to train the run at, and why (module docstring)."""

    batch_size: Optional[int]
    """The batch to train at (a schedule's first batch); None where refused."""
    lr: Optional[float]
    """The peak LR at ``batch_size``."""
    warmup_samples: Optional[int]
    schedule: Optional[list[list[int]]]
    """``[start_samples, batch_size]`` pairs where the method measured a schedule (branch mode), else None."""
    for_budget_samples: int
    confidence: str
    """One of ``CONFIDENCE``."""
    because: str
    """Which reading it followed and why, and what the others say."""
    disagreements: list[Evidence] = field(default_factory=list)
    """The readings beyond the followed one's noise, with their values."""
    next_step: Optional[str] = None
    """The one command that settles a bound, a refusal or an unresolved answer; None where nothing needs it."""
    text: str = ""
    """The line the output and report.md open with."""

    def to_dict(self) -> dict:
        return {Column.batch_size: self.batch_size, Column.lr: self.lr, "warmup_samples": self.warmup_samples,
                "schedule": self.schedule, "for_budget_samples": self.for_budget_samples,
                "confidence": self.confidence, "because": self.because,
                "disagreements": [d.to_dict() for d in self.disagreements], "next_step": self.next_step,
                "text": self.text}

    @classmethod
    def from_dict(cls, d: Mapping) -> Decision:
        return cls(d[Column.batch_size], d[Column.lr], d["warmup_samples"], d["schedule"], d["for_budget_samples"],
                   d["confidence"], d["because"], [Evidence.from_dict(e) for e in d["disagreements"]],
                   d.get("next_step"), d.get("text", ""))


# ---- the next step as one command ----------------------------------------------------------------------

def batch_grid(low: int, high: int) -> list[int]:
    """The doubling grid from ``low`` to ``high`` (``high`` kept where the doublings step over it)."""
    out, b = [], max(1, int(low))
    while b < high:
        out.append(b)
        b *= 2
    return out + [int(high)]


NextSearch = tuple[Optional[str], tuple[str, ...]]
"""What a next search keeps of this one: its space file (None: the default space) and its ``--set`` overrides."""

DEFAULT_BASE: NextSearch = (None, ())
YOUR_SPACE = "<your space>"
"""The space a next search names where the experiment did not run the default model and data (the space file's
path is not recorded; the spec's model and data sections are what it holds)."""
KEPT_SECTIONS = ("training", "search", "resources", "asha")
"""The sections whose values a next search carries as ``--set`` wherever they differ from the default spec (its
budget, grid, metric, method, workers per trial, early stopping), whatever space it names."""
NOT_A_METHODS_SECTION = ("name", "tracking", "storage_path", "output_dir")
"""Sections that say where a search goes, not what it measures. Every other section outside ``KEPT_SECTIONS`` and
``MODEL_SECTIONS`` is a method's own (``branch``, ``ladder``: ``records.method_registry.MethodEntry.section``):
carried too, but only into a next search of the same method (``search_command``)."""
NOT_KEPT = {"search.seed", "resources.max_concurrent_trials", "resources.cpus_per_worker"}
"""Values that do not change what a search measures (the seed of its sampler, how many trials run at once)."""
MODEL_SECTIONS = ("task", "model", "data")
MAX_MODEL_SETS = 3
"""A model, data or task this many values from the default's is written as ``--set``s; past it, ``YOUR_SPACE``."""


def _leaves(d: Mapping, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _set_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_set_value(x) for x in v) + "]"
    return "null" if v is None else str(v)


def next_search_base(spec: Optional[Mapping], default: Mapping) -> NextSearch:
    """What a next search of this experiment keeps: the ``--set``s of its values that differ from the default spec
    in ``KEPT_SECTIONS`` and the methods' own sections (its budget, grid, metric, method, workers; ``search_command``
    keeps a method's section only for that method) and, where its model, data and task differ from the default's in
    at most ``MAX_MODEL_SETS`` values, those too; past that, ``YOUR_SPACE`` (its space file, whose path is not
    recorded, holds them) with the same ``--set``s, so that the budget a search ran at (``cbs-ray plan``'s D) is
    not lost where the space is not the default. A value recorded as None is left as the default's (an older
    spec's unset key). A spec that cannot be read: the default space. ``default``: the default spec as a stored one
    reads (lists, not tuples; ``report.reading.next_search_of`` loads it: the spec layer pulls in Ray's storage)."""
    if not isinstance(spec, Mapping):
        return DEFAULT_BASE

    def changed(sections: Sequence[str]) -> list[str]:
        out = []
        for section in sections:
            ours, theirs = (_leaves(v, f"{section}.") if isinstance(v, Mapping) else {section: v}
                            for v in (spec.get(section), default.get(section)))
            out += [f"{k}={_set_value(v)}" for k, v in ours.items()
                    if k not in NOT_KEPT and v is not None and (k not in theirs or theirs[k] != v)]
        return out

    model = changed(MODEL_SECTIONS)
    kept = changed(KEPT_SECTIONS + _methods_sections(spec))
    if len(model) > MAX_MODEL_SETS:
        return (YOUR_SPACE, tuple(kept))
    return (None, tuple(model + kept))


def _methods_sections(spec: Mapping) -> tuple[str, ...]:
    """The recorded spec's sections that are a method's own (``NOT_A_METHODS_SECTION``)."""
    return tuple(k for k, v in spec.items() if isinstance(v, Mapping) and k not in
                 (*KEPT_SECTIONS, *MODEL_SECTIONS, *NOT_A_METHODS_SECTION))


def _method_of(sets: Sequence[str]) -> Optional[str]:
    """The last ``search.method`` among ``sets`` (None: none is set)."""
    named = [s.split("=", 1)[1] for s in sets if s.split("=", 1)[0] == "search.method"]
    return named[-1] if named else None


def search_command(base: NextSearch, *sets: str, flags: Sequence[str] = ()) -> str:
    """``cbs-ray search [--space SPACE] [--set KEY=VALUE ...] [FLAGS]``: ``base`` (``next_search_base``) with
    ``sets`` over it (a key in both takes ``sets``' value); the base's values of a method's own section
    (``NOT_A_METHODS_SECTION``) left out where ``sets`` switch to another method."""
    space, kept = base
    keys = {s.split("=", 1)[0] for s in sets}
    switched = _method_of(sets) not in (None, _method_of(kept))
    own = (*KEPT_SECTIONS, *MODEL_SECTIONS)
    kept = tuple(k for k in kept if k.split("=", 1)[0] not in keys
                 and not (switched and k.split(".", 1)[0] not in own))
    parts = ["cbs-ray search"] + ([f"--space {space}"] if space else [])
    parts += [f"--set {s}" for s in [*kept, *sets]] + list(flags)
    return " ".join(parts)


def _sentence(decision_words: str, d: Decision) -> str:
    """``Decision: train at batch 128, lr 0.00232, warmup 128 samples, for 7168 samples (resolved; ...)``."""
    how = [d.confidence]
    if d.disagreements:
        how.append("differs: " + ", ".join(e.text or e.reading for e in d.disagreements))
    if d.next_step:
        how.append(f"next: {d.next_step}")
    return f"Decision: {decision_words} ({'; '.join(how)})"


def train_words(batch: int, lr: Optional[float], warmup: Optional[int], budget: int,
                schedule: Optional[list[list[int]]] = None, per_doubling: Optional[float] = None) -> str:
    """What to train, in words: "train at batch 128, lr 0.00232, warmup 128 samples, for 7168 samples" (a schedule's
    steps where it has more than one)."""
    lr_text = f", lr {lr:.3g}" if lr is not None else ""
    warm = f", warmup {warmup} samples" if warmup is not None else ""
    if schedule and len(schedule) > 1:
        steps = ", then ".join(f"{b} from {s}" for s, b in schedule)
        grow = f" (× {per_doubling:.3g} per doubling)" if per_doubling is not None else ""
        return (f"train with the batch schedule {steps} samples{lr_text} at batch {batch}{grow}{warm}, for {budget} "
                f"samples")
    return f"train at batch {batch}{lr_text}{warm}, for {budget} samples"


def with_sentence(d: Decision, words: str) -> Decision:
    """``d`` with its ``text``: "Decision: <words> (<confidence>; differs: ...; next: ...)"."""
    return replace(d, text=_sentence(words, d))
