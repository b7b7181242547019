"""One tolerance: what "as good as the best" means, for the from-scratch search's turning point and
for branch mode's ε alike, and how a headline says it in the metric's own units.

``search.tolerance_unit``:

- ``auto`` (the default): a loss metric in nats (``eval_loss``, ``excess_loss``, or a ``compute_metrics`` key with
  ``loss`` in its name and mode min) takes an absolute tolerance in nats, 0.01 by default, the paper's ε (Merrill
  et al. 2025); any other metric (accuracy, BLEU, perplexity, F1) a relative one, 1 % of the best by default.
- ``nats``: absolute, in nats (a loss metric only).
- ``relative``: a fraction of the best (the earlier rule).

For a loss metric the turning point's ``search.tolerance`` and branch mode's ``branch.tolerance`` are one number in
one unit: either may be set, the other takes it; both set to different values is an error. Before the unit the
search read a loss to 1 % of itself (≈ 0.055 nats at a loss of 5.5) while branch mode read it to 0.01 nats, and
the two called the same batch free and not free. For other metrics branch mode's ε stays its own: branch mode
always compares losses.

An experiment recorded without ``tolerance_unit`` ran with a relative tolerance (``unit_of_record``). Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from cbs_ray.spec.errors import SpecError

__all__ = ["AUTO", "NATS", "RELATIVE", "DEFAULT_TOLERANCE", "Tolerance", "as_recorded", "is_loss_metric",
           "resolve_tolerances", "unit_of_record", "within_text"]

AUTO, NATS, RELATIVE = "auto", "nats", "relative"
DEFAULT_TOLERANCE = 0.01
"""0.01 in either unit: 0.01 nats (the paper's ε) or 1 % of the best."""
LOSS_METRICS = ("eval_loss", "excess_loss")
"""The built-in metrics that are a cross-entropy in nats (perplexity is exp of one: relative)."""


def is_loss_metric(metric: str, mode: str) -> bool:
    """Whether ``metric`` is a loss in nats: a built-in cross-entropy, or a key of the user's ``compute_metrics``
    with ``loss`` in its name that is minimised."""
    return mode == "min" and (metric in LOSS_METRICS or (metric != "perplexity" and "loss" in metric.lower()))


def within_text(value: float, unit: str, *, of: str = "the best") -> str:
    """The tolerance in the metric's units: "within 0.01 nats of the best", "within 1 % of the best"."""
    if unit == NATS:
        return f"within {value:g} nats of {of}"
    return f"within {value * 100:g} % of {of}"


def unit_of_record(recorded: Optional[str]) -> str:
    """The unit an experiment's metadata records; none recorded: relative (every experiment before the unit was
    recorded)."""
    return recorded if recorded in (NATS, RELATIVE) else RELATIVE


@dataclass(frozen=True)
class Tolerance:
    """A tolerance and its unit (``nats``: absolute; ``relative``: a fraction of the best)."""

    value: float
    unit: str

    @property
    def relative(self) -> bool:
        return self.unit == RELATIVE

    def in_metric_units(self, best: Optional[float]) -> Optional[float]:
        """The margin in the metric's units at ``best`` (a relative one needs a finite best, else None)."""
        if not self.relative:
            return self.value
        return self.value * abs(best) if best is not None and math.isfinite(best) else None

    def text(self, *, of: str = "the best") -> str:
        return within_text(self.value, self.unit, of=of)


def _search_unit(metric: str, mode: str, unit: str, branch_relative: bool, loss: bool) -> str:
    if unit == NATS and not loss:
        raise SpecError(f"search.tolerance_unit: nats needs a loss metric in nats (eval_loss, excess_loss, or a "
                        f"compute_metrics key with 'loss' in its name, mode min); {metric} (mode {mode}) is not "
                        f"one: use relative or auto")
    if loss and branch_relative and unit == NATS:
        raise SpecError("branch.tolerance_relative: true contradicts search.tolerance_unit: nats (one tolerance for "
                        "a loss metric); drop one")
    if unit == AUTO:
        return RELATIVE if (not loss or branch_relative) else NATS
    return unit


def resolve_tolerances(*, metric: str, mode: str, unit: str = AUTO, search_tolerance: Optional[float] = None,
                       branch_tolerance: Optional[float] = None,
                       branch_relative: bool = False) -> tuple[Tolerance, Tolerance]:
    """(the turning point's tolerance, branch mode's ε) from the spec's settings (None: not set); a ``SpecError``
    for ``nats`` on a metric that is no loss, or for a loss metric's two tolerances set apart (values or units)."""
    loss = is_loss_metric(metric, mode)
    resolved = _search_unit(metric, mode, unit, branch_relative, loss)
    if not loss:  # branch mode compares losses anyway: its ε keeps its own setting
        return (Tolerance(DEFAULT_TOLERANCE if search_tolerance is None else search_tolerance, resolved),
                Tolerance(DEFAULT_TOLERANCE if branch_tolerance is None else branch_tolerance,
                          RELATIVE if branch_relative else NATS))
    if search_tolerance is not None and branch_tolerance is not None \
            and not math.isclose(search_tolerance, branch_tolerance, rel_tol=1e-12, abs_tol=0.0):
        raise SpecError(f"search.tolerance {search_tolerance:g} and branch.tolerance {branch_tolerance:g}: a loss "
                        f"metric ({metric}) has one tolerance ({resolved}) for the turning point and branch mode's "
                        f"ε; set one of them, or both to the same value")
    value = next((t for t in (search_tolerance, branch_tolerance) if t is not None), DEFAULT_TOLERANCE)
    shared = Tolerance(value, resolved)
    return shared, shared


def as_recorded(raw_spec: dict, recorded_unit: Optional[str], loss_epsilon: bool) -> dict:
    """A stored spec (``cbs_spec.json``'s ``spec``) as its experiment ran, for ``--resume``: one written before
    the unit was recorded (no ``tolerance_unit``) read its turning point relative, and its branch mode's ε on its own,
    so a from-scratch (or ladder) spec gets ``tolerance_unit: relative`` and a branch spec (``loss_epsilon``: its
    method's answer reads ε, ``MethodEntry.loss_epsilon``) drops the turning point's tolerance it never used (the old
    spec wrote the default 0.01 out, which would otherwise contradict a ``branch.tolerance`` set apart). A spec that
    records its unit is returned as it is."""
    search = raw_spec.get("search")
    if recorded_unit is not None or not isinstance(search, dict) or "tolerance_unit" in search:
        return raw_spec
    if loss_epsilon:
        search = {k: v for k, v in search.items() if k != "tolerance"}
    else:
        search = {**search, "tolerance_unit": RELATIVE}
    return {**raw_spec, "search": search}
