"""The schedule value types. Plain frozen dataclasses: cheap to build, hashable, cacheable.

Leaves: :class:`CronSchedule`, :class:`IntervalSchedule`, :class:`OneOffSchedule`. Wrappers,
which nest freely: :class:`BoundedSchedule` (start inclusive, end exclusive),
:class:`UnionSchedule` (several specs, one slot per instant) and :class:`ExcludingSchedule`
(dates of an exclusion calendar become skipped slots). Validated constructors that also
refuse schedules that never fire are in :mod:`.combine`; these types check only what makes
them meaningless (a naive instant, an end before the start, an empty union).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from .errors import ScheduleError
from .exclusions import ExclusionCalendar
from .zones import validate_timezone

DST_GAP_CHOICES = ("shift", "skip")
DST_REPEAT_CHOICES = ("first", "last", "both")

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def check_aware(value: datetime, name: str = "after") -> None:
    """A naive datetime here is a programming error, not user input."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise TypeError(f"{name} must be an aware datetime (got naive {value!r})")


@dataclass(frozen=True)
class CronSchedule:
    """A resolved 5-field cron expression evaluated on wall-clock time in ``timezone``."""

    expression: str
    timezone: str
    dst_gap: str = "shift"
    dst_repeat: str = "first"

    def __post_init__(self) -> None:
        if self.dst_gap not in DST_GAP_CHOICES:
            raise ScheduleError(f"dst_gap must be one of {', '.join(DST_GAP_CHOICES)}", "dst_gap")
        if self.dst_repeat not in DST_REPEAT_CHOICES:
            choices = ", ".join(DST_REPEAT_CHOICES)
            raise ScheduleError(f"dst_repeat must be one of {choices}", "dst_repeat")

    @property
    def fixed_time(self) -> bool:
        """Neither the minute nor the hour field contains ``*`` (the Debian/cronie rule; in
        the six-field form the same two fields decide, whatever the seconds field holds)."""
        text = self.expression.strip()
        fields = MACROS.get(text.lower(), text).split()
        if len(fields) == 6:
            fields = fields[1:]
        return len(fields) >= 2 and "*" not in fields[0] and "*" not in fields[1]


@dataclass(frozen=True)
class IntervalSchedule:
    """Fires at ``anchor + k * seconds`` for integer k: anchored, so it never drifts."""

    seconds: int
    anchor: datetime

    def __post_init__(self) -> None:
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, int):
            raise ScheduleError("interval_seconds must be a whole number", "interval_seconds")
        if self.seconds < 1:
            raise ScheduleError("interval_seconds must be at least 1", "interval_seconds")
        check_aware(self.anchor, "anchor")
        if self.anchor.tzinfo is not UTC:
            object.__setattr__(self, "anchor", self.anchor.astimezone(UTC))


def _utc(value: datetime, name: str) -> datetime:
    check_aware(value, name)
    return value if value.tzinfo is UTC else value.astimezone(UTC)


@dataclass(frozen=True)
class OneOffSchedule:
    """A single slot at ``at`` (aware UTC; see :func:`~.combine.one_off` for wall times).
    ``timezone`` is the zone it was given in, for words. ``skip_reason`` "dst": the wall
    time fell in a DST gap under dst_gap="skip", so its one slot is a skipped one."""

    at: datetime
    timezone: str = "UTC"
    skip_reason: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", _utc(self.at, "at"))
        validate_timezone(self.timezone)
        if self.skip_reason not in (None, "dst"):
            raise ScheduleError("a one-off's skip_reason must be None or 'dst'", "at")


@dataclass(frozen=True)
class BoundedSchedule:
    """The slots of ``schedule`` with ``start <= at < end``: start inclusive, end exclusive
    (so consecutive windows [a, b) and [b, c) share no slot). None: unbounded that side."""

    schedule: Schedule
    start: datetime | None = None
    end: datetime | None = None

    def __post_init__(self) -> None:
        check_schedule(self.schedule)
        if self.start is not None:
            object.__setattr__(self, "start", _utc(self.start, "start"))
        if self.end is not None:
            object.__setattr__(self, "end", _utc(self.end, "end"))
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise ScheduleError("end must be later than start", "end")


@dataclass(frozen=True)
class UnionSchedule:
    """Every slot of every part, in order; an instant two parts share is one slot, which
    fires if any part fires there (otherwise the first such part's skip reason stands)."""

    parts: tuple[Schedule, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.parts, tuple):
            object.__setattr__(self, "parts", tuple(self.parts))
        if not self.parts:
            raise ScheduleError("a union needs at least one schedule", "parts")
        for part in self.parts:
            check_schedule(part)


@dataclass(frozen=True)
class ExcludingSchedule:
    """The slots of ``schedule``; one whose local date in ``timezone`` is in ``calendar``
    becomes ``Slot(at, "excluded")`` (whatever reason it had: the day is excluded)."""

    schedule: Schedule
    calendar: ExclusionCalendar
    timezone: str

    def __post_init__(self) -> None:
        check_schedule(self.schedule)
        if not isinstance(self.calendar, ExclusionCalendar):
            raise TypeError(f"calendar must be an ExclusionCalendar, got {self.calendar!r}")
        validate_timezone(self.timezone)


Schedule = (
    CronSchedule
    | IntervalSchedule
    | OneOffSchedule
    | BoundedSchedule
    | UnionSchedule
    | ExcludingSchedule
)


def check_schedule(value: object) -> None:
    if not isinstance(value, Schedule):
        raise TypeError(f"not a schedule: {type(value).__name__}")


def schedule_timezone(schedule: Schedule) -> str | None:
    """The zone a schedule's local dates are naturally read in: a cron's or a one-off's
    zone; a wrapper's inner zone; a union's if all its zoned parts agree; else None."""
    if isinstance(schedule, CronSchedule | OneOffSchedule):
        return schedule.timezone
    if isinstance(schedule, IntervalSchedule):
        return None
    if isinstance(schedule, ExcludingSchedule):
        return schedule.timezone
    if isinstance(schedule, BoundedSchedule):
        return schedule_timezone(schedule.schedule)
    found = {schedule_timezone(part) for part in schedule.parts} - {None}
    return found.pop() if len(found) == 1 else None


@dataclass(frozen=True)
class Slot:
    """One scheduled instant. ``skip_reason`` None: fire at ``at``; "dst": a fixed-time slot
    that ``dst_gap="skip"`` drops (recorded as a skipped run at ``at``, where the gap starts);
    "excluded": its local date is in an exclusion calendar (recorded as a skipped run)."""

    at: datetime
    skip_reason: str | None = None
