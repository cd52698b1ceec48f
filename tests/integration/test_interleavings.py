"""Interleavings an adversarial review found, each driven for real (a second connection
holding a lock, a thread committing an edit between two of the leader's steps, Redis
emptied inside a page): every one broke a promise of docs/invariants.md before its fix."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from datetime import timedelta

import pytest
import redis
from django.db import connection, transaction
from django_tenants.utils import schema_context

from beat import materialise as materialise_step
from beat import rebuild as rebuild_module
from beat import sweeps as sweeps_module
from beat.fenced import FencedRedis
from beat.loop import SchedulerProcess
from beat.rebuild import IndexRebuild
from bench.world import copy_jobs
from core import index
from core.clock import FakeClock
from core.keys import index_key, leader_lock_name
from jobs.models import Job
from jobs.services import job_update
from runs import states
from runs.models import Run

from .helpers import (
    ACTOR,
    make_job,
    message_args,
    new_engine,
    other_connection,
    queued_messages,
    runs_of,
    utc,
)
from .test_index_upkeep import _missing_or_late

START = utc(2026, 6, 1, 12, 1, 0)
EDIT_AT = utc(2026, 6, 1, 12, 1, 45)


def _set_status(tenant, run: Run, status: str) -> None:
    with schema_context(tenant.schema_name):
        Run.objects.filter(pk=run.pk).update(status=status)


# --- 1. misfire at admission with a grace of 0 ------------------------------------------


def test_skip_job_with_zero_grace_fires_when_the_leader_wakes_a_moment_after_the_instant(
    live, redis_client
):
    """A real leader wakes a few ms after a run's instant (BLPOP timeout, the fire of the
    runs before it). FakeClock tests set the clock exactly on the instant, so they never
    see `due < now - 0`. Only runs that waited with no leader holding them are judged by
    the misfire policy at admission."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(
        alpha, clock, schedule={"cron": "* * * * *"}, misfire_policy="skip", misfire_grace_seconds=0
    )
    engine = new_engine(redis_client, clock)
    clock.set(EDIT_AT)
    engine.materialise()
    clock.set(utc(2026, 6, 1, 12, 2) + timedelta(milliseconds=3))  # woke 3 ms late
    stats = engine.fire()
    [run] = runs_of(alpha, scheduled_for=utc(2026, 6, 1, 12, 2))
    assert (run.status, run.skip_reason, stats.published) == (states.QUEUED, "", 1)


# --- 2. held `queue` runs are judged by the misfire policy when released ---------------


def test_queue_policy_runs_held_past_the_grace_all_run_in_turn(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(utc(2026, 6, 1, 12, 0))
    job = make_job(alpha, clock, schedule={"cron": "* * * * *"}, concurrency_policy="queue")
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 1))
    engine.materialise()
    engine.fire()
    [first] = runs_of(alpha)
    _set_status(alpha, first, states.RUNNING)  # a run that takes 2.5 minutes
    for minute in (2, 3):
        clock.set(utc(2026, 6, 1, 12, minute))
        engine.materialise()
        assert engine.fire().held == 1
    clock.set(utc(2026, 6, 1, 12, 3, 40))
    _set_status(alpha, first, states.SUCCEEDED)
    assert engine.release_held(alpha.id, job.id) == 2
    engine.fire()
    held_12_02 = runs_of(alpha, scheduled_for=utc(2026, 6, 1, 12, 2))[0]
    # `queue` promises the 12:02 run waits its turn; it is skipped as a misfire instead.
    assert (held_12_02.status, held_12_02.skip_reason) == (states.QUEUED, "")


# --- 3. the leader's CAS undoes an edit whose ZADD LT changed nothing ------------------


