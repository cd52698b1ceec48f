"""The worker's side of a run, in-process against real PostgreSQL and Redis: claim,
execute, record, retry, dead-letter, heartbeat, cancel, reap."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from django_tenants.utils import schema_context

from core import index
from core.clock import FakeClock
from jobs.models import Job
from jobs.services import job_delete
from runs import states
from runs.execution import run_execute
from runs.heartbeat import Heartbeats
from runs.models import Attempt, Run
from runs.services import job_trigger, run_cancel, run_replay

from .helpers import ACTOR, make_job, message_args, new_engine, queued_messages, runs_of, utc
from .receiver import Receiver

START = utc(2026, 6, 1, 12, 0, 0)


def _trigger(tenant, clock, job) -> Run:
    with schema_context(tenant.schema_name):
        run, _ = job_trigger(tenant=tenant, actor=ACTOR, job_id=job.id, clock=clock)
    return run


def _execute(tenant, run_id, attempt: int, clock, heartbeats=None) -> str:
    with schema_context(tenant.schema_name):
        return run_execute(
            schema=tenant.schema_name,
            run_id=str(run_id),
            attempt=attempt,
            worker="w1",
            clock=clock,
            heartbeats=heartbeats,
        )


def _admit(tenant, run_id) -> None:
    """What the leader does when a retry's time comes (tested through the engine above)."""
    with schema_context(tenant.schema_name):
        Run.objects.filter(pk=run_id, status__in=["retrying", "scheduled"]).update(
            status=states.QUEUED
        )


def _run(tenant, run_id) -> Run:
    with schema_context(tenant.schema_name):
        return Run.objects.get(pk=run_id)


def _attempts(tenant, run_id) -> list[tuple[int, str]]:
    with schema_context(tenant.schema_name):
        return list(Attempt.objects.filter(run_id=run_id).values_list("number", "outcome"))


