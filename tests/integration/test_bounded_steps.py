"""Every step of an iteration is bounded, and the lease is renewed between its units of
work (defect: relay, reap and materialise did queries per tenant in one go, and at a few
thousand tenants one iteration outlasted the lease). The figures at 2,000 tenants come
from `make bench ARGS="many-tenants"`."""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from datetime import timedelta

from django.db import connection
from django_tenants.utils import schema_context

from beat import sweeps
from beat.admission_control import AdmissionConfig
from beat.engine import EngineConfig
from beat.lease import Lease
from beat.loop import SchedulerProcess
from bench.world import copy_jobs
from core.clock import FakeClock
from core.keys import leader_lock_name
from jobs.models import Job
from runs import states
from runs.models import Run

from .helpers import make_job, new_engine, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)


def test_a_sweep_goes_on_in_the_next_iteration_where_its_budget_stopped_it(
    live, redis_client, monkeypatch
):
    monkeypatch.setattr(sweeps, "CHUNK_TENANTS", 1)
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    for tenant in (alpha, beta):
        make_job(tenant, clock, schedule=None)
    engine = new_engine(redis_client, clock, sweep_budget_seconds=0.0, relay_interval_seconds=10)
    checkpoints = []
    engine.checkpoint = lambda: checkpoints.append(1)
    for tenant in (alpha, beta):  # runs waiting in PostgreSQL, in no index
        with schema_context(tenant.schema_name):
            Run.objects.create(
                job=Job.objects.get(),
                trigger="manual",
                scheduled_for=START,
                due_at=START,
                status=states.SCHEDULED,
            )
    clock.advance(5)
    assert engine.relay(force=True) == 1  # one tenant per slice: alpha
    assert engine.takeover_sweep.running
    assert engine.finish_takeover_relay() == 1  # next iteration: beta
    assert not engine.takeover_sweep.running
    assert len(checkpoints) >= 2  # the lease is renewed between the two
    assert engine.fire().published == 2


def test_a_sweep_stops_as_soon_as_a_run_is_due(live, redis_client, monkeypatch):
    monkeypatch.setattr(sweeps, "CHUNK_TENANTS", 1)
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock, sweep_budget_seconds=60.0)
    clock.set(utc(2026, 6, 1, 12, 0, 40))
    engine.materialise()
    clock.set(utc(2026, 6, 1, 12, 1))  # the run is due now
    engine.reconcile()
    assert engine.reconcile_sweep.running  # stopped after one chunk, to fire first
    assert engine.fire().published == 1
    assert [r.status for r in runs_of(alpha)] == [states.QUEUED]


@contextmanager
def _slow_run_inserts(schema: str, seconds_per_row: float):
    """A slow database, for real: every run row this tenant inserts costs `seconds_per_row`
    (the trigger is dropped after: the tenant's schema serves the next tests)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE OR REPLACE FUNCTION {schema}.slow_insert() RETURNS trigger
            LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep({seconds_per_row}); RETURN NEW; END $$;
            CREATE TRIGGER slow_insert BEFORE INSERT ON {schema}.runs_run
            FOR EACH ROW EXECUTE FUNCTION {schema}.slow_insert();
            """
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                f"DROP TRIGGER IF EXISTS slow_insert ON {schema}.runs_run; "
                f"DROP FUNCTION IF EXISTS {schema}.slow_insert()"
            )


def test_one_tenants_big_due_batch_does_not_outlast_the_lease(live, redis_client, monkeypatch):
    """Defect: a tenant's whole due batch was materialised in one transaction with no
    renewal inside, so 4,000 jobs due together on a slow database (here 0.8 ms a run row:
    3.2 s of inserts) kept a leader with a 2 s lease past its lease, and it lost it. Now
    the batch goes in chunks with the lease renewed between them: the leader keeps its
    lease and epoch, and every slot is published once."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    with schema_context(alpha.schema_name):
        copy_jobs(alpha, 4000, START + timedelta(minutes=1), cron="* * * * *")
    redis_client.flushdb()
    process = SchedulerProcess(
        client=redis_client,
        clock=clock,
        # no worker here: the broker watermark would admit only a few (not what is tested);
        # chunks of 500 jobs (0.4 s of slow inserts each) leave a loaded machine room inside
        # the 2 s lease: with the default 1,000 one chunk and its commit took 1.4 s in a
        # busy run, and the next one lost the lease
        config=EngineConfig(admission=AdmissionConfig(enabled=False), materialise_chunk=500),
        lease_seconds=2,
        holder="a:1",
    )
    assert process.try_lead()
    while process.engine.rebuild is not None:  # index the copied jobs (nothing is due yet)
        process.lead_once()
    epoch = process.lease.epoch
    renewals = []
    original = Lease.renew
    monkeypatch.setattr(Lease, "renew", lambda self: (renewals.append(1), original(self)))
    clock.set(START + timedelta(seconds=45))  # the whole minute enters the window at once
    with _slow_run_inserts(alpha.schema_name, 0.0008):
        process.lead_once()  # raised LeaseLost before: the renewal after 3.2 s found it gone
    assert process.lease.held and process.lease.epoch == epoch
    assert len(renewals) >= 1 + 3  # the iteration's own, then between chunks of the tenant
    assert len(runs_of(alpha, status=states.SCHEDULED)) == 4000
    clock.set(START + timedelta(minutes=1))
    process.lead_once()
    assert len(runs_of(alpha, status=states.QUEUED)) == 4000
    assert process.lease.epoch == epoch
    assert redis_client.get("lock:" + leader_lock_name()).decode() == process.lease.token


def test_a_long_catch_up_plan_is_split_across_transactions(live, redis_client):
    """The chunk is bounded in runs as well as jobs: three jobs each catching up 8 missed
        slots with a chunk of 10 go in two transactions, and every slot has its run; in between
    the leader stops to fire what is already due."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    for n in range(3):
        make_job(
            alpha,
            clock,
            name=f"catch-up-{n}",
            schedule={"cron": "* * * * *"},
            misfire_policy="run_all",
        )
    engine = new_engine(redis_client, clock, materialise_chunk=10, misfire_max_runs=100)
    transactions = []
    engine.checkpoint = lambda: transactions.append(1)
    clock.set(START + timedelta(minutes=7, seconds=40))  # slots 12:01 ... 12:08 for each
    assert engine.materialise() == 2  # 8 + 16 runs: the chunk is full
    assert engine.materialise_interrupted  # and runs are due: firing comes first
    assert engine.materialise() == 1
    assert len(transactions) == 2
    assert len(runs_of(alpha)) == 24
    assert {r.scheduled_for for r in runs_of(alpha)} == {
        START + timedelta(minutes=m) for m in range(1, 9)
    }