@pytest.mark.parametrize("grouped", [False, True], ids=["alone", "grouped"])
def test_leader_cas_after_an_edit_to_a_later_but_sooner_than_n1_slot(
    live, redis_client, monkeypatch, grouped
):
    """The leader reads score s = 12:02 and commits next_run_at = 12:03. Before its CAS an
    edit commits next_run_at = 12:02:20 (>= s, so its ZADD LT is a no-op and clears
    index_dirty). The CAS still finds s and moves the score to 12:03: later than the row.
    `grouped`: another tenant's job is due too, so both share one transaction, one CAS
    and one re-read (`_materialise_group`)."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(
        alpha,
        clock,
        schedule={"cron": "* * * * *"},
        misfire_policy="skip",
        misfire_grace_seconds=5,
    )
    if grouped:
        make_job(live["beta"].tenant, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    clock.set(EDIT_AT)
    committed, go_on = threading.Event(), threading.Event()
    original = materialise_step._after_commit_many

    def held_back(*args, **kwargs):
        committed.set()
        go_on.wait(10)
        return original(*args, **kwargs)

    monkeypatch.setattr(materialise_step, "_after_commit_many", held_back)

    def leader() -> None:
        try:
            engine.materialise()
        finally:
            connection.close()

    thread = threading.Thread(target=leader)
    thread.start()
    assert committed.wait(10)
    with schema_context(alpha.schema_name):
        job_update(
            tenant=alpha,
            actor=ACTOR,
            job_id=job.id,
            data={"schedule": {"interval_seconds": 60, "start_at": "2026-06-01T12:02:20Z"}},
            clock=clock,
        )
    go_on.set()
    thread.join(10)
    monkeypatch.setattr(materialise_step, "_after_commit_many", original)
    with schema_context(alpha.schema_name):
        row = Job.objects.get(id=job.id)
    score = redis_client.zscore(index_key(), index.member(alpha.id, job.id))
    assert row.next_run_at == utc(2026, 6, 1, 12, 2, 20)
    assert not row.index_dirty  # the sync sweep will not help either
    # ADR 0008: "Index writes can only leave a score too early, never too late".
    assert score <= row.next_run_at.timestamp(), (score, row.next_run_at.timestamp())


def test_the_same_race_loses_the_slot_when_no_reconcile_pass_lands_in_between(
    live, redis_client, monkeypatch
):
    """Continuation of the race above with the leader stepping on (lookahead 30 s): the
    12:02:20 slot is only seen at 12:02:30 (12:03 - lookahead) and is skipped as missed."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(
        alpha, clock, schedule={"cron": "* * * * *"}, misfire_policy="skip", misfire_grace_seconds=5
    )
    engine = new_engine(redis_client, clock)
    clock.set(EDIT_AT)
    original = materialise_step._after_commit

    def edit_then_cas(*args, **kwargs):
        result: list = []

        def edit() -> None:
            try:
                with schema_context(alpha.schema_name):
                    job_update(
                        tenant=alpha,
                        actor=ACTOR,
                        job_id=job.id,
                        data={
                            "schedule": {"interval_seconds": 60, "start_at": "2026-06-01T12:02:20Z"}
                        },
                        clock=clock,
                    )
                result.append("ok")
            finally:
                connection.close()

        other = threading.Thread(target=edit)  # its own connection, as a web process
        other.start()
        other.join(10)
        assert result == ["ok"]
        return original(*args, **kwargs)

    monkeypatch.setattr(materialise_step, "_after_commit", edit_then_cas)
    engine.materialise()
    monkeypatch.setattr(materialise_step, "_after_commit", original)
    for second in range(46, 100, 2):  # the leader steps every 2 s to 12:02:39
        clock.set(utc(2026, 6, 1, 12, 1) + timedelta(seconds=second))
        engine.materialise()
        engine.fire()
    [run] = runs_of(alpha, scheduled_for=utc(2026, 6, 1, 12, 2, 20))
    assert (run.status, run.skip_reason) == (states.QUEUED, "")


# --- 4. a transient Redis error in a rebuild page skips the rest of the tenant ----------


def test_transient_redis_error_during_a_rebuild_page_leaves_no_job_unindexed(
    live, redis_client, monkeypatch
):
    monkeypatch.setattr(rebuild_module, "PAGE", 2)
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    for i in range(5):
        make_job(alpha, clock, name=f"j{i}", schedule={"cron": "0 * * * *"})
    redis_client.flushdb()  # Redis lost its data
    engine = new_engine(redis_client, clock)
    calls = {"n": 0}
    original = FencedRedis.lower_jobs

    def flaky(self, scores):
        calls["n"] += 1
        if calls["n"] == 2:
            raise redis.ConnectionError("Connection reset by peer")  # one blip
        return original(self, scores)

    monkeypatch.setattr(FencedRedis, "lower_jobs", flaky)
    engine.start_rebuild(lost=True)
    try:
        while not engine.rebuild_step():
            pass
    except redis.ConnectionError:  # what should happen: the leader steps down ...
        engine = new_engine(redis_client, clock)  # ... and the next one resumes
        engine.start_rebuild(lost=True)
        while not engine.rebuild_step():
            pass
    assert index.is_built(redis_client)
    assert _missing_or_late(redis_client, [alpha]) == []


# --- 5. Redis emptied during the last page of a phase: index marked built, empty --------


def test_redis_emptied_during_the_last_rebuild_page_of_a_phase(live, redis_client, monkeypatch):
    monkeypatch.setattr(rebuild_module, "PAGE", 50)
    alpha = live["alpha"].tenant
    clock = FakeClock(utc(2026, 6, 1, 12, 0))
    with schema_context(alpha.schema_name):
        copy_jobs(alpha, 120, utc(2026, 6, 1, 13, 0), cron="0 * * * *")
    redis_client.flushdb()
    original = IndexRebuild._jobs_page
    alpha_pages = {"n": 0}

    def page(self, tenant_id, schema, after):
        if tenant_id == alpha.id:
            alpha_pages["n"] += 1
            if alpha_pages["n"] == 3:  # alpha's last page: Redis restarts empty here
                redis_client.flushdb()
        return original(self, tenant_id, schema, after)

    monkeypatch.setattr(IndexRebuild, "_jobs_page", page)
    process = SchedulerProcess(client=redis_client, clock=clock, lease_seconds=2, holder="a:1")
    stop = threading.Event()
    stop.set()
    for _ in range(6):
        process.run_once(stop)
    assert alpha_pages["n"] >= 3
    built = index.is_built(redis_client)
    missing = _missing_or_late(redis_client, [alpha])
    # Either the rebuild is still going (not built), or it indexed everything.
    assert not built or missing == [], (built, len(missing))


