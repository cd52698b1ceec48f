"""Misfire, concurrency, pause/resume and DST policies through the leader, against the
real database and Redis."""

from __future__ import annotations

from collections import Counter

from django_tenants.utils import schema_context

from core import index
from core.clock import FakeClock
from core.keys import index_key
from jobs.services import job_pause, job_resume
from runs import states
from runs.models import Run

from .helpers import ACTOR, make_job, new_engine, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)


def _statuses(runs) -> list[tuple[str, str, str]]:
    return [(r.scheduled_for.strftime("%H:%M"), r.status, r.skip_reason) for r in runs]


def _set_status(tenant, run: Run, status: str) -> None:
    with schema_context(tenant.schema_name):
        Run.objects.filter(pk=run.pk).update(status=status)


def test_leader_back_after_downtime_applies_run_once(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "*/10 * * * *"}, misfire_policy="run_once")
    clock.advance(3600 + 5 * 60)  # no leader for an hour: 13:05
    engine = new_engine(redis_client, clock)
    engine.materialise()
    runs = runs_of(alpha)
    assert Counter(r.status for r in runs) == {"skipped": 5, "scheduled": 1}  # 12:10-12:50
    [late] = [r for r in runs if r.status == states.SCHEDULED]
    assert late.scheduled_for == utc(2026, 6, 1, 13, 0)
    assert {r.skip_reason for r in runs if r.status == states.SKIPPED} == {"misfire"}
    assert engine.fire().published == 1  # due now, fired at once


def test_forbid_records_an_overlap_skip_while_a_run_is_active(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"}, concurrency_policy="forbid")
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 1))
    engine.materialise()
    engine.fire()
    [first] = runs_of(alpha)
    _set_status(alpha, first, states.RUNNING)
    clock.set(utc(2026, 6, 1, 12, 2))
    engine.materialise()
    stats = engine.fire()
    assert stats.skipped == 1
    assert _statuses(runs_of(alpha)) == [("12:01", "running", ""), ("12:02", "skipped", "overlap")]


def test_queue_policy_holds_the_run_until_the_previous_one_ends(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"cron": "* * * * *"}, concurrency_policy="queue")
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 1))
    engine.materialise()
    engine.fire()
    [first] = runs_of(alpha)
    _set_status(alpha, first, states.RUNNING)
    clock.set(utc(2026, 6, 1, 12, 2))
    engine.materialise()
    assert engine.fire().held == 1
    assert _statuses(runs_of(alpha))[1] == ("12:02", "scheduled", "")
    _set_status(alpha, first, states.SUCCEEDED)
    assert engine.release_held(alpha.id, job.id) == 1
    assert engine.fire().published == 1
    assert _statuses(runs_of(alpha))[1] == ("12:02", "queued", "")


def test_replace_policy_cancels_the_running_run(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"}, concurrency_policy="replace")
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 1))
    engine.materialise()
    engine.fire()
    [first] = runs_of(alpha)
    _set_status(alpha, first, states.RUNNING)
    clock.set(utc(2026, 6, 1, 12, 2))
    engine.materialise()
    stats = engine.fire()
    assert (stats.cancelled, stats.published) == (1, 1)
    assert _statuses(runs_of(alpha)) == [("12:01", "cancelled", ""), ("12:02", "queued", "")]


def test_slots_missed_while_paused_are_recorded_as_paused(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"cron": "0 * * * *"}, misfire_policy="skip")
    with schema_context(alpha.schema_name):
        job_pause(tenant=alpha, actor=ACTOR, job_id=job.id, reason="maintenance", clock=clock)
        clock.advance(3 * 3600 + 600)  # 15:10
        job_resume(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
    engine = new_engine(redis_client, clock)
    engine.materialise()
    assert _statuses(runs_of(alpha)) == [
        ("13:00", "skipped", "paused"),
        ("14:00", "skipped", "paused"),
        ("15:00", "skipped", "paused"),
    ]
    clock.set(utc(2026, 6, 1, 15, 59, 40))
    engine.materialise()
    clock.set(utc(2026, 6, 1, 16, 0))
    assert engine.fire().published == 1


def test_paused_job_materialises_nothing_and_its_pending_run_is_skipped(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 40))
    engine.materialise()  # the 12:01 run is waiting in memory
    with schema_context(alpha.schema_name):
        job_pause(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
    clock.set(utc(2026, 6, 1, 12, 1))
    engine.fire()
    clock.advance(120)
    # A pause leaves the job's index entry (only the leader moves scores later or removes
    # them): the leader reads the row once, finds it paused, and drops the entry.
    assert engine.materialise() == 1
    assert redis_client.zscore(index_key(), index.member(alpha.id, job.id)) is None
    assert engine.materialise() == 0
    assert _statuses(runs_of(alpha)) == [("12:01", "skipped", "paused")]


def test_dst_skip_policy_leaves_a_trace_at_the_gap(live, redis_client):
    """Nothing ran at 02:30 on the spring-forward night: the tenant sees why."""
    alpha = live["alpha"].tenant
    clock = FakeClock(utc(2026, 3, 28, 12, 0))
    make_job(
        alpha, clock, schedule={"cron": "30 2 * * *", "timezone": "Europe/Berlin"}, dst_gap="skip"
    )
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 3, 29, 0, 59, 50))  # the gap starts at 01:00 UTC
    engine.materialise()
    [run] = runs_of(alpha)
    assert (run.status, run.skip_reason, run.scheduled_for) == (
        "skipped",
        "dst",
        utc(2026, 3, 29, 1, 0),
    )


