"""Validated constructors for the wrapper schedules: one-off, bounded, union, excluding.

Like :func:`~.cron.parse_cron` for cron, these refuse what can never fire (a window in which
the schedule has no firing slot, a calendar that excludes every slot), with a ScheduleError
naming the field. The value types in :mod:`.model` can be built directly from stored,
already validated values without these checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from . import zones
from .errors import ScheduleError
from .exclusions import ExclusionCalendar
from .fire import next_fire_or_none
from .model import (
    DST_GAP_CHOICES,
    BoundedSchedule,
    ExcludingSchedule,
    OneOffSchedule,
    Schedule,
    UnionSchedule,
    check_aware,
    check_schedule,
    schedule_timezone,
)

ONE_OFF_REPEAT_CHOICES = ("first", "last")
# "ever fires" is asked from here on: before any job of this service, early enough that the
# zone tables still hold real offsets (the transition scan covers years 2..9997)
ORIGIN = datetime(1900, 1, 1, tzinfo=UTC)


def _check_fires(schedule: Schedule, field: str, message: str) -> None:
    if next_fire_or_none(schedule, ORIGIN) is None:
        raise ScheduleError(message, field)


def resolve_wall(
    zone_name: str, wall: datetime, dst_gap: str = "shift", dst_repeat: str = "first"
) -> tuple[datetime, str | None]:
    """A naive wall time in a zone -> (aware UTC instant, skip reason), by the DST policy of
    a fixed-time job: a time in a gap moves to the transition instant (``skip``: and is a
    "dst" skip), a repeated time takes its first occurrence (or its last)."""
    zone = zones.validate_timezone(zone_name)
    offset0 = wall.replace(tzinfo=zone, fold=0).utcoffset()
    offset1 = wall.replace(tzinfo=zone, fold=1).utcoffset()
    if offset0 == offset1:
        return (wall - offset0).replace(tzinfo=UTC), None
    if offset0 > offset1:  # repeated: fold=0 is the first occurrence
        instant = wall - (offset0 if dst_repeat == "first" else offset1)
        return instant.replace(tzinfo=UTC), None
    moved = zones.transition_in(zone, wall - offset1, wall - offset0)  # a gap
    return moved.replace(tzinfo=UTC), None if dst_gap == "shift" else "dst"


def one_off(
    when: datetime, timezone: str = "UTC", *, dst_gap: str = "shift", dst_repeat: str = "first"
) -> OneOffSchedule:
    """A schedule with a single slot. ``when`` naive: a wall time in ``timezone``, resolved by
    :func:`resolve_wall` (``dst_repeat`` "first" or "last": a one-off fires once); ``when``
    aware: that instant (``timezone`` is then only for words)."""
    zones.validate_timezone(timezone)
    if dst_gap not in DST_GAP_CHOICES:
        raise ScheduleError(f"dst_gap must be one of {', '.join(DST_GAP_CHOICES)}", "dst_gap")
    if dst_repeat not in ONE_OFF_REPEAT_CHOICES:
        raise ScheduleError("a one-off fires once: dst_repeat must be first or last", "dst_repeat")
    if not isinstance(when, datetime):
        raise TypeError(f"when must be a datetime, got {type(when).__name__}")
    if when.tzinfo is not None:
        check_aware(when, "when")
        return OneOffSchedule(when, timezone)
    at, reason = resolve_wall(timezone, when, dst_gap, dst_repeat)
    return OneOffSchedule(at, timezone, reason)


def bounded(
    schedule: Schedule, *, start: datetime | None = None, end: datetime | None = None
) -> BoundedSchedule:
    """``schedule``'s slots with start <= at < end (start inclusive, end exclusive; None:
    unbounded). Refused when no slot in that window fires."""
    result = BoundedSchedule(schedule, start, end)
    field = "end" if end is not None else "start"
    _check_fires(result, field, "the schedule has no slot to fire between start and end")
    return result


def union(parts: Iterable[Schedule]) -> UnionSchedule:
    """Several schedules as one; nested unions are flattened and repeated parts dropped
    (their slots are the same), keeping the first-given order (it decides which skip
    reason stands when parts skip at the same instant and none fires)."""
    flat: list[Schedule] = []
    for part in parts:
        check_schedule(part)
        flat.extend(part.parts if isinstance(part, UnionSchedule) else (part,))
    return UnionSchedule(tuple(dict.fromkeys(flat)))


def excluding(
    schedule: Schedule, calendar: ExclusionCalendar, *, timezone: str | None = None
) -> ExcludingSchedule:
    """``schedule`` with the slots on the calendar's dates skipped ("excluded"). Dates are
    local dates in ``timezone``, by default the schedule's own zone (which an interval, or
    a union of parts in several zones, does not have: then give it). To read each part of
    a union in its own zone, wrap the parts instead: ``union([excluding(a, c), ...])``."""
    zone = timezone if timezone is not None else schedule_timezone(schedule)
    if zone is None:
        raise ScheduleError(
            "give the time zone whose local dates the exclusion calendar names", "timezone"
        )
    result = ExcludingSchedule(schedule, calendar, zone)
    _check_fires(result, "calendar", "the exclusion calendar excludes every slot to fire")
    return result