# --- 6. takeover relay truncated per tenant ---------------------------------------------


def test_takeover_relay_holds_every_run_of_the_window(live, redis_client, monkeypatch):
    monkeypatch.setattr(sweeps_module, "RELAY_PAGE", 2)  # stands for 10,000
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    for i in range(3):
        make_job(
            alpha,
            clock,
            name=f"j{i}",
            schedule={"cron": "* * * * *"},
            misfire_policy="skip",
            misfire_grace_seconds=3,
        )
    old = new_engine(redis_client, clock)
    clock.set(EDIT_AT)
    old.materialise()  # 3 runs for 12:02 prepared; then the leader dies
    new = new_engine(redis_client, clock, relay_interval_seconds=10)
    new.relay(force=True)
    clock.set(utc(2026, 6, 1, 12, 2))
    new.materialise()
    published = new.fire().published
    clock.set(utc(2026, 6, 1, 12, 2, 5))  # the first periodic relay that sees it overdue
    new.relay()
    new.fire()
    statuses = sorted(r.status for r in runs_of(alpha, scheduled_for=utc(2026, 6, 1, 12, 2)))
    assert (published, statuses) == (3, [states.QUEUED] * 3)


def _job_next(tenant, job_id):
    with schema_context(tenant.schema_name):
        return Job.objects.get(id=job_id).next_run_at


# --- 7. one tenant's locked run row starves every tenant of its fire chunk --------------


def test_a_row_lock_in_one_tenant_does_not_stop_another_tenants_fire(live, redis_client):
    """ADR 0010: a failing tenant costs only itself. Before the fix the chunk waited
    lock_timeout (lease/2) twice, non-isolated then isolated, inside ONE chunk between two
    lease renewals: the lease was gone before the push, the push refused, the whole chunk
    rolled back, and the next leader (with no memory of the fault) did the same. Now fire
    waits SCHEDULER_FIRE_LOCK_TIMEOUT_SECONDS, the locked tenant starts its back-off at
    once, and the lease is renewed between schemas."""
    import time

    from django.conf import settings

    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    make_job(beta, clock, schedule={"cron": "* * * * *"})
    process = SchedulerProcess(client=redis_client, clock=clock, lease_seconds=2, holder="a:1")
    assert process.try_lead()
    clock.set(EDIT_AT)
    process.lead_once()  # both 12:02 runs prepared, in memory
    [beta_run] = runs_of(beta, scheduled_for=utc(2026, 6, 1, 12, 2))
    # Someone (a psql session, a stuck request) holds beta's run row.
    holder = other_connection()
    holder.execute(
        f'SELECT 1 FROM "{beta.schema_name}".runs_run WHERE id = %s FOR UPDATE', [beta_run.id]
    )
    try:
        clock.set(utc(2026, 6, 1, 12, 2))
        stop = threading.Event()
        stop.set()
        started = time.monotonic()
        for _ in range(3):
            process.run_once(stop)
        elapsed = time.monotonic() - started
    finally:
        holder.rollback()
        holder.close()
    [alpha_run] = runs_of(alpha, scheduled_for=utc(2026, 6, 1, 12, 2))
    assert settings.SCHEDULER_DB_LOCK_TIMEOUT_SECONDS * 2 >= settings.SCHEDULER_LEASE_SECONDS
    assert alpha_run.status == states.QUEUED, (alpha_run.status, round(elapsed, 1))


# --- 8. heartbeats: a superseded attempt on the same worker process is not stopped -----


def test_superseded_attempt_is_stopped_when_the_same_process_runs_the_next_one(live, redis_client):
    from runs.execution import claim_run
    from runs.heartbeat import Heartbeats
    from runs.services import job_trigger

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, retry={"max_attempts": 3, "backoff_seconds": 0})
    with schema_context(alpha.schema_name):
        run, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
        Run.objects.filter(pk=run.pk).update(status=states.QUEUED)
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=60)
    assert claim_run(
        schema=alpha.schema_name, run_id=str(run.id), attempt=1, worker="w", now=clock.now()
    )
    worker = Heartbeats(60)  # one worker process, a thread pool
    stop1 = worker.track(alpha.schema_name, str(run.id), 1)
    with connection.cursor() as cursor:  # heartbeat_at is compared with the DB clock
        cursor.execute(
            f"UPDATE \"{alpha.schema_name}\".runs_run SET heartbeat_at = now() - interval '61 s'"
            " WHERE id = %s",
            [run.id],
        )
    assert engine.reap(force=True) == 1
    engine.fire()
    assert claim_run(
        schema=alpha.schema_name, run_id=str(run.id), attempt=2, worker="w", now=clock.now()
    )
    worker.track(alpha.schema_name, str(run.id), 2)  # another thread of the same process
    worker.beat_once()
    worker.stop()
    assert stop1.is_set()  # attempt 1 was superseded: it must be told to stop


