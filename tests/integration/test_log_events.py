"""The important log lines are events with a name and the ids of what they are about:
asserted on `record.event` and `record.fields`, as an operator's log query would."""

from __future__ import annotations

import logging

from django_tenants.utils import schema_context

from beat.lease import Lease
from core.clock import FakeClock
from runs import states
from runs.execution import run_execute
from runs.heartbeat import Heartbeats
from runs.models import Run
from runs.services import job_trigger, run_cancel
from scheduler_site.api.problems import problem_exception_handler

from .helpers import ACTOR, make_job, new_engine, utc

START = utc(2026, 6, 1, 12, 0, 0)


def events(caplog, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def _run(tenant, clock, **job):
    job.setdefault("schedule", None)
    created = make_job(tenant, clock, **job)
    with schema_context(tenant.schema_name):
        return job_trigger(tenant=tenant, actor=ACTOR, job_id=created.id, clock=clock)[0]


def _execute(tenant, run, clock, attempt: int = 1) -> str:
    with schema_context(tenant.schema_name):
        return run_execute(schema=tenant.schema_name, run_id=str(run.id), attempt=attempt,
                           worker="w1", clock=clock)  # fmt: skip


def test_lease_taken_and_step_down_are_events(live, redis_client, caplog):
    caplog.set_level(logging.INFO)
    lease = Lease(redis_client, holder="host-a:1", expire_seconds=5)
    assert lease.try_acquire()
    lease.step_down("LeaseLost: lease renewal failed")
    [taken] = events(caplog, "leader.lease_taken")
    assert taken.fields == {"holder": "host-a:1", "partition": 0, "epoch": lease_epoch(taken)}
    [down] = events(caplog, "leader.step_down")
    assert down.levelno == logging.WARNING
    assert down.fields["reason"] == "LeaseLost: lease renewal failed"
    assert down.fields["epoch"] == taken.fields["epoch"]


def test_a_late_renewal_names_the_step_that_held_the_loop(live, redis_client, caplog):
    """A step that ran long between two checkpoints is named, before it costs the lease."""
    caplog.set_level(logging.INFO)
    lease = Lease(redis_client, holder="host-a:1", expire_seconds=2)
    assert lease.try_acquire()
    lease.renew()
    assert events(caplog, "leader.renewal_late") == []  # on time: nothing said
    lease.step = "fire"
    lease.renew()  # on time, during fire
    lease.step = "materialise"
    lease.renewed_at -= 1.5  # 1.5 s since the last renewal, of a 2 s lease
    lease.renew()
    [late] = events(caplog, "leader.renewal_late")
    assert late.levelno == logging.WARNING
    assert late.fields["gap_seconds"] >= 1.5
    # the time went somewhere from the fire (the renewal before) to the materialise
    assert (late.fields["since_step"], late.fields["step"]) == ("fire", "materialise")
    lease.release()


def lease_epoch(record) -> int:
    return int(record.getMessage().rsplit(" ", 1)[1])


def test_worker_events_name_the_tenant_job_run_and_attempt(live, redis_client, caplog):
    caplog.set_level(logging.DEBUG, logger="runs.execution")
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _run(alpha, clock, target={"type": "task", "task": "builtin.fail"},
               payload={"times": 5}, retry={"max_attempts": 2, "backoff_seconds": 1})  # fmt: skip
    assert _execute(alpha, run, clock) == states.RETRYING
    assert _execute(alpha, run, clock) == "duplicate"
    with schema_context(alpha.schema_name):
        Run.objects.filter(pk=run.pk).update(status=states.QUEUED)
    assert _execute(alpha, run, clock, attempt=2) == states.DEAD
    ids = {"tenant": "alpha", "job_id": run.job_id, "run_id": str(run.id)}
    [claim1, claim2] = events(caplog, "run.claimed")
    assert claim1.levelno == logging.DEBUG and claim1.fields | ids == claim1.fields
    assert (claim1.fields["attempt"], claim2.fields["attempt"]) == (1, 2)
    [retrying] = events(caplog, "run.retrying")
    assert retrying.levelno == logging.WARNING
    assert {k: retrying.fields[k] for k in ids} == ids and retrying.fields["attempt"] == 1
    assert "next_attempt_at" in retrying.fields and "error" in retrying.fields
    [duplicate] = events(caplog, "run.duplicate")
    assert duplicate.fields == {"tenant": "alpha", "run_id": str(run.id), "attempt": 1}
    [dead] = events(caplog, "run.dead")
    assert dead.levelno == logging.ERROR and dead.fields["attempt"] == 2
    assert {k: dead.fields[k] for k in ids} == ids


def test_a_cancel_and_a_stopped_heartbeat_are_events(live, redis_client, caplog):
    caplog.set_level(logging.INFO)
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _run(alpha, clock)
    with schema_context(alpha.schema_name):
        Run.objects.filter(pk=run.pk).update(status=states.RUNNING, attempt=1)
    beats = Heartbeats(3600)
    beats.track(alpha.schema_name, str(run.id), 1)
    with schema_context(alpha.schema_name):
        run_cancel(tenant=alpha, actor=ACTOR, run_id=run.id, clock=clock)
    assert beats.beat_once() == 1
    [cancelled] = events(caplog, "run.cancelled")
    assert cancelled.fields["actor"] == ACTOR.label and cancelled.fields["run_id"] == str(run.id)
    [stopped] = events(caplog, "heartbeat.stopped")
    assert stopped.fields == {"tenant": "alpha", "run_id": str(run.id), "attempt": 1}


def test_reaping_is_an_event_with_its_tenant(live, redis_client, caplog):
    caplog.set_level(logging.INFO)
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _run(alpha, clock, retry={"max_attempts": 1})
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{alpha.schema_name}".runs_run SET status = %s, attempt = 1, '
            "heartbeat_at = now() - interval '10 minutes' WHERE id = %s",
            [states.RUNNING, run.id],
        )
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=60)
    assert engine.reap(force=True) == 1
    [reaped] = events(caplog, "leader.reaped")
    assert reaped.fields == {"tenant": "alpha", "retrying": 0, "dead": 1, "republished": 0}


def test_an_unhandled_api_error_is_an_event(caplog):
    caplog.set_level(logging.INFO)
    response = problem_exception_handler(RuntimeError("bug"), {"request": None})
    assert response.status_code == 500
    [error] = events(caplog, "api.error")
    assert error.levelno == logging.ERROR and error.fields == {"error": "RuntimeError"}
