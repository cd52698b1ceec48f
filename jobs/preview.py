"""What a schedule would do, before (or while) it is saved, so that the API, the portal's
live preview and the leader agree: `schedule_preview` for one cron expression or interval
(the API's `GET /schedule/preview`, the portal's form), `preview` for any schedule in the
job input shape (several specs, one-offs, start/end, exclusion calendars: the API's
`POST /schedule/preview`), each slot marked firing or skipped and noted on a DST day.

`H` fields resolve with `seed`: the fixed "preview" for a job not created yet (a new job
gets its own seed, so its `H` values may differ), the job's own seed when editing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings

from .models import ExclusionCalendar
from .schedule_fields import calendar_value, schedule_of
from .schedule_input import validate_schedule
from .schedules import (
    Schedule,
    describe,
    interval_schedule,
    jitter_seconds_for,
    next_fire_or_none,
    next_slot_or_none,
    parse_cron,
)
from .schedules.zones import transitions_between
from .validation import Errors, JobValidationError

PREVIEW_SEED = "preview"
MAX_COUNT = 50


@dataclass(frozen=True)
class PreviewSlot:
    at: datetime  # in the schedule's zone
    dst_note: str = ""  # "" or what the zone's clocks do on that local date
    skip_reason: str | None = None  # None: fires; "dst", "excluded": recorded as skipped

    @property
    def dst_day(self) -> bool:
        return bool(self.dst_note)


@dataclass(frozen=True)
class Preview:
    description: str
    zone: str
    slots: list[PreviewSlot]

    @property
    def times(self) -> list[datetime]:
        return [slot.at for slot in self.slots]


def preview_schedule(
    *,
    cron: str | None = None,
    timezone: str = "UTC",
    interval_seconds: int | None = None,
    start: datetime,
    dst_gap: str = "shift",
    dst_repeat: str = "first",
    seed: str = PREVIEW_SEED,
) -> tuple[Schedule, ZoneInfo]:
    """The schedule a cron expression (in `timezone`) or an interval anchored at `start`
    describes; ScheduleError (naming its field) when it is invalid."""
    minimum = settings.SCHEDULER_MIN_INTERVAL_SECONDS
    if cron is not None:  # six fields (seconds) only as POST /jobs takes them: the minimum
        schedule = parse_cron(
            cron,
            timezone=timezone,
            seed=seed,
            dst_gap=dst_gap,
            dst_repeat=dst_repeat,
            minimum_interval_seconds=minimum,
        )
        return schedule, ZoneInfo(schedule.timezone)
    anchor = start.replace(microsecond=0)
    return interval_schedule(interval_seconds, anchor=anchor, minimum_seconds=minimum), ZoneInfo(
        "UTC"
    )


def fire_times(schedule: Schedule, start: datetime, count: int) -> list[datetime]:
    """The next `count` firing instants after `start`, fewer when the schedule ends first (a
    one-off, an `end`): what remains, never ScheduleEnded."""
    times, after = [], start
    for _ in range(count):
        found = next_fire_or_none(schedule, after)
        if found is None:
            break
        times.append(found)
        after = found
    return times


def dst_note(zone: ZoneInfo, local: datetime) -> str:
    """What the zone's clocks do on `local`'s date: "" on an ordinary day."""
    midnight = datetime(local.year, local.month, local.day, tzinfo=zone)
    lo = midnight.astimezone(UTC).replace(tzinfo=None)
    hi = (midnight + timedelta(days=1, hours=3)).astimezone(UTC).replace(tzinfo=None)
    for instant, before, after in transitions_between(zone, lo, hi):
        wall = instant.replace(tzinfo=UTC).astimezone(zone)
        if wall.date() != local.date() and (wall - timedelta(seconds=1)).date() != local.date():
            continue
        shift = int(abs((after - before).total_seconds()) // 60)
        direction = "forward" if after > before else "back"
        return f"DST: clocks go {direction} {shift} min at {wall:%H:%M}"
    return ""


def schedule_preview(
    *,
    cron: str | None = None,
    timezone: str = "UTC",
    interval_seconds: int | None = None,
    start: datetime,
    count: int = 10,
    dst_gap: str = "shift",
    dst_repeat: str = "first",
    seed: str = PREVIEW_SEED,
) -> Preview:
    """The schedule in words and its next `count` fire times after `start`, each in the
    schedule's zone with a note on days the zone's UTC offset changes. Raises
    ScheduleError (its `field` names what is wrong) or OverflowError (past year 9999)."""
    schedule, zone = preview_schedule(
        cron=cron,
        timezone=timezone,
        interval_seconds=interval_seconds,
        start=start,
        dst_gap=dst_gap,
        dst_repeat=dst_repeat,
        seed=seed,
    )
    times = fire_times(schedule, start, count)
    slots = []
    for at in times:
        local = at.astimezone(zone)
        slots.append(PreviewSlot(local, dst_note(zone, local) if cron is not None else ""))
    return Preview(describe(schedule), zone.key, slots)


def preview(
    schedule: Any,
    *,
    now: datetime,
    start: datetime | None = None,
    count: int = 10,
    dst_gap: str = "shift",
    dst_repeat: str = "first",
    jitter_seconds: int = 0,
    seed: str = PREVIEW_SEED,
) -> dict:
    """{"description", "timezone", "slots": [PreviewSlot]} for a schedule in the job input
    shape; raises JobValidationError naming the bad field. `seed`: the job's own when
    editing it (its `H` values and jitter)."""
    errors = Errors()
    parsed = validate_schedule(
        errors, schedule, seed=seed, dst_gap=dst_gap, dst_repeat=dst_repeat, now=now
    )
    errors.raise_if_any()
    if parsed.fields.get("schedule_kind") == "none":
        raise JobValidationError({"schedule": ["give a schedule to preview"]})
    calendars = _calendars(parsed.calendars or [])
    job = SimpleNamespace(dst_gap=dst_gap, dst_repeat=dst_repeat, **parsed.fields)
    resolved = schedule_of(job, calendars)
    zone = ZoneInfo(job.timezone if job.schedule_kind != "interval" else "UTC")
    slots, after = [], start or now
    for _ in range(min(count, MAX_COUNT)):
        slot = next_slot_or_none(resolved, after)
        if slot is None:
            break
        delay = jitter_seconds_for(seed, slot.at, jitter_seconds)
        local = (slot.at + timedelta(seconds=delay)).astimezone(zone)
        slots.append(PreviewSlot(local, dst_note(zone, local), slot.skip_reason))
        after = slot.at
    return {"description": describe(resolved), "timezone": str(zone), "slots": slots}


def _calendars(names: list[str]) -> list:
    rows = {c.name: c for c in ExclusionCalendar.objects.filter(name__in=names)}
    missing = [n for n in names if n not in rows]
    if missing:
        raise JobValidationError(
            {"schedule.calendars": [f"no such calendar: {', '.join(missing)}"]}
        )
    return [calendar_value(c.name, c.dates, c.ranges) for c in rows.values()]