# --- 9. a stale acquirer's bump ends the rightful leader's fenced transaction ----------


def test_a_process_that_lost_the_redis_lock_before_its_bump_does_not_end_the_leaders_session(
    live, redis_client
):
    """B takes the Redis lock, stalls before its epoch bump (GC, slow connect) past the
    lease; C takes the lock and leads, inside a fenced transaction. Before the fix B's bump
    waited 0.5 s and then pg_terminate_backend()ed C, the rightful leader, without checking
    that it still held the Redis lock."""
    import psycopg

    from beat.lease import Lease, LeaseLost, bump_epoch

    b = Lease(redis_client, holder="b", expire_seconds=2)
    assert b._lock.acquire(blocking=False)  # ... and B stalls here
    redis_client.delete(b.lock_key)  # B's lease expired meanwhile
    c = Lease(redis_client, holder="c", expire_seconds=2)
    assert c.try_acquire()
    leader_c = other_connection()  # C's fenced transaction
    leader_c.execute(
        "SELECT 1 FROM public.beat_schedulerlease WHERE id = 1 AND epoch = %s FOR SHARE",
        [c.epoch],
    )
    try:
        try:
            bump_epoch("b", holds_lease=b.holds_lock)  # B wakes and goes on
        except LeaseLost as exc:  # what we want: B refuses
            print("bump refused:", exc)
        alive = True
        try:
            leader_c.execute("SELECT 1")
        except psycopg.OperationalError:
            alive = False
    finally:
        leader_c.close()
    assert alive, "B (not holding the Redis lock) terminated C, the current leader"


# --- 10. a tenant that cannot be read during a rebuild ----------------------------------


def _rename(schema: str, table_name: str, to: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{schema}".{table_name} RENAME TO {to}')


def test_rebuild_retries_a_tenant_that_fails_for_a_while_and_indexes_it(
    live, redis_client, monkeypatch
):
    monkeypatch.setattr(rebuild_module, "FIRST_RETRY_SECONDS", 0.0)
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, name="a", schedule={"cron": "0 * * * *"})
    make_job(beta, clock, name="b", schedule={"cron": "0 * * * *"})
    redis_client.flushdb()
    original = IndexRebuild._jobs_page
    calls = {"beta": 0}

    def page(self, tenant_id, schema, after):
        if tenant_id == beta.id:
            calls["beta"] += 1
            if calls["beta"] <= 2:  # broken for its first two tries (a migration, say)
                _rename(schema, "jobs_job", "jobs_job_gone")
                try:
                    return original(self, tenant_id, schema, after)
                finally:
                    _rename(schema, "jobs_job_gone", "jobs_job")
        return original(self, tenant_id, schema, after)

    monkeypatch.setattr(IndexRebuild, "_jobs_page", page)
    rebuild = IndexRebuild(redis_client, FencedRedis(redis_client, lock_key="", token=None))
    rebuild.start(lost=True, prune=False)
    rebuild.run_to_end(0.01)
    assert calls["beta"] == 3
    assert index.is_built(redis_client)
    assert _missing_or_late(redis_client, [alpha, beta]) == []


def test_rebuild_gives_up_on_a_broken_tenant_and_builds_the_others(
    live, redis_client, monkeypatch, caplog
):
    monkeypatch.setattr(rebuild_module, "FIRST_RETRY_SECONDS", 0.0)
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, name="a", schedule={"cron": "0 * * * *"})
    make_job(beta, clock, name="b", schedule={"cron": "0 * * * *"})
    redis_client.flushdb()
    _rename(beta.schema_name, "jobs_job", "jobs_job_gone")
    try:
        rebuild = IndexRebuild(redis_client, FencedRedis(redis_client, lock_key="", token=None))
        rebuild.start(lost=True, prune=False)
        rebuild.run_to_end(0.01)
    finally:
        _rename(beta.schema_name, "jobs_job_gone", "jobs_job")
    assert index.is_built(redis_client)
    assert _missing_or_late(redis_client, [alpha]) == []
    assert len(_missing_or_late(redis_client, [beta])) == 1
    assert f"gave up on tenant {beta.id}" in caplog.text
    assert "WITHOUT tenants that could not be read" in caplog.text
    # The reconcile sweep puts beta's job back once it is due within the window.
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 59, 40))
    assert engine.reconcile() >= 1
    assert _missing_or_late(redis_client, [beta]) == []


