"""The schedule value types. Plain frozen dataclasses: cheap to build, hashable, cacheable."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from .errors import ScheduleError

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


Schedule = CronSchedule | IntervalSchedule


@dataclass(frozen=True)
class Slot:
    """One scheduled instant. ``skip_reason`` None: fire at ``at``; "dst": a fixed-time slot
    that ``dst_gap="skip"`` drops (recorded as a skipped run at ``at``, where the gap starts)."""

    at: datetime
    skip_reason: str | None = None