def test_dst_shift_policy_fires_at_the_end_of_the_gap(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(utc(2026, 3, 28, 12, 0))
    make_job(alpha, clock, schedule={"cron": "30 2 * * *", "timezone": "Europe/Berlin"})
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 3, 29, 1, 0))
    engine.materialise()
    assert engine.fire().published == 1
    [run] = runs_of(alpha)
    assert run.scheduled_for == utc(2026, 3, 29, 1, 0)  # 03:00 CEST


def test_dependency_only_job_with_a_dst_policy_is_created_without_schedule(live, redis_client):
    """Regression: a create body with dst_gap but no `schedule` key crashed, and a job
    given only depends_on was stored with an empty schedule kind."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    upstream = make_job(alpha, clock, schedule=None)
    job = make_job(alpha, clock, depends_on=[upstream.id], dst_gap="skip")
    assert (job.schedule_kind, job.next_run_at, job.dst_gap) == ("none", None, "skip")


# --- max_concurrent_runs above 1 ---------------------------------------------------------


def _minutely(alpha, clock, policy: str, limit: int, **data):
    return make_job(
        alpha,
        clock,
        schedule={"cron": "* * * * *"},
        concurrency_policy=policy,
        max_concurrent_runs=limit,
        **data,
    )


def _next_minute(engine, clock, minute: int):
    clock.set(utc(2026, 6, 1, 12, minute))
    engine.materialise()
    return engine.fire()


def test_forbid_with_max_concurrent_runs_2_runs_two_at_once_and_skips_the_third(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    _minutely(alpha, clock, "forbid", 2)
    engine = new_engine(redis_client, clock)
    assert _next_minute(engine, clock, 1).published == 1
    _set_status(alpha, runs_of(alpha)[0], states.RUNNING)
    assert _next_minute(engine, clock, 2).published == 1  # the second fits beside it
    stats = _next_minute(engine, clock, 3)
    assert (stats.published, stats.skipped) == (0, 1)
    assert _statuses(runs_of(alpha)) == [
        ("12:01", "running", ""),
        ("12:02", "queued", ""),
        ("12:03", "skipped", "overlap"),
    ]
    _set_status(alpha, runs_of(alpha)[0], states.SUCCEEDED)
    assert _next_minute(engine, clock, 4).published == 1  # one ended: room for one again


def test_queue_with_max_concurrent_runs_2_holds_the_third_until_one_ends(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = _minutely(alpha, clock, "queue", 2)
    engine = new_engine(redis_client, clock)
    _next_minute(engine, clock, 1)
    assert _next_minute(engine, clock, 2).published == 1
    stats = _next_minute(engine, clock, 3)
    assert (stats.published, stats.held) == (0, 1)
    assert [s[1] for s in _statuses(runs_of(alpha))] == ["queued", "queued", "scheduled"]
    _set_status(alpha, runs_of(alpha)[0], states.SUCCEEDED)
    assert engine.release_held(alpha.id, job.id) == 1
    assert engine.fire().published == 1
    assert [s[1] for s in _statuses(runs_of(alpha))] == ["succeeded", "queued", "queued"]


def test_replace_with_max_concurrent_runs_2_keeps_the_two_newest_due_together(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    _minutely(alpha, clock, "replace", 2, misfire_policy="run_all")
    engine = new_engine(redis_client, clock)
    _next_minute(engine, clock, 1)
    _set_status(alpha, runs_of(alpha)[0], states.RUNNING)
    clock.set(utc(2026, 6, 1, 12, 4))  # three slots due at once: 12:02, 12:03, 12:04
    engine.materialise()
    stats = engine.fire()
    assert (stats.published, stats.cancelled) == (2, 2)  # the running one and 12:02
    assert _statuses(runs_of(alpha)) == [
        ("12:01", "cancelled", ""),
        ("12:02", "cancelled", ""),
        ("12:03", "queued", ""),
        ("12:04", "queued", ""),
    ]
    with schema_context(alpha.schema_name):
        errors = dict(Run.objects.values_list("scheduled_for__minute", "error"))
    assert errors[1] == "replaced by a newer run" and errors[2] == "superseded by a newer run"