def test_same_delivery_twice_executes_once(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _trigger(alpha, clock, make_job(alpha, clock, schedule=None))
    assert _execute(alpha, run.id, 1, clock) == states.SUCCEEDED
    assert _execute(alpha, run.id, 1, clock) == "duplicate"
    assert _attempts(alpha, run.id) == [(1, "succeeded")]


def test_concurrent_duplicate_deliveries_claim_once(live, redis_client):
    """The race: two workers receive the same message at the same moment."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(
        alpha,
        clock,
        schedule=None,
        target={"type": "task", "task": "builtin.sleep"},
        payload={"seconds": 0.3},
    )
    run = _trigger(alpha, clock, job)
    results: list[str] = []

    def deliver() -> None:
        from django.db import connection

        try:
            results.append(_execute(alpha, run.id, 1, clock))
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["duplicate"] * 3 + ["succeeded"]
    assert _attempts(alpha, run.id) == [(1, "succeeded")]


def test_failure_is_retried_with_backoff_through_the_runs_index(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(
        alpha,
        clock,
        schedule=None,
        target={"type": "task", "task": "builtin.fail"},
        payload={"times": 1},
        retry={"max_attempts": 3, "backoff_seconds": 30, "jitter": False},
    )
    run = _trigger(alpha, clock, job)
    assert _execute(alpha, run.id, 1, clock) == states.RETRYING
    retried = _run(alpha, run.id)
    assert (retried.attempt, retried.next_attempt_at) == (2, START + timedelta(seconds=30))
    assert "attempt 1 fails as asked" in retried.error
    assert (
        redis_client.zscore(index.runs_index_key(), index.member(alpha.id, run.id))
        == (START + timedelta(seconds=30)).timestamp()
    )
    engine = new_engine(redis_client, clock)
    engine.load_run_index()
    assert engine.fire().published == 0  # not before its backoff
    clock.advance(30)
    assert engine.fire().published == 1
    [message] = queued_messages(redis_client)
    assert message_args(message) == [alpha.schema_name, str(run.id), 2]
    assert _execute(alpha, run.id, 1, clock) == "duplicate"  # the old attempt's message
    assert _execute(alpha, run.id, 2, clock) == states.SUCCEEDED
    assert _attempts(alpha, run.id) == [(1, "failed"), (2, "succeeded")]


def test_run_goes_to_the_dlq_after_max_attempts_and_can_be_replayed(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(
        alpha,
        clock,
        schedule=None,
        target={"type": "task", "task": "builtin.fail"},
        payload={"times": 2},
        retry={"max_attempts": 2, "backoff_seconds": 1},
    )
    run = _trigger(alpha, clock, job)
    assert _execute(alpha, run.id, 1, clock) == states.RETRYING
    assert _execute(alpha, run.id, 2, clock) == "duplicate"  # not before the leader admits it
    _admit(alpha, run.id)
    assert _execute(alpha, run.id, 2, clock) == states.DEAD
    with schema_context(alpha.schema_name):
        replayed = run_replay(tenant=alpha, actor=ACTOR, run_id=run.id, clock=clock)
    assert (replayed.status, replayed.attempt) == (states.RETRYING, 3)
    _admit(alpha, run.id)
    assert _execute(alpha, run.id, 3, clock) == states.SUCCEEDED
    assert _attempts(alpha, run.id) == [(1, "failed"), (2, "failed"), (3, "succeeded")]


def test_target_that_cannot_be_prepared_goes_straight_to_the_dlq(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, retry={"max_attempts": 5})
    run = _trigger(alpha, clock, job)
    with schema_context(alpha.schema_name):
        Job.objects.filter(pk=job.pk).update(target={"task": "reports.gone"})
    assert _execute(alpha, run.id, 1, clock) == states.DEAD
    assert _run(alpha, run.id).error == "unknown task 'reports.gone'"


def test_run_of_a_deleted_job_is_dead_with_the_reason(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None)
    run = _trigger(alpha, clock, job)
    with schema_context(alpha.schema_name):
        Run.objects.filter(pk=run.pk).update(status=states.QUEUED)
        job_delete(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
    assert _execute(alpha, run.id, 1, clock) == states.DEAD
    assert _run(alpha, run.id).error == "job deleted"


def test_heartbeats_are_batched_and_report_cancelled_runs(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None)
    runs = [_trigger(alpha, clock, job) for _ in range(3)]
    with schema_context(alpha.schema_name):
        Run.objects.filter(job=job).update(status=states.RUNNING, heartbeat_at=START)
    beats = Heartbeats(60)
    events = [beats.track(alpha.schema_name, str(r.id), 1) for r in runs]
    with schema_context(alpha.schema_name):
        run_cancel(tenant=alpha, actor=ACTOR, run_id=runs[1].id, clock=clock)
    assert beats.beat_once() == 1
    beats.stop()
    assert [e.is_set() for e in events] == [False, True, False]
    # The database's clock, not the worker's (nor the test's fake one).
    assert _run(alpha, runs[0].id).heartbeat_at > timezone.now() - timedelta(seconds=5)


def test_a_tenant_whose_heartbeat_fails_costs_only_its_own_runs(live, redis_client):
    """One worker runs a run of alpha and one of beta; alpha's runs table is locked past the
    statement's lock timeout (a migration building an index, say). Beta's run still gets
    its heartbeat, so the reaper does not run it again while it executes; alpha's run is
    not told to stop on a beat that said nothing about it."""
    from .helpers import other_connection

    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    tracked = []
    for tenant in (alpha, beta):  # alpha first: its failure came first in the loop
        job = make_job(tenant, clock, schedule=None)
        run = _trigger(tenant, clock, job)
        with schema_context(tenant.schema_name):
            Run.objects.filter(pk=run.pk).update(status=states.RUNNING, heartbeat_at=START)
        tracked.append((tenant, run))
    beats = Heartbeats(60)
    events = [beats.track(t.schema_name, str(r.id), 1) for t, r in tracked]
    holder = other_connection()
    holder.execute(f'LOCK TABLE "{alpha.schema_name}".runs_run IN ACCESS EXCLUSIVE MODE')
    try:
        with connection.cursor() as cursor:  # the beat waits 0.2 s for the lock, not 10
            cursor.execute("SELECT set_config('lock_timeout', '200ms', false)")
        assert beats.beat_once() == 0
    finally:
        holder.rollback()
        holder.close()
        connection.close()  # the next test's session starts with the configured bounds
    beats.stop()
    assert [e.is_set() for e in events] == [False, False]
    assert _run(alpha, tracked[0][1].id).heartbeat_at == START
    assert _run(beta, tracked[1][1].id).heartbeat_at > timezone.now() - timedelta(seconds=5)


def test_cancelled_running_run_stops_and_its_late_result_changes_nothing(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(
        alpha,
        clock,
        schedule=None,
        target={"type": "task", "task": "builtin.sleep"},
        payload={"seconds": 30},
    )
    run = _trigger(alpha, clock, job)
    beats = Heartbeats(0.05)
    result: list[str] = []

    def work() -> None:
        from django.db import connection

        try:
            result.append(_execute(alpha, run.id, 1, clock, heartbeats=beats))
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    wait_until = threading.Event()
    while _run(alpha, run.id).status != states.RUNNING:
        wait_until.wait(0.01)
    with schema_context(alpha.schema_name):
        run_cancel(tenant=alpha, actor=ACTOR, run_id=run.id, clock=clock)
    worker.join(10)
    beats.stop()
    assert result == ["superseded"]  # stopped within a heartbeat, far before 30 s
    assert _run(alpha, run.id).status == states.CANCELLED
    assert _attempts(alpha, run.id) == [(1, "cancelled")]


def test_reaper_retries_a_run_whose_worker_vanished(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, retry={"max_attempts": 2, "backoff_seconds": 0})
    run = _trigger(alpha, clock, job)
    with schema_context(alpha.schema_name):
        Run.objects.filter(pk=run.pk).update(status=states.QUEUED)
    clock.advance(1)
    with schema_context(alpha.schema_name):
        from runs.execution import claim_run

        assert claim_run(
            schema=alpha.schema_name,
            run_id=str(run.id),
            attempt=1,
            worker="w-dead",
            now=clock.now(),
        )
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=60)
    _age(alpha, run.id, "heartbeat_at", 59)  # heartbeats use the database's clock
    assert engine.reap(force=True) == 0  # heartbeat not yet stale
    _age(alpha, run.id, "heartbeat_at", 61)
    assert engine.reap(force=True) == 1
    assert _attempts(alpha, run.id) == [(1, "lost")]
    reaped = _run(alpha, run.id)
    assert (reaped.status, reaped.attempt) == (states.RETRYING, 2)
    # In the runs index as well, as a worker's retry: a leader taking over before it is
    # due finds it there, however long its back-off.
    from core.keys import runs_index_key

    assert redis_client.zscore(runs_index_key(), index.member(alpha.id, run.id)) == (
        reaped.due_at.timestamp()
    )
    assert engine.fire().published == 1
    assert _execute(alpha, run.id, 2, clock) == states.SUCCEEDED


def test_reaper_sends_a_lost_run_to_the_dlq_after_max_attempts(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, retry={"max_attempts": 1})
    run = _trigger(alpha, clock, job)
    with schema_context(alpha.schema_name):
        Run.objects.filter(pk=run.pk).update(status=states.RUNNING, heartbeat_at=START)
        Attempt.objects.create(run_id=run.id, number=1, started_at=START)
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=10)
    _age(alpha, run.id, "heartbeat_at", 11)
    engine.reap(force=True)
    dead = _run(alpha, run.id)
    assert dead.status == states.DEAD
    assert dead.error.startswith("lost: no heartbeat")


def test_queued_run_whose_message_vanished_is_published_again(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _trigger(alpha, clock, make_job(alpha, clock, schedule=None))
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=60)
    engine.load_run_index()
    engine.fire()
    redis_client.delete(*redis_client.keys("runs.*"))  # the broker lost it
    _age(alpha, run.id, "queued_at", 61)
    assert engine.reap(force=True) == 1
    assert [message_args(m)[1] for m in queued_messages(redis_client)] == [str(run.id)]
    assert engine.reap(force=True) == 0  # at most once per visibility timeout


def _age(tenant, run_id, column: str, seconds: float) -> None:
    """Move a run's database-clock timestamp into the past, as time passing would."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE \"{tenant.schema_name}\".runs_run SET {column} = now() - %s * interval '1s' "
            "WHERE id = %s",
            [seconds, run_id],
        )


