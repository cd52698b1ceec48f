"""Interval schedules: fire at anchor + k * seconds (integer k), so they never drift."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from .errors import ScheduleError
from .model import IntervalSchedule, check_aware

MAX_INTERVAL_SECONDS = 366 * 24 * 3600


def interval_schedule(seconds: int, *, anchor: datetime, minimum_seconds: int) -> IntervalSchedule:
    """Validate and build an interval schedule (anchor converted to aware UTC)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise ScheduleError("interval_seconds must be a whole number", "interval_seconds")
    minimum = max(1, minimum_seconds)
    if seconds < minimum:
        raise ScheduleError(
            f"interval_seconds must be at least {minimum} (got {seconds})", "interval_seconds"
        )
    if seconds > MAX_INTERVAL_SECONDS:
        raise ScheduleError(
            f"interval_seconds must be at most {MAX_INTERVAL_SECONDS} (366 days), got {seconds}",
            "interval_seconds",
        )
    check_aware(anchor, "anchor")
    return IntervalSchedule(seconds, anchor.astimezone(UTC))


def next_interval(schedule: IntervalSchedule, after: datetime) -> datetime:
    """The first anchor + k * seconds strictly after the naive UTC instant ``after``.

    Exact integer arithmetic on timedeltas (microseconds): no accumulated rounding."""
    anchor = schedule.anchor.replace(tzinfo=None)
    period = timedelta(seconds=schedule.seconds)
    periods = (after - anchor) // period + 1
    return anchor + periods * period
