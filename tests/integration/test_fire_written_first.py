"""Small tenants' runs written first, then published, their schemas grouped (ADR 0031).

With many small tenants due in one fire (`fire_write_first_min_tenants`, 50 by default; 2
here, alpha and beta), their first attempts are not published before the write (ADR
0021): one statement moves every schema's runs to `queued` and returns what to publish,
and the messages go out before the chunk commits. What must hold as on the other path:
every admitted run published once, a paused job's slot skipped, a concurrency policy
decided, a removed run not published, and one tenant's failure costing only that tenant,
with nothing published for its runs.
"""

from __future__ import annotations

from django_tenants.utils import schema_context

from core.clock import FakeClock
from jobs.models import Job
from runs import states
from runs.models import Run

from .helpers import (
    make_job,
    message_args,
    new_engine,
    other_connection,
    queued_messages,
    runs_of,
    utc,
)

START = utc(2026, 6, 1, 12, 0)
SLOT = utc(2026, 6, 1, 12, 1)


def _engine(redis_client, clock: FakeClock):
    return new_engine(redis_client, clock, fire_write_first_min_tenants=2)


def _prepared(live, redis_client, **alpha_job):
    """A minute job in alpha and one in beta, their 12:01 runs prepared."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"cron": "* * * * *"}, **alpha_job)
    make_job(beta, clock, schedule={"cron": "* * * * *"})
    engine = _engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    engine.materialise()
    [a] = runs_of(alpha, scheduled_for=SLOT)
    [b] = runs_of(beta, scheduled_for=SLOT)
    clock.set(SLOT)
    return engine, clock, job, a, b


def _published(redis_client) -> list[str]:
    return sorted(message_args(m)[1] for m in queued_messages(redis_client))


def test_small_tenants_runs_are_queued_and_published_once(live, redis_client):
    engine, _clock, _job, a, b = _prepared(live, redis_client)
    stats = engine.fire()
    assert stats.published == 2
    assert _published(redis_client) == sorted([str(a.id), str(b.id)])
    assert runs_of(live["alpha"].tenant, id=a.id)[0].status == states.QUEUED
    assert runs_of(live["beta"].tenant, id=b.id)[0].status == states.QUEUED
    assert engine.admission.in_flight.count(live["alpha"].tenant.id) == 1
    assert len(engine.runs) == 0
    assert engine.fire().published == 0  # nothing twice


def test_a_paused_jobs_slot_is_skipped_and_the_other_tenant_fires(live, redis_client):
    engine, _clock, job, a, b = _prepared(live, redis_client)
    with schema_context(live["alpha"].schema):
        Job.objects.filter(id=job.id).update(paused=True)
    stats = engine.fire()
    assert (stats.published, stats.skipped) == (1, 1)
    assert _published(redis_client) == [str(b.id)]
    [after] = runs_of(live["alpha"].tenant, id=a.id)
    assert (after.status, after.skip_reason) == (states.SKIPPED, states.SKIP_PAUSED)


def test_a_forbid_job_with_a_run_in_flight_skips_its_slot(live, redis_client):
    engine, _clock, job, a, b = _prepared(live, redis_client, concurrency_policy="forbid")
    with schema_context(live["alpha"].schema):
        Run.objects.create(
            job_id=job.id,
            trigger="manual",
            scheduled_for=START,
            due_at=START,
            status=states.RUNNING,
        )
    stats = engine.fire()
    assert (stats.published, stats.skipped) == (1, 1)
    assert _published(redis_client) == [str(b.id)]
    [after] = runs_of(live["alpha"].tenant, id=a.id)
    assert (after.status, after.skip_reason) == (states.SKIPPED, states.SKIP_OVERLAP)


def test_a_run_an_edit_removed_is_not_published(live, redis_client):
    engine, _clock, _job, a, b = _prepared(live, redis_client)
    with schema_context(live["alpha"].schema):
        Run.objects.filter(id=a.id).delete()
    assert engine.fire().published == 1
    assert _published(redis_client) == [str(b.id)]


def test_a_tenant_whose_row_is_locked_costs_only_itself_and_nothing_of_it_is_published(
    live, redis_client
):
    """The grouped write times out on alpha's locked row: nothing of the chunk committed
    or was pushed; done again tenant by tenant, beta's run goes out and alpha backs off with
    its run still `scheduled`, unpublished (unlike a run published first, whose message is
    out before its write), and it fires once its back-off is over."""
    engine, clock, _job, a, b = _prepared(live, redis_client)
    alpha = live["alpha"].tenant
    holder = other_connection()
    holder.execute(f'SELECT 1 FROM "{alpha.schema_name}".runs_run WHERE id = %s FOR UPDATE', [a.id])
    try:
        stats = engine.fire()
        assert _published(redis_client) == [str(b.id)]
        assert (stats.published, stats.deferred) == (1, 1)
        assert not engine.faults.allowed(alpha.id)
        assert runs_of(alpha, id=a.id)[0].status == states.SCHEDULED
    finally:
        holder.rollback()
        holder.close()
    engine.faults.succeeded(alpha.id)  # its back-off is over
    clock.advance(1)
    assert engine.fire().published == 1
    assert _published(redis_client) == sorted([str(a.id), str(b.id)])
    assert runs_of(alpha, id=a.id)[0].status == states.QUEUED


def test_runs_that_face_the_misfire_policy_go_the_usual_way_in_one_pass(live, redis_client):
    """After a takeover every run is judged for lateness: none goes to the grouped
    statement (which takes runs held from before their instant), and the chunk must not
    send an empty one (a syntax error, the chunk redone tenant by tenant, one savepoint
    each: found by a review). Both runs are decided and published in the first pass."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _old, clock, _job, a, b = _prepared(live, redis_client)
    clock.advance(2)
    new = _engine(redis_client, clock)  # a new leader: it holds the runs from the relay
    new.relay(force=True)
    with CaptureQueriesContext(connection) as queries:
        stats = new.fire()
    assert stats.published == 2
    assert _published(redis_client) == sorted([str(a.id), str(b.id)])
    assert not [q for q in queries.captured_queries if "SAVEPOINT" in q["sql"]]
