"""What happens after something went wrong: a superseded attempt's worker, held runs whose
wake-up never comes, and runs prepared before an outage (defects 6, 7 and 8)."""

from __future__ import annotations

from django.db import connection
from django_tenants.utils import schema_context

from beat.loop import SchedulerProcess
from core.clock import FakeClock
from core.keys import wake_key
from runs import states
from runs.execution import claim_run
from runs.heartbeat import Heartbeats
from runs.models import Run
from runs.notify import ENDED_REPORTER
from runs.services import job_trigger, run_cancel

from .helpers import ACTOR, make_job, message_args, new_engine, queued_messages, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)


def _age(tenant, run_id, column: str, seconds: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE \"{tenant.schema_name}\".runs_run SET {column} = now() - %s * interval '1s' "
            "WHERE id = %s",
            [seconds, run_id],
        )


def _run(tenant, run_id) -> Run:
    with schema_context(tenant.schema_name):
        return Run.objects.get(pk=run_id)


# --- defect 6: a superseded attempt must not keep the run looking alive ------------------


def test_superseded_attempts_heartbeat_neither_masks_the_new_attempt_nor_runs_on(
    live, redis_client
):
    """Worker 1 claims attempt 1 and goes quiet long enough to be reaped; worker 2 claims
    attempt 2 and dies. Worker 1's heartbeats resume: they must not refresh the run (that
    would hide attempt 2's death), and must tell worker 1 to stop."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, retry={"max_attempts": 3, "backoff_seconds": 0})
    with schema_context(alpha.schema_name):
        run, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
        Run.objects.filter(pk=run.pk).update(status=states.QUEUED)
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=60)
    assert claim_run(
        schema=alpha.schema_name, run_id=str(run.id), attempt=1, worker="w1", now=clock.now()
    )
    worker1 = Heartbeats(60)
    stop1 = worker1.track(alpha.schema_name, str(run.id), 1)
    _age(alpha, run.id, "heartbeat_at", 61)
    assert engine.reap(force=True) == 1  # attempt 1 lost: attempt 2 waits
    engine.fire()
    assert claim_run(
        schema=alpha.schema_name, run_id=str(run.id), attempt=2, worker="w2", now=clock.now()
    )
    _age(alpha, run.id, "heartbeat_at", 61)  # worker 2 died at once
    before = _run(alpha, run.id).heartbeat_at
    assert worker1.beat_once() == 1
    assert stop1.is_set()  # worker 1 is told to stop
    assert _run(alpha, run.id).heartbeat_at == before  # ... and vouched for nothing
    assert engine.reap(force=True) == 1  # attempt 2's death is seen
    reaped = _run(alpha, run.id)
    assert (reaped.status, reaped.attempt) == (states.RETRYING, 3)
    worker1.stop()


# --- defect 7: runs held by the `queue` policy are always released -----------------------


def _held(alpha, clock, engine):
    job = make_job(
        alpha,
        clock,
        schedule={"cron": "* * * * *"},
        concurrency_policy="queue",
        retry={"max_attempts": 3, "backoff_seconds": 0},
    )
    clock.set(utc(2026, 6, 1, 12, 1))
    engine.materialise()
    engine.fire()
    [first] = runs_of(alpha, scheduled_for=clock.now())
    assert claim_run(
        schema=alpha.schema_name, run_id=str(first.id), attempt=1, worker="w", now=clock.now()
    )
    clock.set(utc(2026, 6, 1, 12, 2))
    engine.materialise()
    assert engine.fire().held == 1
    return job, first


def test_held_run_goes_when_the_run_it_waits_for_is_reaped(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=60)
    _, first = _held(alpha, clock, engine)
    _age(alpha, first.id, "heartbeat_at", 61)
    engine.reap(force=True)
    # Both attempt 2 of the first run and the held one are admitted again (one slot: one
    # goes, one is held); unreleased, the held one would not even be looked at.
    stats = engine.fire()
    assert (stats.published, stats.held) == (1, 1)


def test_held_run_goes_when_the_run_it_waits_for_is_cancelled(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    process = SchedulerProcess(client=redis_client, clock=clock, lease_seconds=60, holder="t:1")
    assert process.try_lead()
    _, first = _held(alpha, clock, process.engine)
    with schema_context(alpha.schema_name):
        run_cancel(tenant=alpha, actor=ACTOR, run_id=first.id, clock=clock)
    assert ENDED_REPORTER.flush(5)  # the report is sent from its own thread
    assert redis_client.llen(wake_key()) >= 1
    process.wait(0.01)  # the wake-up: the held run is released
    assert process.engine.fire().published == 1


def test_held_run_goes_when_its_wake_up_was_lost(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    engine = new_engine(redis_client, clock, relay_interval_seconds=10)
    engine.relay(force=True)
    _, first = _held(alpha, clock, engine)
    with schema_context(alpha.schema_name):
        Run.objects.filter(pk=first.pk).update(status=states.SUCCEEDED)  # no wake-up sent
    clock.advance(11)
    engine.relay()  # the periodic sweep admits held runs again
    assert engine.fire().published == 1


def test_replace_policy_releases_nothing_it_should_not(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"}, concurrency_policy="replace")
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 1))
    engine.materialise()
    engine.fire()
    clock.set(utc(2026, 6, 1, 12, 2))
    engine.materialise()
    stats = engine.fire()
    assert (stats.cancelled, stats.published) == (1, 1)
    assert engine.runs.held == {}


# --- defect 8: runs prepared before an outage follow the misfire policy -----------------


def _prepared_then_outage(alpha, clock, redis_client, *, policy: str, grace: int, outage: int):
    make_job(
        alpha,
        clock,
        schedule={"interval_seconds": 1},
        misfire_policy=policy,
        misfire_grace_seconds=grace,
    )
    leader_a = new_engine(redis_client, clock, lookahead_seconds=5)
    leader_a.materialise()  # runs prepared for the next 5 s; then the only scheduler dies
    prepared = {r.id for r in runs_of(alpha)}
    clock.advance(outage)
    leader_b = new_engine(redis_client, clock, lookahead_seconds=5)
    leader_b.relay(force=True)  # finds the prepared runs, hours late
    leader_b.fire()
    return prepared


def test_skip_job_does_not_fire_runs_prepared_before_an_outage(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    prepared = _prepared_then_outage(alpha, clock, redis_client, policy="skip", grace=10, outage=80)
    runs = {r.id: r for r in runs_of(alpha)}
    assert {(runs[i].status, runs[i].skip_reason) for i in prepared} == {
        (states.SKIPPED, "misfire")
    }
    assert queued_messages(redis_client) == []


def test_run_once_job_fires_one_of_the_runs_prepared_before_an_outage(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    prepared = _prepared_then_outage(
        alpha, clock, redis_client, policy="run_once", grace=10, outage=80
    )
    runs = {r.id: r for r in runs_of(alpha)}
    queued = [i for i in prepared if runs[i].status == states.QUEUED]
    assert len(queued) == 1
    assert runs[queued[0]].scheduled_for == max(runs[i].scheduled_for for i in prepared)
    assert [message_args(m)[1] for m in queued_messages(redis_client)] == [str(queued[0])]


def test_run_all_job_fires_every_run_prepared_before_an_outage(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    prepared = _prepared_then_outage(
        alpha, clock, redis_client, policy="run_all", grace=10, outage=80
    )
    runs = {r.id: r for r in runs_of(alpha)}
    assert {runs[i].status for i in prepared} == {states.QUEUED}


def test_runs_late_within_the_grace_still_fire(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    prepared = _prepared_then_outage(alpha, clock, redis_client, policy="skip", grace=60, outage=8)
    runs = {r.id: r for r in runs_of(alpha)}
    assert {runs[i].status for i in prepared} == {states.QUEUED}
