"""A job's stored schedule fields -> a Schedule object of the pure schedule math.

One function for every place that turns job fields into a schedule (the leader's JobRow,
a Job instance): the first cron spec (or the interval, or the one-off instant), the other
cron specs as a union, the exclusion calendars, then the start/end bounds. Wrappers are
built directly (not through `bounded`/`excluding`, whose "does it ever fire" check scans
from 1900): the stored fields were checked when they were written.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime

from jobs.schedules import (
    BoundedSchedule,
    CronSchedule,
    ExcludingSchedule,
    ExclusionCalendar,
    IntervalSchedule,
    Schedule,
    UnionSchedule,
    one_off,
)


def schedule_of(job, calendars: Iterable[ExclusionCalendar] = ()) -> Schedule | None:
    """The schedule of anything with a job's schedule fields (a Job, the leader's JobRow);
    None for a job that runs on demand or as a dependency. `calendars`: the exclusion
    calendars attached to the job (values, see `calendar_value`)."""
    base = _base(job)
    if base is None:
        return None
    merged = merge_calendars(calendars)
    if merged is not None:
        base = ExcludingSchedule(base, merged, job.timezone)
    if job.start_at is not None or job.end_at is not None:
        base = BoundedSchedule(base, job.start_at, job.end_at)
    return base


def _base(job) -> Schedule | None:
    if job.schedule_kind == "cron":
        first = CronSchedule(job.cron_resolved, job.timezone, job.dst_gap, job.dst_repeat)
        extra = [
            CronSchedule(spec["resolved"], spec["timezone"], job.dst_gap, job.dst_repeat)
            for spec in job.extra_specs or ()
        ]
        return UnionSchedule((first, *extra)) if extra else first
    if job.schedule_kind == "interval" and job.interval_seconds and job.anchor_at is not None:
        return IntervalSchedule(job.interval_seconds, job.anchor_at)
    if job.schedule_kind == "at" and job.run_at_wall:
        repeat = job.dst_repeat if job.dst_repeat in ("first", "last") else "first"
        wall = datetime.fromisoformat(job.run_at_wall)
        return one_off(wall, job.timezone, dst_gap=job.dst_gap, dst_repeat=repeat)
    return None


def merge_calendars(calendars: Iterable[ExclusionCalendar]) -> ExclusionCalendar | None:
    """Several calendars as one (their dates together), or None without any."""
    calendars = sorted(calendars, key=lambda c: c.name)
    if not calendars:
        return None
    if len(calendars) == 1:
        return calendars[0]
    spans = tuple(span for calendar in calendars for span in calendar.spans)
    return ExclusionCalendar(" + ".join(c.name for c in calendars), spans)


def calendar_value(name: str, dates: Iterable[str], ranges: Iterable) -> ExclusionCalendar:
    """A stored calendar (ISO date strings) as the pure value."""
    spans = [(date.fromisoformat(d), date.fromisoformat(d)) for d in dates]
    spans += [(date.fromisoformat(a), date.fromisoformat(b)) for a, b in ranges]
    return ExclusionCalendar(name, tuple(spans))


def job_calendars(job) -> list[ExclusionCalendar]:
    """The calendars of a Job instance (one query, or none when prefetched)."""
    return [calendar_value(c.name, c.dates, c.ranges) for c in job.calendars.all()]
