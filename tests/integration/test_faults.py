"""Fault isolation (defect: one bad row or tenant crashed the leader and every standby after
it, and one tenant's error rolled back every tenant's fire). One bad job costs that job,
one broken tenant costs that tenant, and nothing makes the scheduler process exit."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest
from django.db import connection
from django_tenants.utils import schema_context

from beat.engine import EngineConfig
from beat.loop import SchedulerProcess
from beat.status import scheduler_status
from core import index
from core.clock import FakeClock
from core.keys import index_key
from jobs.models import Job
from jobs.selectors import with_relation_ids
from jobs.services import job_resume, job_update
from jobs.validation import JobValidationError
from runs import states
from scheduler_site.api.jobs.serializers import JobSerializer

from .helpers import ACTOR, make_job, message_args, new_engine, queued_messages, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)


def _sql(statement: str, params: list | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])


@contextmanager
def broken_table(schema: str, table: str):
    """The tenant's table vanishes (as when its schema is dropped by hand), then returns."""
    _sql(f'ALTER TABLE "{schema}".{table} RENAME TO {table}_gone')
    try:
        yield
    finally:
        _sql(f'ALTER TABLE "{schema}".{table}_gone RENAME TO {table}')


@pytest.mark.parametrize(
    ("breakage", "code"),
    [
        ("timezone = 'Mars/Olympus'", "invalid_timezone"),  # gone after a tzdata update
        ("cron_resolved = '61 * * * *'", "invalid_schedule"),
        ("schedule_kind = 'interval', interval_seconds = NULL", "invalid_schedule"),
    ],
)
def test_job_whose_stored_schedule_cannot_be_planned_is_parked_and_the_rest_go_on(
    live, redis_client, breakage, code
):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    good = make_job(alpha, clock, name="good", schedule={"cron": "* * * * *"})
    bad = make_job(alpha, clock, name="bad", schedule={"cron": "* * * * *"})
    other = make_job(beta, clock, name="other", schedule={"cron": "* * * * *"})
    _sql(f'UPDATE "{alpha.schema_name}".jobs_job SET {breakage} WHERE id = %s', [bad.id])
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    engine.materialise()
    assert [r.job_id for r in runs_of(alpha)] == [good.id]
    assert [r.job_id for r in runs_of(beta)] == [other.id]
    with schema_context(alpha.schema_name):
        parked = with_relation_ids(Job.objects.all()).get(id=bad.id)
        shown = JobSerializer(parked).data
    assert (shown["state"], shown["fault"]["code"]) == ("parked", code)
    assert shown["fault"]["detail"]
    assert redis_client.zscore(index_key(), index.member(alpha.id, bad.id)) is None
    clock.set(utc(2026, 6, 1, 12, 1))
    assert engine.fire().published == 2


def test_parked_job_resumes_only_once_its_schedule_can_be_planned(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"cron": "* * * * *"})
    _sql(f"UPDATE \"{alpha.schema_name}\".jobs_job SET timezone = 'Mars/Olympus'")
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    engine.materialise()
    with schema_context(alpha.schema_name), pytest.raises(JobValidationError) as refused:
        job_resume(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
    assert "Mars/Olympus" in str(refused.value.errors)
    with schema_context(alpha.schema_name):
        job_update(
            tenant=alpha,
            actor=ACTOR,
            job_id=job.id,
            data={"schedule": {"cron": "* * * * *", "timezone": "UTC"}},
            clock=clock,
        )
        fixed = Job.objects.get(id=job.id)
    assert (fixed.state, fixed.fault_code) == ("active", "")
    engine.materialise()
    clock.set(utc(2026, 6, 1, 12, 1))
    assert engine.fire().published == 1


def test_tenant_whose_tables_vanished_is_skipped_while_the_others_fire(live, redis_client):
    """Both tenants' runs are due in one fire chunk (one transaction across schemas): beta's
    table is gone, so its statements fail; alpha's runs must still be published, beta's
    wait for its back-off and go once it works again."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    make_job(beta, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    ticks = [0.0]
    engine.faults._now = lambda: ticks[0]  # the back-off's clock, controlled here
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    engine.materialise()
    clock.set(utc(2026, 6, 1, 12, 1))
    with broken_table(beta.schema_name, "runs_run"):
        stats = engine.fire()
        assert (stats.published, stats.deferred) == (1, 1)
        assert {message_args(m)[0] for m in queued_messages(redis_client)} == {alpha.schema_name}
        assert [f["schema"] for f in engine.faults.report()] == [beta.schema_name]
        engine.publish_faults()  # what an operator sees: scheduler_status --json
        status = scheduler_status(redis_client, clock.now())
        assert [f["schema"] for f in status["failing_tenants"]] == [beta.schema_name]
        assert status["unreadable_schemas"] == [beta.schema_name]
        clock.advance(1)
        assert engine.fire().published == 0  # beta waits for its back-off
    ticks[0] += 2  # the back-off has passed, and beta's table is back
    clock.advance(2)
    assert engine.fire().published == 1
    assert engine.faults.report() == []
    engine.publish_faults()
    assert scheduler_status(redis_client, clock.now())["failing_tenants"] == []
    assert [r.status for r in runs_of(beta)] == [states.QUEUED]


def test_tenant_that_cannot_be_materialised_does_not_hide_other_tenants_due_jobs(
    live, redis_client
):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    for i in range(3):
        make_job(beta, clock, name=f"b{i}", schedule={"cron": "* * * * *"})  # due 12:01
    make_job(alpha, clock, schedule={"cron": "2 * * * *"})  # due 12:02
    engine = new_engine(redis_client, clock, materialise_batch=3)  # beta's jobs fill a batch
    clock.set(utc(2026, 6, 1, 12, 1, 40))
    with broken_table(beta.schema_name, "jobs_job"):
        for _ in range(3):
            engine.materialise()  # beta fails: its entries move out of the way
            clock.advance(1)
    assert [r.scheduled_for for r in runs_of(alpha)] == [utc(2026, 6, 1, 12, 2)]
    assert runs_of(beta) == []


def test_unexpected_error_makes_the_leader_step_down_and_back_off_but_never_exit(
    live, redis_client, monkeypatch
):
    clock = FakeClock(START)
    process = SchedulerProcess(
        client=redis_client, clock=clock, config=EngineConfig(), lease_seconds=2, holder="a:1"
    )
    stop = threading.Event()
    stop.set()  # its waits return at once

    def boom(self):
        raise RuntimeError("a bug we did not foresee")

    monkeypatch.setattr("beat.engine.Engine.materialise", boom)
    process.run_once(stop)
    assert not process.lease.held and process.error_backoff == 1.0
    process.run_once(stop)
    assert process.error_backoff == 2.0
    monkeypatch.undo()
    process.run_once(stop)
    assert process.lease.held and process.error_backoff == 0.0
