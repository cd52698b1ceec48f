"""Partitioned leadership (docs/adr/0020), in-process with real Redis and PostgreSQL: each
partition its own keys, lease and epoch; processes spread the partitions and take a dead
one's; a new leader of one partition ends only that partition's stuck sessions; a process
with another partition count leads nothing."""

from __future__ import annotations

import threading

import pytest
from django.db import DatabaseError, connection, transaction

from beat.engine import EngineConfig
from beat.lease import LeaseLost, bump_epoch, current_epoch
from beat.loop import SchedulerProcess
from beat.store import FencingError, fence
from core.clock import FakeClock
from core.keys import (
    ended_key,
    index_key,
    leader_info_key,
    leader_lock_name,
    schedulers_partitions_key,
    schedulers_seen_key,
    tenant_partition,
)
from core.partitions import partition_of
from runs.notify import ENDED_REPORTER, notify_run_ended

from .helpers import (
    fleet_process,
    held_partitions,
    make_job,
    message_args,
    queued_messages,
    runs_of,
    settle,
    utc,
)

START = utc(2026, 6, 1, 12, 0, 0)
P = 4


@pytest.fixture
def four_partitions(live, settings):
    settings.SCHEDULER_PARTITIONS = P
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    if partition_of(alpha.id, P) == partition_of(beta.id, P):
        pytest.skip("alpha and beta share a partition with these tenant ids")
    yield live
    with connection.cursor() as cursor:  # the rows of partitions 1..3, for other tests
        cursor.execute("DELETE FROM public.beat_schedulerlease WHERE id > 1")


def _process(client, clock, name: str) -> SchedulerProcess:
    return fleet_process(client, name, clock=clock)


def test_two_processes_share_four_partitions_each_with_its_own_lease(four_partitions, redis_client):
    clock = FakeClock(START)
    a, b = _process(redis_client, clock, "a:1"), _process(redis_client, clock, "b:2")
    settle([a, b])
    assert sorted(held_partitions(a) + held_partitions(b)) == [0, 1, 2, 3]
    assert len(held_partitions(a)) == len(held_partitions(b)) == 2
    for process in (a, b):
        for leader in process.held():
            n = leader.partition
            assert redis_client.get(leader_info_key(n)).decode() == process.holder
            assert current_epoch(n) == (leader.lease.epoch, process.holder)
            # one Redis Cluster slot per partition: the lock carries the partition's tag
            assert f"{{p{n}.{P}}}" in leader.lease.lock_key


def test_each_tenants_slots_fire_once_from_its_partitions_leader(four_partitions, redis_client):
    clock = FakeClock(START)
    alpha, beta = four_partitions["alpha"].tenant, four_partitions["beta"].tenant
    jobs = {
        t.id: make_job(t, clock, name=f"every-minute-{t.slug}", schedule={"cron": "* * * * *"})
        for t in (alpha, beta)
    }
    for tenant_id, job in jobs.items():  # the service wrote the job to its partition's index
        key = index_key(tenant_partition(tenant_id))
        assert redis_client.zscore(key, f"{tenant_id}:{job.id}") is not None
    a, b = _process(redis_client, clock, "a:1"), _process(redis_client, clock, "b:2")
    settle([a, b])
    assert len(held_partitions(a)) == len(held_partitions(b)) == 2
    for _ in range(5):  # 12:00:00 to 12:02:00
        for process in (a, b):
            process.lead_once()
        clock.advance(30)
    for tenant in (alpha, beta):
        slots = [r.scheduled_for for r in runs_of(tenant, status="queued")]
        assert slots == [utc(2026, 6, 1, 12, 1), utc(2026, 6, 1, 12, 2)], tenant.slug
    published = [message_args(m)[1] for m in queued_messages(redis_client)]
    assert len(published) == len(set(published)) == 4


def test_a_dead_processes_partitions_are_taken_by_the_survivor(four_partitions, redis_client):
    clock = FakeClock(START)
    a, b = _process(redis_client, clock, "a:1"), _process(redis_client, clock, "b:2")
    settle([a, b])
    lost = held_partitions(a)
    for n in lost:  # a is killed: its leases expire
        redis_client.delete("lock:" + leader_lock_name(n), leader_info_key(n))
    b.orphan_seconds = 0  # a is still announced as live: its partitions are orphans
    b.try_lead()
    assert sorted(held_partitions(b)) == [0, 1, 2, 3]
    with pytest.raises(LeaseLost):  # a, woken, cannot renew what it lost
        a.partitions[lost[0]].lead_once()


def test_a_joining_process_gets_its_share_and_nobody_leads_a_partition_twice(
    four_partitions, redis_client
):
    clock = FakeClock(START)
    a = _process(redis_client, clock, "a:1")
    settle([a])
    assert sorted(held_partitions(a)) == [0, 1, 2, 3]
    b = _process(redis_client, clock, "b:2")
    settle([a, b], turns=8)
    assert len(held_partitions(a)) == len(held_partitions(b)) == 2
    assert not set(held_partitions(a)) & set(held_partitions(b))


