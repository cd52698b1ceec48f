"""A jittered run prepared by one leader fires on time under the next one.

Found by a review: a job's run is due at its slot plus its jitter (up to an hour), so it
waits long after its slot entered the lookahead window, and only the leader that prepared
it held it. A new leader's takeover relay read only the window, and its periodic relay
only runs already overdue: the run was found up to ~11 s after its instant, judged as
having waited with no leader, and a `skip` job with a 5 s grace lost it as a misfire
although a healthy leader ran at its instant.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django_tenants.utils import schema_context

from beat.engine import Engine
from beat.faults import TenantFaults
from beat.store import FencingError
from core.clock import FakeClock
from jobs.models import Job
from jobs.schedules.jitter import jitter_seconds_for
from runs import states
from runs.models import Run

from .helpers import make_job, message_args, new_engine, queued_messages, runs_of, utc

SLOT = utc(2026, 6, 1, 12, 0)  # the hourly job's slot
KILLED = SLOT  # the first leader dies here
TAKEOVER = SLOT + timedelta(seconds=2)  # and the next one leads from here
JITTER = 600
GRACE = 5


def _seed_delaying(jitter_mod_10: int) -> tuple[str, int]:
    """A job seed whose jitter for SLOT is 5 to 10 minutes and ends in `jitter_mod_10`: the
    new leader's periodic relay (every 10 s from TAKEOVER) then comes 7 s after the run's
    instant, past its grace, as in the review's example."""
    for n in range(10_000):
        seed = f"seed{n}"
        delay = jitter_seconds_for(seed, SLOT, JITTER)
        if delay >= 300 and delay % 10 == jitter_mod_10:
            return seed, delay
    raise AssertionError("no seed found")


def _prepared_jittered_run(tenant, clock: FakeClock, redis_client) -> tuple[Engine, Run]:
    """An hourly `skip` job (grace 5 s) with 600 s jitter; the first leader prepares its
    12:00 slot's run, due minutes later, and holds it in memory only."""
    job = make_job(
        tenant,
        clock,
        schedule={"cron": "0 * * * *"},
        jitter_seconds=JITTER,
        misfire_policy="skip",
        misfire_grace_seconds=GRACE,
    )
    seed, delay = _seed_delaying(5)
    with schema_context(tenant.schema_name):
        Job.objects.filter(id=job.id).update(hash_seed=seed)
    old = new_engine(redis_client, clock)
    clock.set(SLOT - timedelta(seconds=20))  # the slot is inside the 30 s window
    old.materialise()
    [run] = runs_of(tenant)
    assert (run.status, run.due_at) == (states.SCHEDULED, SLOT + timedelta(seconds=delay))
    assert run.id in old.runs.known and len(old.runs) == 1
    return old, run


def _iteration(engine: Engine) -> None:
    """The leader's steps in the order of `beat.loop` `lead_once`."""
    engine.fire()
    engine.finish_takeover_relay()
    engine.materialise()
    engine.load_run_index()
    engine.fire()
    engine.relay()


def _lead_until(engine: Engine, clock: FakeClock, end: datetime, run: Run, tenant) -> datetime:
    """Iterate once a second until `end`; returns when the run left `scheduled`."""
    left_at = None
    while clock.now() < end:
        clock.advance(1)
        _iteration(engine)
        if left_at is None and runs_of(tenant, id=run.id)[0].status != states.SCHEDULED:
            left_at = clock.now()
    assert left_at is not None
    return left_at


def test_a_jittered_run_prepared_before_a_takeover_fires_at_its_instant(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(SLOT - timedelta(minutes=1))
    old, run = _prepared_jittered_run(alpha, clock, redis_client)
    clock.set(TAKEOVER)  # the old leader was killed at KILLED, its memory gone
    new = new_engine(redis_client, clock, relay_interval_seconds=10)
    new.relay(force=True)
    clock.set(run.due_at)  # the deposed leader wakes at the instant, holding it too
    with pytest.raises(FencingError):
        old.fire()
    clock.set(TAKEOVER)  # the new leader's iterations from its takeover on
    fired_at = _lead_until(new, clock, run.due_at + timedelta(seconds=15), run, alpha)
    [after] = runs_of(alpha, id=run.id)
    assert (after.status, after.skip_reason, fired_at) == (states.QUEUED, "", run.due_at)
    assert [message_args(m)[1] for m in queued_messages(redis_client)] == [str(run.id)]


def test_a_tenant_kept_out_of_the_takeover_relay_is_read_whole_afterwards(live, redis_client):
    """A tenant in back-off at takeover (its predecessor published the fault) is skipped by
    the takeover relay; the first periodic pass once it may go on reads all its waiting
    runs, so its jittered run is held before its instant all the same."""
    alpha = live["alpha"].tenant
    clock = FakeClock(SLOT - timedelta(minutes=1))
    _old, run = _prepared_jittered_run(alpha, clock, redis_client)
    clock.set(TAKEOVER)
    new = new_engine(redis_client, clock, relay_interval_seconds=10)
    new.faults = TenantFaults(now=lambda: clock.now().timestamp())
    new.faults.failed(alpha.id, alpha.schema_name, RuntimeError("a lock wait"))  # 1 s
    new.relay(force=True)
    assert run.id not in new.runs.known
    fired_at = _lead_until(new, clock, run.due_at + timedelta(seconds=15), run, alpha)
    [after] = runs_of(alpha, id=run.id)
    assert (after.status, after.skip_reason, fired_at) == (states.QUEUED, "", run.due_at)


def test_the_periodic_relay_of_tenants_read_whole_stays_one_cheap_statement(live, redis_client):
    """The periodic pass asks tenants already read whole only for overdue runs: one
    statement per chunk, which finds nothing while the leader holds what waits."""
    alpha = live["alpha"].tenant
    clock = FakeClock(SLOT - timedelta(minutes=1))
    _prepared_jittered_run(alpha, clock, redis_client)
    clock.set(TAKEOVER)
    new = new_engine(redis_client, clock, relay_interval_seconds=10)
    new.relay(force=True)
    clock.advance(11)
    reads: list[list] = []

    def record(execute, sql, params, many, context):
        if "runs_run" in str(sql):
            reads.append(list(params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert new.relay() == 0
    overdue = clock.now() - timedelta(seconds=1)
    assert reads == [[overdue, overdue]]  # alpha's and beta's check, in one statement
