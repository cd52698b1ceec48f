"""The leader honours richer schedules end to end: what it materialises matches the preview
(several specs, an exclusion calendar, an end), excluded slots leave `skipped/excluded`
rows, a one-off completes its job, and a calendar edited inside the lookahead window turns
an already prepared run into an excluded one."""

from __future__ import annotations

from datetime import UTC

from django_tenants.utils import schema_context

from core import index
from core.clock import FakeClock
from core.keys import index_key
from jobs.calendars import calendar_create, calendar_update
from jobs.models import Job
from jobs.preview import preview
from runs import states

from .helpers import ACTOR, make_job, new_engine, runs_of, utc

START = utc(2026, 12, 21, 0, 0)  # a Monday


def _calendar(tenant, clock, **data):
    with schema_context(tenant.schema_name):
        return calendar_create(tenant=tenant, actor=ACTOR, data=data, clock=clock)


def test_materialised_runs_match_the_preview(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    _calendar(alpha, clock, name="xmas", ranges=[["2026-12-24", "2026-12-26"]])
    schedule = {
        "specs": [{"cron": "0 9 * * 1-5"}, {"cron": "0 12 * * 6"}, {"cron": "0 9 * * 1"}],
        "timezone": "Europe/Berlin",
        "calendars": ["xmas"],
        "end": "2027-01-02T00:00:00Z",
    }
    job = make_job(alpha, clock, schedule=schedule)
    engine = new_engine(redis_client, clock, lookahead_seconds=14 * 86400)
    engine.materialise()
    with schema_context(alpha.schema_name):
        expected = preview(schedule, now=START, count=50)["slots"]
        state = Job.objects.get(id=job.id).state
    got = [(r.scheduled_for, r.status, r.skip_reason) for r in runs_of(alpha)]
    want = [
        (
            s.at.astimezone(UTC),
            states.SKIPPED if s.skip_reason else states.SCHEDULED,
            s.skip_reason or "",
        )
        for s in expected
    ]
    assert got == want
    assert [r[2] for r in got].count("excluded") == 3 and len(got) == 11  # 24-26 excluded
    assert state == "completed"  # the end passed inside the window: no slot left
    assert redis_client.zscore(index_key(), index.member(alpha.id, job.id)) is None


def test_a_one_off_fires_once_and_completes_its_job(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"at": "2026-12-21T10:00", "timezone": "Europe/Berlin"})
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 12, 21, 8, 59, 45))
    engine.materialise()
    # as documented: completed once its one run is prepared, before that run fires
    with schema_context(alpha.schema_name):
        assert Job.objects.get(id=job.id).state == "completed"
    [waiting] = runs_of(alpha)
    assert (waiting.status, waiting.scheduled_for) == (states.SCHEDULED, utc(2026, 12, 21, 9, 0))
    clock.set(utc(2026, 12, 21, 9, 0))
    assert engine.fire().published == 1
    with schema_context(alpha.schema_name):
        done = Job.objects.get(id=job.id)
    assert (done.state, done.next_run_at) == ("completed", None)
    assert [r.scheduled_for for r in runs_of(alpha)] == [utc(2026, 12, 21, 9, 0)]


def test_a_calendar_edited_inside_the_window_excludes_the_prepared_run(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(utc(2026, 12, 24, 7, 59, 30))
    _calendar(alpha, clock, name="office", dates=["2026-12-31"])
    make_job(
        alpha,
        clock,
        schedule={"cron": "0 9 * * *", "timezone": "Europe/Berlin", "calendars": ["office"]},
    )
    engine = new_engine(redis_client, clock)
    engine.materialise()
    [prepared] = runs_of(alpha)
    assert prepared.status == states.SCHEDULED
    with schema_context(alpha.schema_name):
        calendar_update(
            tenant=alpha, actor=ACTOR, name="office", data={"dates": ["2026-12-24"]}, clock=clock
        )
    engine.materialise()
    clock.set(utc(2026, 12, 24, 8, 0))
    assert engine.fire().published == 0
    [run] = runs_of(alpha)
    assert (run.scheduled_for, run.status, run.skip_reason) == (
        utc(2026, 12, 24, 8, 0),
        states.SKIPPED,
        "excluded",
    )
