"""The one exception the schedule package raises for bad input."""

from __future__ import annotations

SCHEDULE_FIELDS = (
    "cron",
    "second",
    "minute",
    "hour",
    "day_of_month",
    "month",
    "day_of_week",
    "timezone",
    "interval_seconds",
    "dst_gap",
    "dst_repeat",
    "jitter_seconds",
)


class ScheduleError(ValueError):
    """Invalid schedule input. ``.field`` is the name of what is wrong, ``.message`` says why."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field

    def __repr__(self) -> str:
        return f"ScheduleError({self.message!r}, field={self.field!r})"
