"""The jobs index stays right under rebuilds, sweeps and Redis losses (defect: concurrent
rebuilds shared temporary keys and published a partial index nothing repaired, and a
rebuild inside one iteration outlasted the lease)."""

from __future__ import annotations

import itertools
import random
import threading
from collections import Counter
from datetime import timedelta

from django.db import connection
from django_tenants.utils import schema_context
from psycopg import sql

from beat import materialise as materialise_step
from beat import rebuild as rebuild_module
from beat.engine import EngineConfig
from beat.fenced import FencedRedis
from beat.lease import Lease
from beat.loop import SchedulerProcess
from beat.pending import PendingRuns
from beat.rebuild import IndexRebuild
from beat.status import scheduler_status
from bench.world import copy_jobs
from core import index
from core.clock import FakeClock
from core.keys import index_built_key, index_key, rebuild_state_key
from core.sql import table
from jobs.services import job_pause, job_update
from runs import states
from runs.services import job_trigger

from .helpers import ACTOR, make_job, message_args, new_engine, queued_messages, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)


def _truth(tenants) -> dict[str, float]:
    """What the index must hold: every schedulable job at (or before) its next_run_at."""
    out = {}
    for tenant in tenants:
        query = sql.SQL(
            "SELECT id, next_run_at FROM {} WHERE deleted_at IS NULL AND NOT paused "
            "AND next_run_at IS NOT NULL AND fault_code = ''"
        ).format(table(tenant.schema_name, "jobs_job"))
        with connection.cursor() as cursor:
            cursor.execute(query)
            out.update({index.member(tenant.id, i): at.timestamp() for i, at in cursor.fetchall()})
    return out


def _missing_or_late(redis_client, tenants) -> list[str]:
    truth = _truth(tenants)
    scores = dict(zip(truth, redis_client.zmscore(index_key(), list(truth)), strict=True))
    return [m for m, at in truth.items() if scores[m] is None or scores[m] > at + 0.001]


def _unfenced_rebuild(redis_client, name: str, *, lost: bool, prune: bool) -> IndexRebuild:
    rebuild = IndexRebuild(
        redis_client,
        FencedRedis(redis_client, lock_key="", token=None),
        state_key=f"{rebuild_state_key()}:{name}",
        messages=PendingRuns(shard_count=4, origin=name),
    )
    rebuild.start(lost=lost, prune=prune)
    return rebuild


def test_concurrent_rebuilds_during_edits_leave_no_job_missing_or_late(
    live, redis_client, monkeypatch
):
    """Two rebuilds run at once in two threads (two connections), in small pages, while
    the main thread edits jobs: afterwards every schedulable job is in the index, none with
    a score later than its row's next_run_at."""
    monkeypatch.setattr(rebuild_module, "PAGE", 25)
    tenants = [live["alpha"].tenant, live["beta"].tenant]
    clock = FakeClock(START)
    for tenant in tenants:
        with schema_context(tenant.schema_name):
            copy_jobs(tenant, 300, START + timedelta(minutes=5), cron="*/5 * * * *")
    edited = [
        make_job(tenants[0], clock, name=f"e{i}", schedule={"cron": "0 0 * * *"}) for i in range(20)
    ]
    redis_client.flushdb()  # Redis lost everything
    errors: list[BaseException] = []

    def rebuild(name: str) -> None:
        try:
            _unfenced_rebuild(redis_client, name, lost=True, prune=(name == "b")).run_to_end(0.01)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=rebuild, args=(n,)) for n in "ab"]
    for thread in threads:
        thread.start()
    rng = random.Random(7)
    for job in edited:  # edits land while both rebuilds run
        with schema_context(tenants[0].schema_name):
            if rng.random() < 0.3:
                job_pause(tenant=tenants[0], actor=ACTOR, job_id=job.id, clock=clock)
            else:
                job_update(
                    tenant=tenants[0],
                    actor=ACTOR,
                    job_id=job.id,
                    data={"schedule": {"cron": f"{rng.randint(1, 59)} * * * *"}},
                    clock=clock,
                )
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert _missing_or_late(redis_client, tenants) == []
    assert redis_client.exists(index_built_key())


