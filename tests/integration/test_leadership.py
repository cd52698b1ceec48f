"""Leader election, step-down and recovery of the scheduler process (in-process, real
Redis and PostgreSQL, fake clock)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command
from django_tenants.utils import schema_context

from beat.engine import EngineConfig
from beat.lease import LeaseLost, current_epoch
from beat.loop import SchedulerProcess
from core import index
from core.clock import FakeClock
from core.keys import index_built_key, index_key, leader_info_key
from jobs.models import Job

from .helpers import make_job, message_args, queued_messages, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)


def _process(client, clock, name: str) -> SchedulerProcess:
    return SchedulerProcess(
        client=client, clock=clock, config=EngineConfig(), lease_seconds=2, holder=name
    )


def _lead_for(process: SchedulerProcess, clock: FakeClock, seconds: int, step: float = 1.0):
    for _ in range(int(seconds / step)):
        process.lead_once()
        clock.advance(step)


def test_only_one_of_two_processes_leads(live, redis_client):
    clock = FakeClock(START)
    a, b = _process(redis_client, clock, "a:1"), _process(redis_client, clock, "b:2")
    assert a.try_lead() is True
    assert b.try_lead() is False
    assert redis_client.get(leader_info_key()) == b"a:1"
    assert current_epoch() == (a.lease.epoch, "a:1")


def test_standby_takes_over_when_the_lease_lapses_and_the_old_leader_stops(live, redis_client):
    """A wedged leader stops renewing; when its lease lapses the standby leads and the old
    leader's next renewal fails, so it stops writing."""
    clock = FakeClock(START)
    a, b = _process(redis_client, clock, "a:1"), _process(redis_client, clock, "b:2")
    assert a.try_lead()
    redis_client.delete("lock:" + "tw:leader")  # the lease expired while `a` was wedged
    assert b.try_lead()
    assert b.lease.epoch == a.lease.epoch + 1
    with pytest.raises(LeaseLost):
        a.lead_once()
    assert not a.lease.held


def test_released_lease_is_taken_at_once(live, redis_client):
    clock = FakeClock(START)
    a, b = _process(redis_client, clock, "a:1"), _process(redis_client, clock, "b:2")
    assert a.try_lead()
    a.lease.release()
    assert b.try_lead()


def test_redis_flushed_while_running_rebuilds_and_loses_or_doubles_nothing(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    for i in range(4):
        make_job(alpha, clock, name=f"j{i}", schedule={"interval_seconds": 2})
    a = _process(redis_client, clock, "a:1")
    assert a.try_lead()
    _lead_for(a, clock, 10)
    before = {r.id for r in runs_of(alpha, status="queued")}
    assert before

    redis_client.flushdb()  # index, lease and broker queues all gone

    with pytest.raises(LeaseLost):
        a.lead_once()
    a.step_down("test")
    assert a.try_lead()  # re-elected: a rebuild starts
    a.lead_once()  # ... and (this index is small) ends in its first step
    assert redis_client.exists(index_built_key())
    assert redis_client.zcard(index_key()) == 4
    _lead_for(a, clock, 20)

    runs = runs_of(alpha)
    per_slot = Counter((r.job_id, r.scheduled_for) for r in runs)
    assert max(per_slot.values()) == 1
    published = {message_args(m)[1] for m in queued_messages(redis_client)}
    assert {str(r) for r in before} <= published  # their messages were lost: sent again
    fired_slots = sorted(r.scheduled_for for r in runs if r.job_id == runs[0].job_id)
    gaps = {(b - a).total_seconds() for a, b in itertools.pairwise(fired_slots)}
    assert gaps == {2.0}  # every slot of the 30 s has its run


def test_leader_rebuilds_a_missing_index_on_takeover(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"cron": "* * * * *"})
    redis_client.delete(index_key(), index_built_key())
    a = _process(redis_client, clock, "a:1")
    assert a.try_lead()
    a.lead_once()
    assert redis_client.zscore(index_key(), index.member(alpha.id, job.id)) is not None


