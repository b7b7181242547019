"""How a reading at the edge of the measured batch sizes is written: "64", "≥ 128" (a lower bound: no drop seen up
to it), "≤ 8" (an upper bound: the drop comes right after it), or "not determined" (``maths.critical_batch``'s
``LOWER`` and ``UPPER``, as ``edge_bound`` sets them). Every method's headline writes its readings so.
"""

from __future__ import annotations

from typing import Optional

from cbs_ray.maths.critical_batch import LOWER, UPPER

__all__ = ["bound_text"]


def bound_text(value, bound: Optional[str], fmt: str = "{}") -> str:
    """A reading as the report writes it: "64", "≥ 128", "≤ 8", or "not determined"."""
    if value is None:
        return "not determined"
    return {LOWER: "≥ ", UPPER: "≤ "}.get(bound or "", "") + fmt.format(value)
