"""A job's stored schedule fields -> a Schedule object of the pure schedule math."""

from __future__ import annotations

from jobs.schedules import CronSchedule, IntervalSchedule, Schedule


def schedule_of(job) -> Schedule | None:
    """The schedule of anything with a job's schedule fields (a Job, the leader's JobRow);
    None for a job that runs on demand or as a dependency."""
    if job.schedule_kind == "cron":
        return CronSchedule(job.cron_resolved, job.timezone, job.dst_gap, job.dst_repeat)
    if job.schedule_kind == "interval" and job.interval_seconds and job.anchor_at is not None:
        return IntervalSchedule(job.interval_seconds, job.anchor_at)
    return None