def test_a_bump_ends_only_its_own_partitions_stuck_session(four_partitions):
    """Two frozen leaders inside fenced transactions, of partitions 1 and 2: the new
    leader of partition 1 ends the first one's session and leaves the second alone."""
    epochs = {n: bump_epoch(f"old-{n}", partition=n) for n in (1, 2)}
    inside = {n: threading.Event() for n in (1, 2)}
    wake = threading.Event()
    outcome: dict[int, BaseException | str] = {}

    def frozen(n: int) -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                fence(cursor, epochs[n], partition=n)
                inside[n].set()
                wake.wait(30)
                cursor.execute("SELECT 1")
            outcome[n] = "committed"
        except BaseException as exc:
            outcome[n] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=frozen, args=(n,), daemon=True) for n in (1, 2)]
    for thread in threads:
        thread.start()
    assert inside[1].wait(10) and inside[2].wait(10)
    new_epoch = bump_epoch("new-1", lock_wait_seconds=0.2, partition=1)
    wake.set()
    for thread in threads:
        thread.join(10)
    assert new_epoch == epochs[1] + 1
    assert isinstance(outcome[1], DatabaseError)  # ended: what it wrote is gone
    assert outcome[2] == "committed"  # another partition's leader is untouched
    assert current_epoch(2) == (epochs[2], "old-2")


def test_a_fence_checks_its_own_partitions_epoch(four_partitions):
    first = bump_epoch("x", partition=3)
    bump_epoch("y", partition=3)
    with transaction.atomic(), connection.cursor() as cursor, pytest.raises(FencingError):
        fence(cursor, first, partition=3)


def test_a_process_with_another_partition_count_leads_nothing(
    four_partitions, redis_client, caplog
):
    import time

    redis_client.zadd(schedulers_seen_key(), {"old:9": time.time()})
    redis_client.hset(schedulers_partitions_key(), "old:9", 1)
    a = _process(redis_client, FakeClock(START), "a:1")
    assert a.try_lead() is False
    assert "SCHEDULER_PARTITIONS=1" in caplog.text
    redis_client.zrem(schedulers_seen_key(), "old:9")
    assert a.try_lead() is True


def test_an_ended_attempt_is_reported_to_its_tenants_partition(four_partitions, redis_client):
    beta = four_partitions["beta"].tenant
    notify_run_ended(beta.schema_name, 1, "allow", "run-1", 1)
    assert ENDED_REPORTER.flush(5)
    partition = tenant_partition(beta.id)
    assert redis_client.lrange(ended_key(partition), 0, -1) == [f"{beta.id}:run-1:1".encode()]
    others = [n for n in range(P) if n != partition]
    assert all(redis_client.llen(ended_key(n)) == 0 for n in others)


def test_one_partition_keeps_the_key_names_of_a_single_leader(live, redis_client):
    assert index_key() == "tw:index" and leader_lock_name() == "tw:leader"
    assert ended_key(0) == "tw:ended"


def test_one_partitions_long_step_renews_the_other_leases_held(four_partitions, redis_client):
    import time

    clock = FakeClock(START)
    a = _process(redis_client, clock, "a:1")
    settle([a])
    first, other = a.partitions[0], a.partitions[1]
    other.lease.renewed_at = time.monotonic() - 1.0  # partition 0's work ran a second
    redis_client.pexpire(other.lease.lock_key, 300)  # and partition 1's lease is nearly out
    first.engine.checkpoint()
    assert redis_client.pttl(other.lease.lock_key) > 1500  # renewed from partition 0's step


def test_a_lease_lost_during_another_partitions_step_drops_only_that_partition(
    four_partitions, redis_client
):
    import time

    clock = FakeClock(START)
    a = _process(redis_client, clock, "a:1")
    settle([a])
    first, other = a.partitions[0], a.partitions[1]
    redis_client.delete(other.lease.lock_key)  # expired while partition 0 worked
    other.lease.renewed_at = time.monotonic() - 1.0
    first.engine.checkpoint()  # no error in partition 0's work
    a.lead_once()
    assert other.engine is None and not other.held
    assert first.held and first.engine is not None


def test_a_single_partition_process_steps_down_beside_a_partitioned_fleet(live, redis_client):
    import time

    clock = FakeClock(START)
    a = SchedulerProcess(
        client=redis_client, clock=clock, config=EngineConfig(), lease_seconds=2, holder="a:1"
    )
    assert a.try_lead()
    redis_client.zadd(schedulers_seen_key(), {"new:9": time.time()})
    redis_client.hset(schedulers_partitions_key(), "new:9", 4)
    assert a.try_lead() is False
    assert not a.lease.held


def test_a_process_leading_nothing_leaves_the_wake_ups_to_their_leader(
    four_partitions, redis_client
):
    from core.keys import wake_key

    a = _process(redis_client, FakeClock(START), "a:1")
    redis_client.rpush(wake_key(0), "release:1:2")
    a.unable_until = float("inf")  # it takes nothing in this test
    a.wait(0.05)
    assert redis_client.lrange(wake_key(0), 0, -1) == [b"release:1:2"]


def test_a_process_whose_take_failed_stops_counting_itself_live(
    four_partitions, redis_client, monkeypatch
):
    def broken(*args, **kwargs):
        raise RuntimeError("PostgreSQL refused the bump")

    monkeypatch.setattr("beat.lease.bump_epoch", broken)
    a = _process(redis_client, FakeClock(START), "a:1")
    a.try_lead()
    assert not a.held()
    a.try_lead()
    assert redis_client.zscore(schedulers_seen_key(), "a:1") is None


def test_a_malformed_wake_up_is_logged_and_the_others_still_act(four_partitions, redis_client):
    a = _process(redis_client, FakeClock(START), "a:1")
    settle([a])
    released = []
    for leader in a.held():
        leader.engine.release_held = lambda t, j, out=released: out.append((t, j)) or 0
    beta = four_partitions["beta"].tenant
    a._handle_wake("release:not-a-tenant:7")  # no error out of the loop
    a._handle_wake(f"release:{beta.id}:7")
    assert released == [(beta.id, 7)]