def test_rebuild_index_command_drops_stale_members(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    redis_client.zadd(index_key(), {index.member(alpha.id, 999999): 1.0})
    out = StringIO()
    call_command("rebuild_index", stdout=out)
    assert "indexed 1 jobs" in out.getvalue()
    assert redis_client.zcard(index_key()) == 1


def test_scheduler_status_reports_leader_epoch_and_lag(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(utc(2020, 1, 1))  # a slot long overdue, seen from the real clock
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    a = _process(redis_client, clock, "host:123")
    assert a.try_lead()
    out = StringIO()
    call_command("scheduler_status", "--json", stdout=out)
    status = json.loads(out.getvalue())
    assert status["leader"] == "host:123"
    assert status["epoch"] == a.lease.epoch
    assert status["index_size"] == 1
    assert status["due_unmaterialised_jobs"] == 1
    assert status["oldest_unfired_lag_seconds"] > 3600
    a.lease.release()
    out = StringIO()
    call_command("scheduler_status", "--json", stdout=out)
    assert json.loads(out.getvalue())["leader"] is None


def test_leader_sleeps_until_the_next_due_instant(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    a = _process(redis_client, clock, "a:1")
    assert a.try_lead()
    clock.set(utc(2026, 6, 1, 12, 0, 20))
    # Nothing due before 12:00:30 (the 12:01 slot enters the 30 s window): sleep is capped
    # only by the lease renewal period.
    assert a.lead_once() == pytest.approx(a.max_sleep)
    clock.set(utc(2026, 6, 1, 12, 0, 40))
    a.lead_once()  # materialised: the run waits for 12:01:00
    clock.set(utc(2026, 6, 1, 12, 0, 59, 800000))
    assert a.lead_once() == pytest.approx(0.2, abs=0.01)


def test_job_change_made_while_redis_was_down_reaches_the_index(live, redis_client):
    """The service commits to PostgreSQL and cannot reach Redis: the request must not fail,
    and the leader's periodic sync must put the job in the index (no lost fire)."""
    import socket

    from django.test import override_settings

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    a = _process(redis_client, clock, "a:1")
    assert a.try_lead()  # builds the index and records the sync point
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{closed}/0"):
        job = make_job(alpha, clock, schedule={"cron": "* * * * *"})
    assert redis_client.zscore(index_key(), index.member(alpha.id, job.id)) is None
    other = make_job(alpha, clock, name="written", schedule={"cron": "* * * * *"})
    with schema_context(alpha.schema_name):
        dirty = dict(Job.objects.values_list("name", "index_dirty"))
    assert dirty == {"job": True, "written": False}  # only the one Redis missed is flagged
    a.engine.sync_dirty()
    assert redis_client.zscore(index_key(), index.member(alpha.id, job.id)) == (
        job.next_run_at.timestamp()
    )
    with schema_context(alpha.schema_name):
        assert not Job.objects.filter(index_dirty=True).exists()
    assert other.index_dirty is True  # the in-memory copy; the row was cleared after commit


def test_a_standby_that_cannot_reach_redis_says_so_and_does_not_lead(live, caplog):
    import redis

    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    process = _process(unreachable, FakeClock(START), "a:1")
    assert process.try_lead() is False
    assert "cannot reach Redis to take the lease" in caplog.text


def test_a_lease_whose_release_could_not_reach_redis_is_taken_again_by_its_holder(
    live, redis_client
):
    """A renewal and then the release that follows its failure meet a stalled link to Redis:
    the key still names this process until it expires, and nobody else can take it.
    python-redis-lock refused to take it again (AlreadyAcquired out of every attempt, so no
    leader until the key expired); the holder now takes it at once, with a new epoch."""
    import redis

    from .helpers import StallingProxy

    address = redis_client.connection_pool.connection_kwargs
    proxy = StallingProxy(address.get("host", "127.0.0.1"), address.get("port", 6379))
    proxied = redis.Redis(
        host="127.0.0.1", port=proxy.port, db=address.get("db", 0), socket_timeout=0.3
    )
    try:
        process = SchedulerProcess(
            client=proxied,
            clock=FakeClock(START),
            config=EngineConfig(),
            lease_seconds=10,
            holder="a:1",
        )
        assert process.try_lead()
        first = process.lease.epoch
        proxy.stall()
        with pytest.raises(LeaseLost):
            process.lease.renew()
        process.step_down("the renewal failed")  # its release cannot reach Redis either
        proxy.flow()
        assert redis_client.get(process.lease.lock_key).decode() == process.lease.token
        assert process.try_lead()
        assert process.lease.epoch == first + 1 == current_epoch()[0]
        assert redis_client.ttl(process.lease.lock_key) > 5  # its expiry renewed
        process.step_down("the test is over")
    finally:
        proxy.close()
