"""What every method's summary writes into summary.json: values made JSON-ready in one way (``json_clean``),
shared by the methods' summaries so that none imports another's."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["json_clean"]


def json_clean(value):
    """JSON-ready: numpy scalars as Python ones, NaN/inf as None, dataclasses through their ``to_dict``."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [json_clean(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_clean(v) for k, v in value.items()}
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value