def test_rebuild_page_read_before_an_edit_and_written_after_it_does_not_undo_it(live, redis_client):
    """The interleaving that broke the old rebuild, forced: the rebuild reads a page of
    jobs, an edit moves one of them earlier and writes the index, then the rebuild writes
    its page. The edit's earlier score must stand."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"cron": "0 0 * * *"})  # next: midnight
    redis_client.flushdb()
    rebuild = _unfenced_rebuild(redis_client, "r", lost=True, prune=False)
    write_page = rebuild.writes.lower_jobs
    edited = []

    def edit_then_write(scores):
        if not edited:
            edited.append(1)
            with schema_context(alpha.schema_name):
                job_update(
                    tenant=alpha,
                    actor=ACTOR,
                    job_id=job.id,
                    data={"schedule": {"cron": "5 12 * * *"}},  # next: 12:05 today
                    clock=clock,
                )
        write_page(scores)

    rebuild.writes.lower_jobs = edit_then_write
    rebuild.run_to_end()
    assert edited
    score = redis_client.zscore(index_key(), index.member(alpha.id, job.id))
    assert score == utc(2026, 6, 1, 12, 5).timestamp()


def test_leader_rebuilds_in_steps_keeps_its_lease_and_fires_meanwhile(
    live, redis_client, monkeypatch
):
    monkeypatch.setattr(rebuild_module, "PAGE", 50)
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    with schema_context(alpha.schema_name):
        copy_jobs(alpha, 20, START + timedelta(minutes=1), cron="* * * * *")  # due first
        copy_jobs(alpha, 500, START + timedelta(hours=1), cron="0 * * * *", name="later")
    redis_client.flushdb()
    process = SchedulerProcess(
        client=redis_client,
        clock=clock,
        config=EngineConfig(rebuild_budget_seconds=0.0),  # one page per iteration
        lease_seconds=2,
        holder="a:1",
    )
    renewals = []
    original = Lease.renew
    monkeypatch.setattr(Lease, "renew", lambda self: (renewals.append(1), original(self)))
    assert process.try_lead()
    clock.set(START + timedelta(minutes=1))
    iterations = 0
    while process.engine.rebuild is not None:
        process.lead_once()
        iterations += 1
        if iterations == 2:  # the soonest jobs were indexed first: they already fire
            assert len(runs_of(alpha, status=states.QUEUED)) == 20
    assert iterations > 5  # the rebuild went in steps ...
    assert len(renewals) >= iterations and process.lease.held  # ... renewing the lease
    assert _missing_or_late(redis_client, [alpha]) == []


def test_next_leader_resumes_a_rebuild_where_the_last_one_stopped(live, redis_client, monkeypatch):
    monkeypatch.setattr(rebuild_module, "PAGE", 50)
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    with schema_context(alpha.schema_name):
        copy_jobs(alpha, 400, START + timedelta(hours=1), cron="0 * * * *")
    redis_client.flushdb()
    config = EngineConfig(rebuild_budget_seconds=0.0)
    a = SchedulerProcess(client=redis_client, clock=clock, config=config, holder="a:1")
    assert a.try_lead()
    a.lead_once()
    a.lead_once()
    rebuild_id = redis_client.hget(rebuild_state_key(), "id")
    done_by_a = redis_client.zcard(index_key())
    assert 0 < done_by_a < 400
    a.step_down("test")
    b = SchedulerProcess(client=redis_client, clock=clock, config=config, holder="b:2")
    assert b.try_lead()
    b.lead_once()
    assert redis_client.hget(rebuild_state_key(), "id") == rebuild_id  # resumed, not restarted
    while b.engine.rebuild is not None:
        b.lead_once()
    assert _missing_or_late(redis_client, [alpha]) == []


def test_reconciliation_sweep_puts_back_jobs_the_index_lost(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    lost = make_job(alpha, clock, name="lost", schedule={"cron": "* * * * *"})
    late = make_job(alpha, clock, name="late", schedule={"cron": "* * * * *"})
    redis_client.zrem(index_key(), index.member(alpha.id, lost.id))  # a write never made
    redis_client.zadd(index_key(), {index.member(alpha.id, late.id): START.timestamp() + 3600})
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 40))
    assert engine.materialise() == 0  # the index hides both
    assert engine.reconcile() == 2
    assert engine.materialise() == 2
    clock.set(utc(2026, 6, 1, 12, 1))
    assert engine.fire().published == 2


def test_scheduler_status_counts_overdue_jobs_from_postgresql(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(utc(2020, 1, 1))  # long overdue, seen from the real clock
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    redis_client.flushdb()  # the index cannot tell
    status = scheduler_status(redis_client, utc(2026, 12, 1))
    assert status["due_unmaterialised_jobs"] == 1
    assert status["oldest_unfired_lag_seconds"] > 3600
    assert status["index_size"] == 0


def test_redis_emptied_in_the_middle_of_an_iteration_loses_and_doubles_nothing(
    live, redis_client, monkeypatch
):
    """Redis is flushed after the leader read the due head and committed its runs, before
    its index writes: the fenced writes are refused (no lease any more), it steps down,
    is elected again, rebuilds, and every slot has exactly one run."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    for i in range(3):
        make_job(alpha, clock, name=f"j{i}", schedule={"interval_seconds": 2})
    process = SchedulerProcess(client=redis_client, clock=clock, lease_seconds=2, holder="a:1")
    stop = threading.Event()
    stop.set()
    original = materialise_step._after_commit
    flushed = []

    def flush_first(*args, **kwargs):
        if not flushed:
            flushed.append(1)
            redis_client.flushdb()
        return original(*args, **kwargs)

    monkeypatch.setattr(materialise_step, "_after_commit", flush_first)
    for _ in range(20):
        process.run_once(stop)
        clock.advance(1)
    assert flushed
    runs = runs_of(alpha)
    per_slot = {}
    for run in runs:
        per_slot.setdefault((run.job_id, run.scheduled_for), []).append(run)
    assert max(len(v) for v in per_slot.values()) == 1
    for job_id in {r.job_id for r in runs}:
        slots = sorted(
            s for j, s in per_slot if j == job_id and s <= clock.now() - timedelta(seconds=3)
        )
        assert all((b - a) == timedelta(seconds=2) for a, b in itertools.pairwise(slots))
    assert _missing_or_late(redis_client, [alpha]) == []


def test_a_rebuild_after_redis_lost_its_data_republishes_only_runs_queued_before_it(
    live, redis_client
):
    """The republish phase sends again the runs whose messages went with Redis, not those
    the leader published into the new Redis after the rebuild began (defect: a burst due
    during a rebuild was published twice, 40,000 duplicates in a 100,000-run backlog)."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    before, after = (make_job(alpha, clock, name=n, schedule=None) for n in ("before", "after"))
    engine = new_engine(redis_client, clock)
    with schema_context(alpha.schema_name):
        lost, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=before.id, clock=clock)
    engine.load_run_index()
    assert engine.fire().published == 1
    redis_client.flushdb()  # the broker's message of `lost` goes with Redis
    engine = new_engine(redis_client, clock)
    engine.start_rebuild(lost=True)
    with schema_context(alpha.schema_name):
        fresh, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=after.id, clock=clock)
    engine.load_run_index()
    assert engine.fire().published == 1  # into the Redis there is now
    while not engine.rebuild_step():
        pass
    sent = Counter(message_args(m)[1] for m in queued_messages(redis_client))
    assert sent == {str(lost.id): 1, str(fresh.id): 1}