# --- 11. no reaping right after the database server started ---------------------------


def test_runs_are_not_reaped_before_the_database_has_been_up_for_the_timeout(live, redis_client):
    """While PostgreSQL was down no worker could beat: a heartbeat older than the timeout
    only means the worker is lost once the server has been up that long."""
    from runs.services import job_trigger

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None)
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM now() - pg_postmaster_start_time())")
        uptime = float(cursor.fetchone()[0])
    with schema_context(alpha.schema_name):
        run, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
    with connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{alpha.schema_name}".runs_run SET status = %s, attempt = 1,'
            " heartbeat_at = now() - make_interval(secs => %s) WHERE id = %s",
            [states.RUNNING, uptime + 120, run.id],
        )
    # A timeout longer than the server has been up: the old heartbeat proves nothing.
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=uptime + 60)
    assert engine.reap(force=True) == 0
    assert runs_of(alpha, id=run.id)[0].status == states.RUNNING
    # A timeout shorter than the uptime: the worker really went silent.
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=max(uptime - 60, 1))
    assert engine.reap(force=True) == 1


# --- 12. a failing tenant's runs-index entries do not hide the others' ------------------


def test_a_failing_tenants_run_entries_move_out_of_the_way(live, redis_client):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    engine = new_engine(redis_client, clock, materialise_batch=3)
    pipe = redis_client.pipeline()
    fake = [(beta.id, f"00000000-0000-7000-8000-00000000000{i}", START) for i in range(3)]
    index.put_runs(pipe, fake)
    pipe.execute()
    job = make_job(alpha, clock, schedule=None)
    from runs.services import job_trigger

    with schema_context(alpha.schema_name):
        run, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
    with connection.cursor() as cursor:  # beta cannot be read
        cursor.execute(f'ALTER TABLE "{beta.schema_name}".runs_run RENAME TO runs_run_gone')
    try:
        engine.load_run_index()  # the batch of 3 holds only beta's entries: deferred
        engine.load_run_index()  # now alpha's manual run is in the batch
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{beta.schema_name}".runs_run_gone RENAME TO runs_run')
    assert run.id in engine.runs.known
    later = START.timestamp() + engine.config.lookahead_seconds + 1
    scores = redis_client.zmscore(index.runs_index_key(), [index.member(t, r) for t, r, _ in fake])
    assert all(score >= later for score in scores), scores


# --- 13. a new leader does not retry at once what its predecessor backed off ------------


def test_a_new_leader_adopts_the_published_tenant_back_offs(live, redis_client):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    old = new_engine(redis_client, clock)
    old.faults.failed(beta.id, beta.schema_name, RuntimeError("lock timeout"))
    old.faults.faults[beta.id].retry_at += 30  # a long back-off
    old.publish_faults()
    process = SchedulerProcess(client=redis_client, clock=clock, lease_seconds=2, holder="b:1")
    redis_client.delete("lock:" + leader_lock_name())
    assert process.try_lead()
    assert not process.engine.faults.allowed(beta.id)
    assert process.engine.faults.allowed(alpha.id)


# --- 14. a bump that is not blocked still refuses once the lock is gone ---------------


def test_a_bump_after_the_lock_expired_is_refused(live, redis_client):
    from beat.lease import Lease, LeaseLost, bump_epoch, current_epoch

    b = Lease(redis_client, holder="b", expire_seconds=2)
    assert b._lock.acquire(blocking=False)
    redis_client.delete(b.lock_key)  # expired while B stalled
    before = current_epoch()
    try:
        bump_epoch("b", holds_lease=b.holds_lock)
    except LeaseLost:
        pass
    else:
        raise AssertionError("B bumped the epoch without holding the lock")
    assert current_epoch() == before


# --- 10. a retry's message reaching a worker before the fire's commit -------------------


def test_a_retry_claimed_before_the_fire_commits_waits_for_it_and_runs(live, redis_client):
    """The leader publishes inside its fire transaction; a quick worker's claim arrives while
    the run is still `retrying` under that transaction's row lock. The claim must wait for
    the commit and take the run: a claim that did not match `retrying` returned at once,
    spending the retry's only message (the run then sat `queued` for a visibility timeout)."""
    from runs.execution import claim_run
    from runs.services import job_trigger

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, retry={"max_attempts": 3, "backoff_seconds": 0})
    with schema_context(alpha.schema_name):
        run, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
        Run.objects.filter(pk=run.pk).update(status=states.RETRYING, attempt=2)
    claimed: list = []

    def worker() -> None:
        try:
            claimed.append(
                claim_run(
                    schema=alpha.schema_name,
                    run_id=str(run.id),
                    attempt=2,
                    worker="w",
                    now=clock.now(),
                )
            )
        finally:
            connection.close()

    table_name = f'"{alpha.schema_name}".runs_run'
    with transaction.atomic(), connection.cursor() as cursor:  # the leader's fire
        cursor.execute(
            f"UPDATE {table_name} SET status = %s, queued_at = now() WHERE id = %s",
            [states.QUEUED, run.id],
        )
        thread = threading.Thread(target=worker)
        thread.start()
        waited = False
        for _ in range(200):  # until the claim waits on the fire's row lock (bounded)
            cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
            if cursor.fetchone()[0]:
                waited = True
                break
            if not thread.is_alive():
                break
            threading.Event().wait(0.01)
        assert waited, "the claim did not wait for the fire's commit"
    thread.join(timeout=10)
    assert claimed and claimed[0] is not None and claimed[0].attempt == 2
    assert runs_of(alpha, id=run.id)[0].status == states.RUNNING


