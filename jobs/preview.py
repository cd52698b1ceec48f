"""What a schedule would do, before (or without) a job: its description and its next slots,
each marked as firing or skipped (a DST gap under `skip`, an excluded date) and flagged when
it falls on a day its zone changes its UTC offset. Used by the API's preview and the portal's
form, so that both show exactly what the leader will do."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

from .models import ExclusionCalendar
from .schedule_fields import calendar_value, schedule_of
from .schedule_input import validate_schedule
from .schedules import describe, jitter_seconds_for, next_slot_or_none
from .schedules.zones import transitions_between
from .validation import Errors, JobValidationError

PREVIEW_SEED = "preview"  # a job gets its own seed: its `H` values may differ
MAX_COUNT = 50


@dataclass(frozen=True)
class PreviewSlot:
    at: datetime  # aware, in the schedule's zone
    skip_reason: str | None
    dst_day: bool  # the zone changes its UTC offset on this local date


def preview(
    schedule: Any,
    *,
    now: datetime,
    start: datetime | None = None,
    count: int = 10,
    dst_gap: str = "shift",
    dst_repeat: str = "first",
    jitter_seconds: int = 0,
) -> dict:
    """{"description", "timezone", "slots": [PreviewSlot]} for a schedule in the job input
    shape; raises JobValidationError naming the bad field."""
    errors = Errors()
    parsed = validate_schedule(
        errors, schedule, seed=PREVIEW_SEED, dst_gap=dst_gap, dst_repeat=dst_repeat, now=now
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
        delay = jitter_seconds_for(PREVIEW_SEED, slot.at, jitter_seconds)
        local = (slot.at + timedelta(seconds=delay)).astimezone(zone)
        slots.append(PreviewSlot(local, slot.skip_reason, _dst_day(zone, local)))
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


def _dst_day(zone: ZoneInfo, local: datetime) -> bool:
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    lo = midnight.astimezone(UTC).replace(tzinfo=None)
    hi = (midnight + timedelta(days=1)).astimezone(UTC).replace(tzinfo=None)
    return bool(transitions_between(zone, lo, hi))
