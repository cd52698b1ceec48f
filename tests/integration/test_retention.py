"""Run history retention (beat/retention.py, runs/retention.py): the leader deletes ended runs
older than their tenant's retention with their attempts, keeps what it must, never makes a
writer wait, stops when deposed, and goes on past a broken tenant."""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django_tenants.utils import schema_context

from beat.retention import Retention, RetentionConfig
from beat.store import FencingError
from core.clock import FakeClock
from core.metrics import LEADER
from runs import states
from runs.models import Attempt, DagRun, Run
from runs.retention import prune_batch
from tenants.models import Tenant

from .helpers import make_job, new_engine, other_connection, utc

NOW = utc(2026, 6, 1, 12, 0, 0)


def _run(tenant, job, status, *, ended_days: float | None, scheduled_days=None, **fields) -> Run:
    """A run of `job` that ended `ended_days` ago (None: has not ended), scheduled a minute
    before it ended unless `scheduled_days` says otherwise."""
    ended = None if ended_days is None else NOW - timedelta(days=ended_days)
    if scheduled_days is None:
        scheduled = (ended or NOW) - timedelta(minutes=1)
    else:
        scheduled = NOW - timedelta(days=scheduled_days)
    with schema_context(tenant.schema_name):
        return Run.objects.create(
            job_id=job.id,
            trigger="manual",
            status=status,
            scheduled_for=scheduled,
            due_at=scheduled,
            finished_at=ended,
            **fields,
        )


def _attempts(tenant, run: Run, count: int) -> None:
    with schema_context(tenant.schema_name):
        for number in range(1, count + 1):
            Attempt.objects.create(
                run=run,
                number=number,
                outcome=states.ATTEMPT_FAILED if number < count else states.ATTEMPT_SUCCEEDED,
                started_at=run.scheduled_for,
                finished_at=run.finished_at,
            )


def _ids(tenant) -> set:
    with schema_context(tenant.schema_name):
        return set(Run.objects.values_list("id", flat=True))


def _retention(**config) -> Retention:
    config.setdefault("default_days", 30)
    config.setdefault("budget_seconds", 30.0)
    return Retention(RetentionConfig(**config))


def _prune(engine, **config) -> int:
    engine.retention = _retention(**config)
    return engine.retention.step(engine)


@pytest.fixture
def engine(live, redis_client):
    return new_engine(redis_client, FakeClock(NOW))


def test_old_ended_runs_go_with_their_attempts_and_the_rest_stays(live, engine, caplog):
    alpha = live["alpha"].tenant
    clock = FakeClock(NOW)
    job = make_job(alpha, clock, name="history", schedule=None)
    lonely = make_job(alpha, clock, name="lonely", schedule=None)
    old = [
        _run(alpha, job, status, ended_days=40 + n) for n, status in enumerate(states.PRUNABLE * 2)
    ]
    _attempts(alpha, old[0], 3)
    kept = {
        "dead": _run(alpha, job, states.DEAD, ended_days=90),
        "retrying": _run(alpha, job, states.RETRYING, ended_days=None, scheduled_days=60),
        "running": _run(alpha, job, states.RUNNING, ended_days=None, scheduled_days=50),
        "recent": _run(alpha, job, states.SUCCEEDED, ended_days=29),
        # a job's newest ended run stays however old: it is the job's last run
        "newest": _run(alpha, lonely, states.SUCCEEDED, ended_days=400),
    }
    _attempts(alpha, kept["recent"], 1)
    older_lonely = _run(alpha, lonely, states.SKIPPED, ended_days=500)
    before = LEADER._pending.copy()
    with caplog.at_level("INFO", logger="beat.retention"):
        assert _prune(engine, batch=4) == len(old) + 1
    assert _ids(alpha) == {r.id for r in kept.values()}
    with schema_context(alpha.schema_name):
        assert list(Attempt.objects.values_list("run_id", flat=True)) == [kept["recent"].id]
    assert older_lonely.id not in _ids(alpha)
    [event] = [r for r in caplog.records if getattr(r, "event", "") == "retention.pruned"]
    assert event.fields["tenant"] == "alpha"
    assert (event.fields["runs"], event.fields["attempts"]) == (len(old) + 1, 3)
    assert event.fields["batches"] == 2  # 4, then 3: a tenant's turns go on until it is done
    pruned = [k for k in LEADER._pending if "tickwork_runs_pruned" in k]
    assert sum(LEADER._pending[k] - before.get(k, 0) for k in pruned) == len(old) + 1


def test_each_tenant_keeps_its_own_retention(live, engine):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(NOW)
    runs = {}
    for tenant in (alpha, beta):
        job = make_job(tenant, clock, name="j", schedule=None)
        runs[tenant.slug] = [
            _run(tenant, job, states.SUCCEEDED, ended_days=days) for days in (5, 60, 200)
        ]
        _run(tenant, job, states.SUCCEEDED, ended_days=1)  # the newest
    Tenant.objects.filter(id=alpha.id).update(run_retention_days=90)
    try:
        _prune(engine)
    finally:
        Tenant.objects.filter(id=alpha.id).update(run_retention_days=None)
    a5, a60, a200 = runs["alpha"]
    b5, b60, b200 = runs["beta"]
    assert {a5.id, a60.id} <= _ids(alpha) and a200.id not in _ids(alpha)
    assert b5.id in _ids(beta) and not {b60.id, b200.id} & _ids(beta)


