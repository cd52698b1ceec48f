"""The leader honours richer schedules end to end: what it materialises matches the preview
(several specs, an exclusion calendar, an end; `start`, specs in their own zones and the
`L`/`W`/`#` day rules across a DST change), excluded slots leave `skipped/excluded`
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


def test_start_per_spec_zones_and_day_rules_materialise_as_previewed(live, redis_client):
    """`start`, specs each in its own zone (one taking the schedule's), and `L`, `W`, `#`,
    `dL` rules: the leader materialises exactly the preview's slots over three months,
    nothing before `start`, and the second-Sunday 02:30 in New York shifted to 03:00 EDT on
    the spring change (2027-03-14)."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    schedule = {
        "specs": [
            {"cron": "0 18 L * *", "timezone": "America/New_York"},
            {"cron": "30 8 15W * *", "timezone": "Asia/Tokyo"},
            {"cron": "30 2 * * 0#2", "timezone": "America/New_York"},
            {"cron": "0 12 * * 5L"},  # the schedule's zone, Europe/Berlin
        ],
        "timezone": "Europe/Berlin",
        "start": "2027-01-01T00:00:00Z",
    }
    job = make_job(alpha, clock, schedule=schedule)
    horizon = utc(2027, 4, 1, 0, 0)
    engine = new_engine(redis_client, clock, lookahead_seconds=(horizon - START).total_seconds())
    engine.materialise()
    with schema_context(alpha.schema_name):
        expected = preview(schedule, now=START, count=50)["slots"]
        saved = Job.objects.get(id=job.id)
    want = [s.at.astimezone(UTC) for s in expected if s.at <= horizon]
    got = runs_of(alpha)
    assert [r.scheduled_for for r in got] == want
    assert {(r.status, r.skip_reason) for r in got} == {(states.SCHEDULED, "")}
    assert len(want) == 12 and want[:4] == [
        utc(2027, 1, 10, 7, 30),  # the second Sunday, 02:30 EST (Dec 31 18:00 EST is before start)
        utc(2027, 1, 14, 23, 30),  # the weekday nearest the 15th, 08:30 in Tokyo
        utc(2027, 1, 29, 11, 0),  # the last Friday, 12:00 CET
        utc(2027, 1, 31, 23, 0),  # the last day, 18:00 EST
    ]
    assert utc(2027, 3, 14, 7, 0) in want  # 02:30 did not exist in New York: 03:00 EDT
    assert (saved.state, saved.next_run_at > horizon) == ("active", True)
