"""Edits that land between a jittered run's slot and its due time.

Defect: an edit chose the prepared runs to bring in line by their slot (`scheduled_for`
after now), so a run whose slot had passed but whose jitter made it due later was left as
it was: a 09:00 run due at 09:08 fired at 09:08 although an edit at 09:01 had removed the
job's schedule, or excluded the day.
"""

from __future__ import annotations

from datetime import timedelta

from django_tenants.utils import schema_context

from core.clock import FakeClock
from jobs.calendars import calendar_create, calendar_update
from jobs.models import Job
from jobs.schedules.jitter import jitter_seconds_for
from jobs.services import job_update
from runs import states

from .helpers import ACTOR, make_job, new_engine, runs_of, utc

SLOT = utc(2026, 6, 1, 9, 0)
JITTER = 600
EDIT_AT = utc(2026, 6, 1, 9, 1)  # the slot has passed, its run is not due yet


def _seed_due_late() -> str:
    """A seed whose jitter puts the run of SLOT well after the edit."""
    return next(s for s in map(str, range(1000)) if jitter_seconds_for(s, SLOT, JITTER) >= 180)


def _prepared(tenant, clock, engine):
    """A daily 09:00 job with a jitter, its 09:00 run prepared (due a few minutes later)."""
    with schema_context(tenant.schema_name):
        calendar_create(
            tenant=tenant, actor=ACTOR, data={"name": "office", "dates": []}, clock=clock
        )
    job = make_job(
        tenant,
        clock,
        schedule={"cron": "0 9 * * *", "timezone": "UTC", "calendars": ["office"]},
        jitter_seconds=JITTER,
    )
    with schema_context(tenant.schema_name):
        Job.objects.filter(id=job.id).update(hash_seed=_seed_due_late())
    engine.materialise()
    [run] = runs_of(tenant)
    assert run.status == states.SCHEDULED and run.due_at > EDIT_AT + timedelta(minutes=1)
    clock.set(EDIT_AT)
    return job, run


def _edit_job(tenant, clock, job, data) -> None:
    with schema_context(tenant.schema_name):
        job_update(tenant=tenant, actor=ACTOR, job_id=job.id, data=data, clock=clock)


def _set_office_dates(tenant, clock, dates: list[str]) -> None:
    with schema_context(tenant.schema_name):
        data = {"dates": dates}
        calendar_update(tenant=tenant, actor=ACTOR, name="office", data=data, clock=clock)


def _fire_at(engine, clock, at) -> int:
    engine.materialise()
    clock.set(at)
    return engine.fire().published


def test_removing_the_schedule_after_the_slot_leaves_its_jittered_run_nothing_to_fire(
    live, redis_client
):
    alpha = live["alpha"].tenant
    clock = FakeClock(utc(2026, 6, 1, 8, 59, 45))
    engine = new_engine(redis_client, clock)
    job, prepared = _prepared(alpha, clock, engine)
    _edit_job(alpha, clock, job, {"schedule": None})
    assert _fire_at(engine, clock, prepared.due_at) == 0
    assert runs_of(alpha) == []


def test_excluding_the_day_after_the_slot_records_its_jittered_run_excluded(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(utc(2026, 6, 1, 8, 59, 45))
    engine = new_engine(redis_client, clock)
    job, prepared = _prepared(alpha, clock, engine)
    # Edits that keep the slot keep its run, at the due time it was prepared with.
    _set_office_dates(alpha, clock, ["2026-06-02"])
    _edit_job(alpha, clock, job, {"jitter_seconds": JITTER + 60})
    [kept] = runs_of(alpha, scheduled_for=SLOT)
    assert (kept.id, kept.status, kept.due_at) == (prepared.id, states.SCHEDULED, prepared.due_at)
    _set_office_dates(alpha, clock, ["2026-06-01"])
    assert _fire_at(engine, clock, prepared.due_at) == 0
    [run] = runs_of(alpha, scheduled_for=SLOT)
    assert (run.status, run.skip_reason) == (states.SKIPPED, states.SKIP_EXCLUDED)
    assert run.due_at == SLOT and run.finished_at == EDIT_AT