def test_a_default_of_zero_keeps_everything(live, engine):
    alpha = live["alpha"].tenant
    job = make_job(alpha, FakeClock(NOW), name="j", schedule=None)
    runs = [_run(alpha, job, states.SUCCEEDED, ended_days=d) for d in (3000, 2000)]
    assert _prune(engine, default_days=0) == 0
    assert _ids(alpha) == {r.id for r in runs}


def test_dag_runs_keep_their_runs_while_running_or_holding_a_dead_run(live, engine):
    alpha = live["alpha"].tenant
    clock = FakeClock(NOW)
    job = make_job(alpha, clock, name="dag", schedule=None)
    _run(alpha, job, states.SUCCEEDED, ended_days=1)  # the newest: the others may go

    def dag_run(status, *runs_statuses):
        with schema_context(alpha.schema_name):
            dag = DagRun.objects.create(
                root_job_id=job.id,
                root_run=uuid.uuid4(),
                trigger="manual",
                status=status,
                nodes=[job.id],
                edges=[],
                started_at=NOW - timedelta(days=100),
                finished_at=None if status == states.DAG_RUNNING else NOW - timedelta(days=99),
            )
        runs = [_run(alpha, job, s, ended_days=99, dag_run=dag.id) for s in runs_statuses]
        return dag, runs

    running, running_runs = dag_run(states.DAG_RUNNING, states.SUCCEEDED)
    failed, failed_runs = dag_run(states.DAG_FAILED, states.SUCCEEDED, states.DEAD)
    _done, done_runs = dag_run(states.DAG_SUCCEEDED, states.SUCCEEDED, states.SUCCEEDED)
    _prune(engine)
    left = _ids(alpha)
    assert {r.id for r in running_runs + failed_runs} <= left
    assert not {r.id for r in done_runs} & left
    with schema_context(alpha.schema_name):
        # the DAG run whose runs are all gone goes too; the others stay
        assert set(DagRun.objects.values_list("id", flat=True)) == {running.id, failed.id}


def test_a_deposed_leader_does_not_prune(live, redis_client):
    alpha = live["alpha"].tenant
    job = make_job(alpha, FakeClock(NOW), name="j", schedule=None)
    runs = [_run(alpha, job, states.SUCCEEDED, ended_days=d) for d in (100, 90, 1)]
    deposed = new_engine(redis_client, FakeClock(NOW))
    new_engine(redis_client, FakeClock(NOW))  # another process took over: a new epoch
    with pytest.raises(FencingError):
        _prune(deposed)
    assert _ids(alpha) == {r.id for r in runs}


def test_a_broken_tenant_does_not_stop_the_others(live, engine):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(NOW)
    for tenant in (alpha, beta):
        job = make_job(tenant, clock, name="j", schedule=None)
        _run(tenant, job, states.SUCCEEDED, ended_days=100)
        _run(tenant, job, states.SUCCEEDED, ended_days=1)
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{alpha.schema_name}".runs_attempt RENAME TO gone')
    try:
        assert _prune(engine) == 1
        assert len(_ids(beta)) == 1 and len(_ids(alpha)) == 2
        assert not engine.retention.faults.allowed(alpha.id)  # retention's own back-off
        assert engine.faults.allowed(alpha.id)  # firing is not held up by it
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{alpha.schema_name}".gone RENAME TO runs_attempt')


@contextmanager
def _batch_in_flight(schema: str, cutoff, limit: int):
    """A pruning batch on its own connection, its transaction left open at its end: the
    longest any writer could have to wait for it."""
    pruner = other_connection()
    try:
        with pruner.cursor() as cursor:
            started = time.monotonic()
            done = prune_batch(cursor, schema, cutoff=cutoff, limit=limit)
            yield done, time.monotonic() - started
        pruner.commit()
    finally:
        pruner.close()