# --- 11. a first attempt published before its row says queued ---------------------------


def _claims(tenant, messages: list[dict], clock) -> list:
    """Each message through a worker's claim, in order; the attempts they took."""
    from runs.execution import claim_run

    taken = []
    for message in messages:
        schema, run_id, attempt = message_args(message)
        assert schema == tenant.schema_name
        claimed = claim_run(
            schema=schema, run_id=run_id, attempt=attempt, worker="w", now=clock.now()
        )
        if claimed is not None:
            taken.append((run_id, claimed.attempt))
    return taken


def test_a_first_attempt_whose_row_cannot_be_written_is_out_and_runs_once(live, redis_client):
    """The fire publishes first attempts of `allow` jobs before it marks them queued
    (`beat/fire.py` `publish_first`). Here a second connection holds the run's row, so the
    write after the push times out: the message is out while the row still says
    `scheduled`, the tenant backs off, and the run counts in flight (a worker may be running
    it) but leaves the leader's memory. Once the tenant may go on, the relay finds it
    still `scheduled` and it is published again. Two messages, one attempt."""

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    clock.set(EDIT_AT)
    engine.materialise()
    [run] = runs_of(alpha, scheduled_for=utc(2026, 6, 1, 12, 2))
    holder = other_connection()
    holder.execute(
        f'SELECT 1 FROM "{alpha.schema_name}".runs_run WHERE id = %s FOR UPDATE', [run.id]
    )
    try:
        clock.set(utc(2026, 6, 1, 12, 2))
        stats = engine.fire()
        first = queued_messages(redis_client)
        assert [message_args(m)[1] for m in first] == [str(run.id)]  # out before the write
        assert not engine.faults.allowed(alpha.id)
        assert (stats.published, stats.deferred, len(engine.runs)) == (1, 0, 0)
        assert engine.admission.in_flight.count(alpha.id) == 1
        assert runs_of(alpha, id=run.id)[0].status == states.SCHEDULED
    finally:
        holder.rollback()
        holder.close()
    engine.faults.succeeded(alpha.id)  # its back-off is over
    clock.advance(5)
    engine.relay(force=True)
    assert engine.fire().published == 1
    messages = queued_messages(redis_client)
    assert [message_args(m)[1] for m in messages] == [str(run.id)] * 2
    assert _claims(alpha, messages, clock) == [(str(run.id), 1)]
    assert runs_of(alpha, id=run.id)[0].status == states.RUNNING


def test_a_retry_recorded_before_the_fires_write_is_not_marked_queued(
    live, redis_client, monkeypatch
):
    """A worker takes the early message, the target fails at once, and the worker records
    the retry (`retrying`, attempt 2) before the fire's chunk writes. The write moves only
    a `scheduled` first attempt, so the retry keeps its back-off and gets its own message
    when the leader admits it (it was queued without one, until the reaper, before)."""
    from beat import fire as fire_module
    from runs.execution import claim_run, finish_run
    from runs.outcomes import Outcome

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(
        alpha,
        clock,
        schedule={"cron": "* * * * *"},
        retry={"max_attempts": 3, "backoff_seconds": 30, "jitter": False},
    )
    engine = new_engine(redis_client, clock)
    clock.set(EDIT_AT)
    engine.materialise()
    [run] = runs_of(alpha, scheduled_for=utc(2026, 6, 1, 12, 2))
    publish_first = fire_module.publish_first

    def a_quick_worker_fails_it(*args, **kwargs):
        early = publish_first(*args, **kwargs)
        claimed = claim_run(
            schema=alpha.schema_name, run_id=str(run.id), attempt=1, worker="w", now=clock.now()
        )
        assert claimed is not None  # claimed while still `scheduled`
        finish_run(claimed, Outcome(False, error="connection refused"), clock.now())
        return early

    monkeypatch.setattr(fire_module, "publish_first", a_quick_worker_fails_it)
    clock.set(utc(2026, 6, 1, 12, 2))
    engine.fire()
    monkeypatch.undo()
    [after] = runs_of(alpha, id=run.id)
    assert (after.status, after.attempt) == (states.RETRYING, 2)
    redis_client.delete(*redis_client.keys("runs.*"))  # the first message was taken
    clock.set(after.due_at + timedelta(seconds=1))
    engine.load_run_index()
    engine.relay()
    assert engine.fire().published == 1
    [message] = queued_messages(redis_client)
    assert message_args(message)[1:] == [str(run.id), 2]
    assert runs_of(alpha, id=run.id)[0].status == states.QUEUED


