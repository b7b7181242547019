"""The one error a bad spec raises: ``SpecError``, whose message names the field
(``training.budget_samples: must be ...``); the command lines print it in one line and exit 2.
"""

from __future__ import annotations

__all__ = ["SpecError"]


class SpecError(ValueError):
    """A spec that cannot run; the message names the offending field."""
