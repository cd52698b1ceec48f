"""A job's stored schedule fields -> a Schedule object of the pure schedule math."""

from __future__ import annotations

from datetime import datetime

from jobs.schedules import CronSchedule, IntervalSchedule, Schedule


def schedule_from_fields(
    *,
    kind: str,
    cron_resolved: str,
    timezone: str,
    interval_seconds: int | None,
    anchor_at: datetime | None,
    dst_gap: str,
    dst_repeat: str,
) -> Schedule | None:
    if kind == "cron":
        return CronSchedule(cron_resolved, timezone, dst_gap, dst_repeat)
    if kind == "interval" and interval_seconds and anchor_at is not None:
        return IntervalSchedule(interval_seconds, anchor_at)
    return None
