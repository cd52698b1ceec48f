"""Calendar changes and the slots a job has not had planned yet.

Defects: a change of a job's calendars (the calendar's dates, or which calendars the job
uses) moved its cursor to the first slot after now, so the slots it had missed (paused, no
leader, its tenant backing off) were never planned: no misfire decision, no `skipped` row,
silently lost. And one parked job made every update of a calendar it used fail (HTTP 500).
"""

from __future__ import annotations

from django.db import connection
from django_tenants.utils import schema_context

from core.clock import FakeClock
from jobs.calendars import calendar_create, calendar_update
from jobs.models import Job
from jobs.services import job_pause, job_resume, job_update
from runs import states

from .helpers import ACTOR, make_job, new_engine, runs_of, utc

HOURLY = {"cron": "0 * * * *", "timezone": "UTC"}
MADE_AT = utc(2026, 6, 1, 9, 5)
PAUSED_AT = utc(2026, 6, 1, 9, 10)  # the job's cursor: 10:00
EDITED_AT = utc(2026, 6, 1, 12, 20)
RESUMED_AT = utc(2026, 6, 1, 12, 30)


def _calendar(tenant, clock, **data) -> None:
    with schema_context(tenant.schema_name):
        calendar_create(tenant=tenant, actor=ACTOR, data=data, clock=clock)


def _set_dates(tenant, clock, name: str, dates: list[str]) -> None:
    with schema_context(tenant.schema_name):
        calendar_update(tenant=tenant, actor=ACTOR, name=name, data={"dates": dates}, clock=clock)


def _paused_hourly_job(tenant, clock, **schedule):
    job = make_job(tenant, clock, schedule={**HOURLY, **schedule}, misfire_policy="run_once")
    clock.set(PAUSED_AT)
    with schema_context(tenant.schema_name):
        job_pause(tenant=tenant, actor=ACTOR, job_id=job.id, clock=clock)
    return job


def _resume(tenant, clock, job) -> None:
    clock.set(RESUMED_AT)
    with schema_context(tenant.schema_name):
        job_resume(tenant=tenant, actor=ACTOR, job_id=job.id, clock=clock)


def _paused_in_the_office_calendar(tenant, redis_client):
    """An hourly job using calendar `office` (a December date), paused at 9:10; the clock at
    12:20, when the calendar changes."""
    clock = FakeClock(MADE_AT)
    _calendar(tenant, clock, name="office", dates=["2026-12-24"])
    job = _paused_hourly_job(tenant, clock, calendars=["office"])
    engine = new_engine(redis_client, clock)
    clock.set(EDITED_AT)
    return clock, job, engine


def _fates(tenant) -> list[tuple]:
    return [(r.scheduled_for.hour, r.status, r.skip_reason) for r in runs_of(tenant)]


def test_a_calendar_change_while_paused_leaves_the_missed_slots_to_the_misfire_policy(
    live, redis_client
):
    alpha = live["alpha"].tenant
    clock, job, engine = _paused_in_the_office_calendar(alpha, redis_client)
    _set_dates(alpha, clock, "office", ["2026-12-24", "2026-06-02"])  # tomorrow: no slot moves
    _resume(alpha, clock, job)
    engine.materialise()
    assert _fates(alpha) == [
        (10, states.SKIPPED, states.SKIP_PAUSED),
        (11, states.SKIPPED, states.SKIP_PAUSED),
        (12, states.SCHEDULED, ""),  # run_once: the latest missed slot runs, now
    ]
    assert runs_of(alpha, scheduled_for=utc(2026, 6, 1, 12))[0].due_at == RESUMED_AT


def test_missed_slots_on_a_date_the_change_excludes_are_recorded_excluded(live, redis_client):
    alpha = live["alpha"].tenant
    clock, job, engine = _paused_in_the_office_calendar(alpha, redis_client)
    _set_dates(alpha, clock, "office", ["2026-06-01"])  # today, with its missed slots
    _resume(alpha, clock, job)
    engine.materialise()
    assert _fates(alpha) == [(hour, states.SKIPPED, states.SKIP_EXCLUDED) for hour in (10, 11, 12)]


def test_a_job_edit_of_its_calendars_only_keeps_the_missed_slots(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(MADE_AT)
    _calendar(alpha, clock, name="office", dates=["2026-12-24"])
    job = _paused_hourly_job(alpha, clock)
    engine = new_engine(redis_client, clock)
    clock.set(EDITED_AT)
    with schema_context(alpha.schema_name):
        data = {"schedule": {**HOURLY, "calendars": ["office"]}}
        job_update(tenant=alpha, actor=ACTOR, job_id=job.id, data=data, clock=clock)
        assert Job.objects.get(id=job.id).next_run_at == utc(2026, 6, 1, 10)
    _resume(alpha, clock, job)
    engine.materialise()
    assert [fate[:2] for fate in _fates(alpha)] == [
        (10, states.SKIPPED),
        (11, states.SKIPPED),
        (12, states.SCHEDULED),
    ]


def test_a_parked_job_does_not_block_the_update_of_its_calendar(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(utc(2026, 6, 1, 8, 59, 45))
    _calendar(alpha, clock, name="office", dates=["2026-12-24"])
    daily = {"cron": "0 9 * * *", "timezone": "UTC", "calendars": ["office"]}
    good = make_job(alpha, clock, name="good", schedule=daily)
    bad = make_job(alpha, clock, name="bad", schedule=daily)
    with connection.cursor() as cursor:  # its zone gone, as after a tzdata update
        cursor.execute(
            f"UPDATE \"{alpha.schema_name}\".jobs_job SET timezone = 'Mars/Olympus' WHERE id = %s",
            [bad.id],
        )
    engine = new_engine(redis_client, clock)
    engine.materialise()  # parks `bad`, prepares `good`'s 09:00 run
    with schema_context(alpha.schema_name):
        assert Job.objects.get(id=bad.id).fault_code == "invalid_timezone"
    _set_dates(alpha, clock, "office", ["2026-06-01"])
    engine.materialise()
    [run] = runs_of(alpha)
    assert (run.job_id, run.status, run.skip_reason) == (
        good.id,
        states.SKIPPED,
        states.SKIP_EXCLUDED,
    )
