"""The one error the integrations raise for a schedule that cannot be trained or read as given."""

from __future__ import annotations

__all__ = ["ScheduleError"]


class ScheduleError(ValueError):
    """A schedule that cannot be trained as given, or a summary it cannot be read from (the message says which
    stage, file or field, and why)."""