def test_a_tenant_whose_writes_keep_failing_backs_off_longer_each_time(live, redis_client):
    """The early publication's read of a tenant works while its write does not (a second
    connection holds a SHARE lock on its runs table: reads pass, updates wait): the
    back-off must still grow, so the read's success must not end it."""

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock, lookahead_seconds=90)
    clock.set(EDIT_AT)
    engine.materialise()  # 12:02 and 12:03 prepared
    assert len(runs_of(alpha)) == 2
    holder = other_connection()
    holder.execute(f'LOCK TABLE "{alpha.schema_name}".runs_run IN SHARE MODE')
    try:
        failures = []
        for minute in (2, 3):
            clock.set(utc(2026, 6, 1, 12, minute))
            engine.fire()
            fault = engine.faults.faults[alpha.id]
            failures.append(fault.failures)
            engine.faults.faults[alpha.id] = dataclasses.replace(fault, retry_at=0.0)
    finally:
        holder.rollback()
        holder.close()
    assert failures == [1, 2]


def test_a_leader_deposed_between_the_push_and_the_write_leaves_one_attempt(
    live, redis_client, monkeypatch
):
    """Another leader bumps the epoch (a real committed write) right after the early push:
    the deposed leader's write is refused by its fence and the run stays `scheduled` with
    its message out; the new leader's takeover relay publishes it again; the claim takes
    one attempt of the two messages."""
    from beat import fire as fire_module
    from beat.lease import bump_epoch
    from beat.store import FencingError

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    old = new_engine(redis_client, clock)
    clock.set(EDIT_AT)
    old.materialise()
    [run] = runs_of(alpha, scheduled_for=utc(2026, 6, 1, 12, 2))
    publish_first = fire_module.publish_first
    epochs: list[int] = []

    def deposed_right_after(*args, **kwargs):
        early = publish_first(*args, **kwargs)
        epochs.append(bump_epoch("another-leader"))
        return early

    monkeypatch.setattr(fire_module, "publish_first", deposed_right_after)
    clock.set(utc(2026, 6, 1, 12, 2))
    with pytest.raises(FencingError):
        old.fire()
    monkeypatch.undo()
    assert len(queued_messages(redis_client)) == 1
    assert runs_of(alpha, id=run.id)[0].status == states.SCHEDULED
    new = new_engine(redis_client, clock)  # takes the lease: a newer epoch still
    assert epochs
    new.relay(force=True)
    assert new.fire().published == 1
    messages = queued_messages(redis_client)
    assert [message_args(m)[1] for m in messages] == [str(run.id)] * 2
    assert _claims(alpha, messages, clock) == [(str(run.id), 1)]
    with schema_context(alpha.schema_name):
        assert Run.objects.get(pk=run.pk).status == states.RUNNING


def test_a_failed_early_push_stops_the_publication_before_its_fence_ends(
    live, redis_client, monkeypatch
):
    """The broker refuses a push (the lease lost in Redis): the fire raises at once, at
    most one more push had been started (one ahead), none runs after the fenced
    transaction, and nothing is written, so the runs stay `scheduled` for the next leader."""
    from beat import fire as fire_module
    from beat.lease import LeaseLost

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    for n in range(6):
        make_job(alpha, clock, name=f"j{n}", schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock, fire_chunk=1)
    clock.set(EDIT_AT)
    engine.materialise()
    monkeypatch.setattr(fire_module, "PUSH_BATCH", 1)  # one push a run
    pushes: list[int] = []
    fence_open = threading.Event()

    def refused(messages) -> None:
        pushes.append(len(messages))
        assert fence_open.is_set(), "a push ran after the fenced transaction"
        raise LeaseLost("another process holds the lease")

    publish_group = fire_module._publish_group

    def watched(*args, **kwargs):
        fence_open.set()
        try:
            return publish_group(*args, **kwargs)
        finally:
            fence_open.clear()

    monkeypatch.setattr(engine.writes, "push_messages", refused)
    monkeypatch.setattr(fire_module, "_publish_group", watched)
    clock.set(utc(2026, 6, 1, 12, 2))
    with pytest.raises(LeaseLost):
        engine.fire()
    assert 1 <= len(pushes) <= 2
    assert {r.status for r in runs_of(alpha)} == {states.SCHEDULED}


