"""Schedules in words, for the API and the dashboard.

cron-descriptor words plain expressions well, and the six-field form (seconds first). For
``L``, ``W`` and ``#`` it words single items right but garbles lists ("on the Monday and
Wednesday of the month" for ``1#2,3#1``, "on the first weekday" for ``1W,15W``, "day 1 and
L" for ``1,L``) and hides the OR of the two day fields (``13 * 5#2``). So expressions with
day rules get their day part in our own words; cron-descriptor still words the times and
the months. Nothing here raises: a description is cosmetic and never breaks a page.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import lru_cache

from cron_descriptor import ExpressionDescriptor

from . import days
from .cron import SPECS, compile_expression, field_items, split_fields
from .model import (
    BoundedSchedule,
    CronSchedule,
    ExcludingSchedule,
    IntervalSchedule,
    OneOffSchedule,
    Schedule,
    UnionSchedule,
    schedule_timezone,
)
from .zones import validate_timezone

_UNITS = ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second"))
_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_DOM_SPEC, _DOW_SPEC = SPECS[2], SPECS[4]


def _descriptor(expression: str) -> str:
    return ExpressionDescriptor(expression, use_24hour_time_format=True).get_description()


@lru_cache(maxsize=4096)
def cron_words(expression: str) -> str:
    """An expression in words (the expression itself if it cannot be described)."""
    try:
        if compile_expression(expression).ruled:
            return _ruled_words(split_fields(expression))
        return _descriptor(expression)
    except Exception:  # the describer is cosmetic: never let it break a page
        return expression


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _values_words(values: list[int], name: Callable[[int], str]) -> str:
    """Plain values in words: "Monday", "Monday through Friday", "day 1, 5 and 9"."""
    if len(values) > 2 and values == list(range(values[0], values[-1] + 1)):
        return f"{name(values[0])} through {name(values[-1])}"
    return _join([name(v) for v in values])


def _field_words(text: str, weekday: bool) -> list[str]:
    spec = _DOW_SPEC if weekday else _DOM_SPEC
    words = []
    for item in text.split(","):
        mask, rules = field_items(spec, item)
        words.extend(days.rule_words(rule) for rule in rules)
        values = [v for v in range(32) if mask >> v & 1]
        if values and weekday:
            words.append(_values_words(values, lambda v: _WEEKDAYS[v]))
        elif values:
            prefix = "day " if len(values) == 1 else "days "
            words.append(prefix + _values_words(values, str))
    return words


def _ruled_words(fields: list[str]) -> str:
    dom, month, dow = fields[-3:]
    matcher = compile_expression(" ".join(fields))
    time = _descriptor(" ".join([*fields[:-3], "*", "*", "*"]))
    parts = []
    if not matcher.dom_any:
        parts.append("on " + _join(_field_words(dom, weekday=False)))
    if not matcher.dow_any:
        parts.append("on " + _join(_field_words(dow, weekday=True)))
    words = f"{time}, {', or '.join(parts)}"
    if month != "*":
        months = _descriptor(f"0 0 * {month} *")
        words += months[len("At 00:00") :] if months.startswith("At 00:00,") else f", in {month}"
    return words


def interval_words(seconds: int) -> str:
    for size, unit in _UNITS:
        if seconds % size == 0:
            count = seconds // size
            return f"Every {unit}" if count == 1 else f"Every {count} {unit}s"
    raise AssertionError("unreachable: every integer is a multiple of 1")


def _local(at: datetime, zone_name: str | None) -> str:
    """An instant as local wall time with its offset: "2026-05-01 09:00+02:00"."""
    local = at.astimezone(validate_timezone(zone_name)) if zone_name else at
    text = local.isoformat(sep=" ", timespec="seconds" if local.second else "minutes")
    return text.replace("+00:00", " UTC") if not zone_name or zone_name == "UTC" else text


def describe(schedule: Schedule) -> str:
    """ "At 09:00, Monday through Friday (Europe/Berlin)", "Every 5 minutes", "Once at
    2026-05-01 09:00+02:00 (Europe/Berlin)"; wrappers add their bounds and calendars."""
    if isinstance(schedule, IntervalSchedule):
        return interval_words(schedule.seconds)
    if isinstance(schedule, CronSchedule):
        return f"{cron_words(schedule.expression)} ({schedule.timezone})"
    if isinstance(schedule, OneOffSchedule):
        skipped = ", skipped (in a DST gap)" if schedule.skip_reason else ""
        return f"Once at {_local(schedule.at, schedule.timezone)} ({schedule.timezone}){skipped}"
    if isinstance(schedule, BoundedSchedule):
        zone, words = schedule_timezone(schedule), describe(schedule.schedule)
        if schedule.start is not None:
            words += f", from {_local(schedule.start, zone)}"
        if schedule.end is not None:
            words += f", ending before {_local(schedule.end, zone)}"
        return words
    if isinstance(schedule, UnionSchedule):
        return "; ".join(describe(part) for part in schedule.parts)
    if isinstance(schedule, ExcludingSchedule):
        where = f"the dates of {schedule.calendar.name!r} ({schedule.timezone})"
        return f"{describe(schedule.schedule)}, except on {where}"
    raise TypeError(f"not a schedule: {type(schedule).__name__}")