def test_a_batch_in_flight_never_blocks_the_leaders_writes_to_the_same_tenant(live):
    """The race: the leader materialises, admits and finishes runs of a tenant (inserts of
    runs, updates of waiting, queued and running runs, attempts written) while a pruning
    batch of the same tenant holds its locks. The writer runs with a lock_timeout: had it
    to wait for the batch, it would fail instead of being slow."""
    alpha = live["alpha"].tenant
    job = make_job(alpha, FakeClock(NOW), name="busy", schedule=None)
    with connection.cursor() as cursor:  # old history, with attempts
        cursor.execute(
            f"""INSERT INTO "{alpha.schema_name}".runs_run (id, job_id, trigger, scheduled_for,
                due_at, status, skip_reason, attempt, worker, error, created_at, finished_at)
            SELECT gen_random_uuid(), %s, 'manual', t, t, %s, '', 1, '', '', t, t
            FROM generate_series(%s::timestamptz, %s, interval '1 minute') t""",
            [job.id, states.SUCCEEDED, NOW - timedelta(days=60), NOW - timedelta(days=50)],
        )
    waiting = _run(alpha, job, states.SCHEDULED, ended_days=None, scheduled_days=-1)
    queued = _run(alpha, job, states.QUEUED, ended_days=None, scheduled_days=0)
    running = _run(alpha, job, states.RUNNING, ended_days=None, scheduled_days=0)
    writer = other_connection(lock_timeout="200ms", statement_timeout="2s")
    schema = f'"{alpha.schema_name}"'
    try:
        with _batch_in_flight(alpha.schema_name, NOW - timedelta(days=30), 5000) as (done, took):
            assert done.runs == 5000
            started = time.monotonic()
            with writer.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {schema}.runs_run (id, job_id, trigger, scheduled_for, due_at,"
                    " status, skip_reason, attempt, worker, error, created_at)"
                    " SELECT gen_random_uuid(), %s, 'schedule', t, t, %s, '', 1, '', '', now()"
                    " FROM generate_series(now(), now() + interval '1 hour', '1 minute') t",
                    [job.id, states.SCHEDULED],
                )
                cursor.execute(
                    f"UPDATE {schema}.runs_run SET status = %s, queued_at = now() WHERE id = %s",
                    [states.QUEUED, waiting.id],
                )
                cursor.execute(
                    f"UPDATE {schema}.runs_run SET status = %s WHERE id = %s",
                    [states.RUNNING, queued.id],
                )
                cursor.execute(
                    f"UPDATE {schema}.runs_run SET status = %s, finished_at = now() WHERE id = %s",
                    [states.SUCCEEDED, running.id],
                )
                cursor.execute(
                    f"INSERT INTO {schema}.runs_attempt (run_id, number, outcome, worker,"
                    " started_at, finished_at, error, output) VALUES (%s, 1, %s, '', now(),"
                    " now(), '', '')",
                    [running.id, states.ATTEMPT_SUCCEEDED],
                )
            writer.commit()
            waited = time.monotonic() - started
        assert waited < max(took, 0.2), (waited, took)
    finally:
        writer.close()


def test_a_batch_skips_rows_another_transaction_holds_instead_of_waiting(live):
    """The other way round: an old run row locked elsewhere (a psql session, a request) is
    left for a later batch; the batch neither waits nor fails."""
    alpha = live["alpha"].tenant
    job = make_job(alpha, FakeClock(NOW), name="held", schedule=None)
    held, free = (_run(alpha, job, states.SUCCEEDED, ended_days=d) for d in (100, 90))
    _run(alpha, job, states.SUCCEEDED, ended_days=1)
    holder = other_connection()
    holder.execute(
        f'SELECT 1 FROM "{alpha.schema_name}".runs_run WHERE id = %s FOR UPDATE', [held.id]
    )
    try:
        pruner = other_connection(lock_timeout="100ms")
        try:
            with pruner.cursor() as cursor:
                done = prune_batch(
                    cursor, alpha.schema_name, cutoff=NOW - timedelta(days=30), limit=100
                )
            pruner.commit()
        finally:
            pruner.close()
    finally:
        holder.rollback()
        holder.close()
    assert done.runs == 1
    assert held.id in _ids(alpha) and free.id not in _ids(alpha)


def test_the_pass_takes_tenants_in_turns_within_its_budget(live, engine):
    """One tenant's backlog costs the others one batch of waiting, not the whole backlog:
    with a budget that allows one batch per step, the tenants alternate."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(NOW)
    for tenant, count in ((alpha, 6), (beta, 2)):
        job = make_job(tenant, clock, name="j", schedule=None)
        for n in range(count):
            _run(tenant, job, states.SUCCEEDED, ended_days=100 + n)
        _run(tenant, job, states.SUCCEEDED, ended_days=1)
    engine.retention = _retention(batch=2, budget_seconds=0)
    assert engine.retention.step(engine) == 2  # alpha's first batch
    assert engine.retention.step(engine) == 2  # then beta's, before alpha's second
    assert len(_ids(beta)) == 1 and len(_ids(alpha)) == 5
    for _ in range(5):
        engine.retention.step(engine)
    assert len(_ids(alpha)) == 1


def test_no_batch_starts_when_a_run_is_due_before_it_would_end(live, engine, monkeypatch):
    alpha = live["alpha"].tenant
    job = make_job(alpha, FakeClock(NOW), name="j", schedule=None)
    runs = [_run(alpha, job, states.SUCCEEDED, ended_days=d) for d in (100, 1)]
    engine.retention = _retention()
    engine.retention.sizer.seconds_per_run = 0.01  # a small batch (100 runs) takes 1 s
    engine.retention.sizer.last_batch = NOW.timestamp()  # and one ran just now
    monkeypatch.setattr(type(engine.runs), "next_due", NOW.timestamp() + 0.1)  # in 100 ms
    assert engine.retention.step(engine) == 0
    assert _ids(alpha) == {r.id for r in runs}
    monkeypatch.undo()
    assert engine.retention.step(engine) == 1  # nothing due: it goes on