@dataclasses.dataclass
class StalledLink:
    """A leader whose pushes go through a `StallingProxy`, its lease (1 s) renewed on its
    own connection; the first push stalls the link for `stall_seconds`."""

    tenant: object
    lease: object
    engine: object
    renewals: list = dataclasses.field(default_factory=list)  # monotonic times
    stalled: list = dataclasses.field(default_factory=list)  # when the stall began


@contextlib.contextmanager
def _stalled_link(live, redis_client, monkeypatch, stall_seconds: float, **config):
    from beat import fire as fire_module
    from beat.engine import Engine, EngineConfig
    from beat.lease import Lease

    from .helpers import StallingProxy

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    redis_client.delete("lock:" + leader_lock_name())
    lease = Lease(redis_client, holder="stalled-link", expire_seconds=1)
    assert lease.try_acquire()
    address = redis_client.connection_pool.connection_kwargs
    proxy = StallingProxy(address.get("host", "127.0.0.1"), address.get("port", 6379))
    pushes_on = redis.Redis(
        host="127.0.0.1", port=proxy.port, db=address.get("db", 0), socket_timeout=10
    )
    engine = Engine(
        client=redis_client,
        clock=clock,
        epoch=lease.epoch,
        config=EngineConfig(**config),
        origin="stalled-link",
        writes=FencedRedis(pushes_on, lease.lock_key, lease.token),
        checkpoint=lease.renew_if_due,
    )
    link = StalledLink(alpha, lease, engine)
    renew = lease.renew

    def counted_renew() -> None:
        renew()
        link.renewals.append(time.monotonic())

    lease.renew = counted_renew
    clock.set(EDIT_AT)
    engine.materialise()
    push = fire_module._push

    def over_a_stalled_link(*args, **kwargs):
        if not link.stalled:
            proxy.stall()
            link.stalled.append(time.monotonic())
            threading.Timer(stall_seconds, proxy.flow).start()
        return push(*args, **kwargs)

    monkeypatch.setattr(fire_module, "_push", over_a_stalled_link)
    with connection.cursor() as cursor:  # an earlier test may have left a leader's bound
        cursor.execute("SELECT set_config('idle_in_transaction_session_timeout', '10000', false)")
    clock.set(utc(2026, 6, 1, 12, 2))
    try:
        yield link
    finally:
        proxy.close()
        pushes_on.close()
        connection.close()  # the next test's session starts with the configured bounds


def test_the_lease_is_renewed_while_the_fire_waits_for_a_stalled_push(
    live, redis_client, monkeypatch
):
    """The connection the fire pushes on stalls (a proxy holds its packets) for more than
    twice the lease while the fire waits for its early push. The wait renews the lease, on
    the lease's own connection, so once the link flows again the push lands, fenced by a
    lock this leader still holds, and it goes on leading. Without the renewal in the wait
    the lock expired mid-push and the fenced push was refused. (The stall stays inside the
    fire's `push_wait_seconds` and the session's idle-in-transaction bound, set here; the
    next test stalls past the first.)"""
    stall_seconds = 2.5
    with _stalled_link(live, redis_client, monkeypatch, stall_seconds) as link:
        assert link.engine.fire().published == 1
    during = [t for t in link.renewals if link.stalled[0] < t < link.stalled[0] + stall_seconds]
    assert len(during) >= 2, link.renewals  # one every quarter lease, at least
    assert link.lease.holds_lock()
    assert len(queued_messages(redis_client)) == 1
    assert {r.status for r in runs_of(link.tenant)} == {states.QUEUED}


def test_a_push_stalled_past_the_push_wait_gives_the_lease_up(live, redis_client, monkeypatch):
    """The same stall, longer than the fire's `push_wait_seconds` (by default 0.8 of the
    leader session's idle-in-transaction bound, past which PostgreSQL ends the fence): the
    fire raises PushStalled and renews no more, so the lease lapses and a standby may take
    over; the stalled push, when the link flows again, finds the lock gone and is refused.
    Nothing is published or written: the runs stay `scheduled` for the next leader. Before,
    the wait renewed the lease for as long as the broker stalled (up to the Redis socket
    timeout), with the fence already ended by PostgreSQL."""
    from beat.fire import PushStalled

    push_wait, stall_seconds = 1.5, 4.0
    with _stalled_link(
        live, redis_client, monkeypatch, stall_seconds, push_wait_seconds=push_wait
    ) as link:
        with pytest.raises(PushStalled):
            link.engine.fire()
        raised_at = time.monotonic()
    started = link.stalled[0]
    assert link.renewals and max(link.renewals) < started + push_wait + 0.3, link.renewals
    assert raised_at >= started + stall_seconds - 0.1  # it waited for the push to end
    assert not link.lease.holds_lock()  # lapsed: nobody renewed it after the push wait
    assert queued_messages(redis_client) == []  # the late push found the lock gone
    assert {r.status for r in runs_of(link.tenant)} == {states.SCHEDULED}
