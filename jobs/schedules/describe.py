"""Schedules in words, for the API and the dashboard."""

from __future__ import annotations

from functools import lru_cache

from cron_descriptor import ExpressionDescriptor

from .model import CronSchedule, IntervalSchedule, Schedule

_UNITS = ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second"))


@lru_cache(maxsize=4096)
def _cron_words(expression: str) -> str:
    try:
        return ExpressionDescriptor(expression, use_24hour_time_format=True).get_description()
    except Exception:  # the describer is cosmetic: never let it break a page
        return expression


def interval_words(seconds: int) -> str:
    for size, unit in _UNITS:
        if seconds % size == 0:
            count = seconds // size
            return f"Every {unit}" if count == 1 else f"Every {count} {unit}s"
    raise AssertionError("unreachable: every integer is a multiple of 1")


def describe(schedule: Schedule) -> str:
    """ "At 09:00, Monday through Friday (Europe/Berlin)", "Every 5 minutes"."""
    if isinstance(schedule, IntervalSchedule):
        return interval_words(schedule.seconds)
    if isinstance(schedule, CronSchedule):
        return f"{_cron_words(schedule.expression)} ({schedule.timezone})"
    raise TypeError(f"not a schedule: {type(schedule).__name__}")
