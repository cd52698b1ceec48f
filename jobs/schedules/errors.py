"""The exception the schedule package raises for bad input, and the "no more slots" signal."""

from __future__ import annotations

from datetime import datetime

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
    "start",
    "end",
    "at",
    "parts",
    "calendar",
)


class ScheduleError(ValueError):
    """Invalid schedule input. ``.field`` is the name of what is wrong, ``.message`` says why."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field

    def __repr__(self) -> str:
        return f"ScheduleError({self.message!r}, field={self.field!r})"


class ScheduleEnded(Exception):  # a signal, like StopIteration: hence no "Error" in the name
    """A bounded or one-off schedule has no slot after ``after`` (from :func:`next_slot`), or
    no firing slot (from :func:`next_fire`). Not a ScheduleError: the schedule is valid, it
    is over. ``next_slot_or_none`` and ``next_fire_or_none`` return None instead."""

    def __init__(self, after: datetime, what: str = "slot"):
        super().__init__(f"the schedule has no {what} after {after.isoformat()}")
        self.after = after