@pytest.fixture
def receiver():
    with Receiver() as server:
        yield server


def _http_job(alpha, clock, url: str, **extra):
    return make_job(
        alpha,
        clock,
        schedule=None,
        payload={"report": "daily"},
        target={"type": "http", "url": url, "method": "POST", "headers": {"X-Team": "blue"}},
        **extra,
    )


@override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"])
def test_http_target_receives_the_scheduler_headers(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _trigger(alpha, clock, _http_job(alpha, clock, receiver.url("/hook")))
    assert _execute(alpha, run.id, 1, clock) == states.SUCCEEDED
    [request] = receiver.requests
    assert request.method == "POST" and request.path == "/hook"
    assert request.headers["Idempotency-Key"] == str(run.id)
    assert request.headers["X-Scheduler-Run-Id"] == str(run.id)
    assert request.headers["X-Scheduler-Job-Id"] == str(run.job_id)
    assert request.headers["X-Scheduler-Scheduled-For"] == "2026-06-01T12:00:00Z"
    assert request.headers["X-Scheduler-Attempt"] == "1"
    assert request.headers["X-Team"] == "blue"
    assert request.json == {"report": "daily"}


@override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"])
def test_http_500_is_retried_then_dead_then_replayed(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    receiver.status = 500
    job = _http_job(
        alpha,
        clock,
        receiver.url("/fail"),
        retry={"max_attempts": 3, "backoff_seconds": 2, "backoff_multiplier": 3, "jitter": False},
    )
    run = _trigger(alpha, clock, job)
    delays = []
    for attempt in (1, 2):
        assert _execute(alpha, run.id, attempt, clock) == states.RETRYING
        delays.append((_run(alpha, run.id).next_attempt_at - clock.now()).total_seconds())
        _admit(alpha, run.id)
    assert delays == [2.0, 6.0]  # backoff times the multiplier
    assert _execute(alpha, run.id, 3, clock) == states.DEAD
    assert _run(alpha, run.id).error == "HTTP 500"
    assert [r.headers["X-Scheduler-Attempt"] for r in receiver.requests] == ["1", "2", "3"]
    receiver.status = 200
    with schema_context(alpha.schema_name):
        run_replay(tenant=alpha, actor=ACTOR, run_id=run.id, clock=clock)
    _admit(alpha, run.id)
    assert _execute(alpha, run.id, 4, clock) == states.SUCCEEDED
    assert receiver.requests[-1].headers["X-Scheduler-Attempt"] == "4"


def test_http_target_on_a_refused_address_is_dead_and_never_contacted(live, redis_client, receiver):
    """The job was saved while the operators allowed loopback (the save-time check passed);
    at run time they no longer do."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    with override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"]):
        job = _http_job(alpha, clock, receiver.url("/x"), retry={"max_attempts": 5})
    run = _trigger(alpha, clock, job)
    assert _execute(alpha, run.id, 1, clock) == states.DEAD
    assert "refused destination" in _run(alpha, run.id).error
    assert receiver.requests == []
    assert runs_of(alpha, id=run.id)[0].attempt == 1  # not retried: it cannot help