def test_a_burst_is_fired_a_few_chunks_per_call_renewing_between_them(
    live, redis_client, monkeypatch
):
    """Defect: a burst due at once was popped and offered to admission whole (100,000
    runs held the loop 1.7 s between two renewals of a 2 s lease). One fire call takes at
    most FIRE_CHUNKS_PER_CALL chunks (5 here), renewing the lease between every two
    chunks; the rest is still due, and the next call takes it."""
    from beat import fire as fire_module

    monkeypatch.setattr(fire_module, "FIRE_CHUNKS_PER_CALL", 5)
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    chunk = 4
    total = chunk * 5 + 3
    for n in range(total):
        make_job(alpha, clock, name=f"burst-{n}", schedule={"cron": "* * * * *"})
    type(alpha).objects.filter(id=alpha.id).update(max_concurrency=1000)
    # no worker here: room in the broker for the whole burst
    engine = new_engine(
        redis_client, clock, fire_chunk=chunk, admission=AdmissionConfig(backlog_min=1000)
    )
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    engine.materialise()
    events: list[str] = []
    engine.checkpoint = lambda: events.append("renew")
    fire_chunk = fire_module._fire_chunk

    def counted(*args, **kwargs):
        events.append("chunk")
        return fire_chunk(*args, **kwargs)

    monkeypatch.setattr(fire_module, "_fire_chunk", counted)
    clock.set(utc(2026, 6, 1, 12, 1))
    assert engine.fire().published == chunk * 5
    chunks_at = [i for i, event in enumerate(events) if event == "chunk"]
    assert len(chunks_at) == 5
    assert all("renew" in events[a:b] for a, b in itertools.pairwise(chunks_at))
    assert engine.fire_limited  # the rest waits in the fair queue: the loop does not sleep
    assert engine.fire().published == 3
    assert not engine.fire_limited
    assert len(runs_of(alpha, status=states.QUEUED)) == total


def test_the_per_call_limit_keeps_the_choice_fair(live, redis_client, monkeypatch):
    """Every due run joins the fair queue before the per-call limit applies: a tenant with
    one run due behind another tenant's burst is admitted in the first call (the review's
    case: popping only the burst's oldest would have given all the room to the burst)."""
    from beat import fire as fire_module

    FIRE_CHUNKS_PER_CALL = 5  # the module's constant, made small here
    monkeypatch.setattr(fire_module, "FIRE_CHUNKS_PER_CALL", FIRE_CHUNKS_PER_CALL)
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    chunk = 4
    for n in range(chunk * FIRE_CHUNKS_PER_CALL + 5):
        make_job(alpha, clock, name=f"burst-{n}", schedule={"cron": "* * * * *"})
    make_job(beta, clock, name="lone", schedule={"cron": "* * * * *"})
    type(alpha).objects.filter(id__in=[alpha.id, beta.id]).update(max_concurrency=1000)
    engine = new_engine(
        redis_client, clock, fire_chunk=chunk, admission=AdmissionConfig(backlog_min=1000)
    )
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    engine.materialise()
    clock.set(utc(2026, 6, 1, 12, 1))
    assert engine.fire().published == chunk * FIRE_CHUNKS_PER_CALL
    assert [r.status for r in runs_of(beta)] == [states.QUEUED]  # in the first call


def test_a_part_after_a_full_one_locks_only_as_many_jobs_as_fitted(live, redis_client, monkeypatch):
    """Jobs with many runs each (here 30 in the window) fill a chunk after two jobs: the
    next transaction locks two jobs, not every job left (it used to re-lock them all to
    plan two)."""
    from beat import materialise as materialise_step
    from beat import store

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    for n in range(6):
        make_job(alpha, clock, name=f"many-{n}", schedule={"interval_seconds": 60})
    engine = new_engine(redis_client, clock, materialise_chunk=40, lookahead_seconds=1800)
    locked: list[int] = []
    original = store.lock_jobs
    monkeypatch.setattr(
        materialise_step.store,
        "lock_jobs",
        lambda cursor, schema, ids: (locked.append(len(ids)), original(cursor, schema, ids))[1],
    )
    assert engine.materialise() == 6
    assert locked == [6, 2, 2]  # before: [6, 4, 2]
    assert len(runs_of(alpha)) == 6 * 30
