"""The engine on a real Redis Cluster (`REDIS_CLUSTER`, three primaries with a replica
each, RabbitMQ the broker): every script and transaction touches one partition's slot,
leases and fencing hold there, services and workers write to their tenant's partition,
and a cluster emptied mid-run loses and doubles nothing."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from beat.admission_control import AdmissionConfig, AdmissionControl
from beat.amqp_writes import AmqpWrites
from beat.faults import TenantFaults
from beat.fenced import FencedRedis
from beat.lease import Lease, LeaseLost
from beat.loop import SchedulerProcess
from core import keys
from core.clock import FakeClock
from core.keys import index_built_key, index_key, leader_info_key, leader_lock_name
from core.partitions import partition_of
from runs.notify import ENDED_REPORTER, notify_run_ended

from .helpers import fleet_process, make_job, runs_of, utc
from .test_rabbitmq import _drain

START = utc(2026, 6, 1, 12, 0, 0)
RUN_QUEUES = [f"runs.{shard}" for shard in range(4)]


def _published(amqp_url: str) -> list[str]:
    return [m.headers["id"] for q in RUN_QUEUES for m in _drain(amqp_url, q)]


def _partition_keys(n: int) -> list[str]:
    lock = leader_lock_name(n)
    return [
        keys.index_key(n),
        keys.runs_index_key(n),
        keys.index_built_key(n),
        keys.rebuild_state_key(n),
        keys.faults_key(n),
        "lock:" + lock,  # python-redis-lock's two keys, and the fencing scripts' first
        "lock-signal:" + lock,
        keys.leader_info_key(n),
        keys.wake_key(n),
        keys.ended_key(n),
        keys.admission_waiting_key(n),
        keys.admission_stats_key(n),
    ]


@pytest.fixture
def new_process(on_redis_cluster, settings):
    """Scheduler processes on the cluster, led in-process and stepped down at the end (their
    alert threads with them)."""
    made: list[SchedulerProcess] = []

    def make(name: str, clock: FakeClock) -> SchedulerProcess:
        process = fleet_process(on_redis_cluster, name, clock=clock)
        made.append(process)
        return process

    yield make
    for process in made:
        process.step_down("the test is over")
    with connection.cursor() as cursor:  # the lease rows of the partitions above 1
        cursor.execute("DELETE FROM public.beat_schedulerlease WHERE id > 1")


@pytest.mark.parametrize("partitions", [1, 4])
def test_each_partitions_keys_share_one_slot(on_redis_cluster, settings, partitions):
    settings.SCHEDULER_PARTITIONS = partitions
    slots = [
        {on_redis_cluster.keyslot(key) for key in _partition_keys(n)} for n in range(partitions)
    ]
    assert all(len(one) == 1 for one in slots), slots
    if partitions == 1:  # tagged too: untagged, the lock and the index fall on two slots
        assert keys.index_key(0) == "tw:{p0.1}:index"


AMQP = "amqp://guest:guest@127.0.0.1:5672//"


@pytest.mark.parametrize(
    ("extra", "refusal"),
    [
        ({}, "REDIS_CLUSTER=1 needs CELERY_BROKER_URL=amqp://"),
        ({"CELERY_BROKER_URL": "redis://127.0.0.1:7000/0"}, "needs CELERY_BROKER_URL=amqp://"),
        ({"CELERY_BROKER_URL": AMQP, "REDIS_URL": "redis://127.0.0.1:7000/3"}, "database 0"),
        ({"CELERY_BROKER_URL": AMQP, "REDIS_CLUSTER_NODES": "node-2"}, "'node-2' is not host:port"),
        ({"CELERY_BROKER_URL": AMQP, "REDIS_CLUSTER_NODES": "node-2:7001, node-3:7002"}, None),
        ({"CELERY_BROKER_URL": AMQP, "REDIS_CLUSTER_NODES": "[::1]:7001"}, None),
    ],
)
def test_the_cluster_settings_are_checked_at_start_up(extra, refusal):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "scheduler_site.settings",
        "REDIS_CLUSTER": "1",
        "REDIS_URL": "redis://127.0.0.1:7000/0",
    }
    env.pop("CELERY_BROKER_URL", None)
    env.update(extra)
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if refusal is None:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0 and refusal in result.stderr, result.stderr


def test_a_leader_fires_each_slot_once_to_rabbitmq_and_a_deposed_one_writes_nothing(
    live, on_redis_cluster, amqp_broker, new_process
):
    client = on_redis_cluster
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"cron": "* * * * *"})
    member = f"{alpha.id}:{job.id}"
    assert client.zscore(index_key(0), member) is not None  # the service wrote the cluster
    process = new_process("a:1", clock)
    assert process.try_lead()
    [leader] = process.held()
    assert isinstance(leader.engine.writes, AmqpWrites)
    for _ in range(5):  # 12:00:00 to 12:02:00
        process.lead_once()
        clock.advance(30)
    slots = [r.scheduled_for for r in runs_of(alpha, status="queued")]
    assert slots == [utc(2026, 6, 1, 12, 1), utc(2026, 6, 1, 12, 2)]
    published = _published(amqp_broker)
    assert sorted(published) == sorted(str(r.id) for r in runs_of(alpha, status="queued"))
    # Deposed: another holds the lock now. Its fenced scripts are refused on the cluster.
    client.set(leader.lease.lock_key, "another-leader")
    with pytest.raises(LeaseLost):
        leader.engine.writes.lower_jobs({member: 1.0})
    assert client.zscore(index_key(0), member) != 1.0
    with pytest.raises(LeaseLost):
        process.lead_once()


def test_two_processes_share_four_partitions_and_fire_every_slot_once(
    live, on_redis_cluster, amqp_broker, settings, new_process
):
    settings.SCHEDULER_PARTITIONS = 4
    client = on_redis_cluster
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    for tenant in (alpha, beta):
        make_job(tenant, clock, name=f"each-minute-{tenant.slug}", schedule={"cron": "* * * * *"})
    processes = [new_process("a:1", clock), new_process("b:2", clock)]
    for _ in range(6):
        for process in processes:
            process.try_lead()
    held = [sorted(leader.partition for leader in p.held()) for p in processes]
    assert sorted(held[0] + held[1]) == [0, 1, 2, 3] and len(held[0]) == 2
    nodes = {client.get_node_from_key(keys.index_key(n)).name for n in range(4)}
    assert len(nodes) > 1  # the partitions' slots spread over the primaries
    for _ in range(5):
        for process in processes:
            process.lead_once()
        clock.advance(30)
    for tenant in (alpha, beta):  # job ids restart in each schema: one tenant at a time
        slots = [r.scheduled_for for r in runs_of(tenant, status="queued")]
        assert slots == [utc(2026, 6, 1, 12, 1), utc(2026, 6, 1, 12, 2)], tenant.slug
    published = _published(amqp_broker)
    assert len(published) == len(set(published)) == 4
    # a's partitions lost (killed: its leases gone): b takes them all
    lost = [leader.partition for leader in processes[0].held()]
    for n in lost:
        client.delete("lock:" + leader_lock_name(n), leader_info_key(n))
    processes[1].orphan_seconds = 0
    processes[1].try_lead()
    assert sorted(leader.partition for leader in processes[1].held()) == [0, 1, 2, 3]


def test_an_ended_report_reaches_its_partitions_leader_on_the_cluster(
    live, on_redis_cluster, settings
):
    settings.SCHEDULER_PARTITIONS = 4
    beta = live["beta"].tenant
    partition = partition_of(beta.id, 4)
    notify_run_ended(beta.schema_name, 7, "queue", "run-1", 1)
    assert ENDED_REPORTER.flush(5)
    assert on_redis_cluster.lrange(keys.ended_key(partition), 0, -1) == [
        f"{beta.id}:run-1:1".encode()
    ]
    control = AdmissionControl(
        client=on_redis_cluster,
        config=AdmissionConfig(enabled=True),
        shard_count=4,
        faults=TenantFaults(),
        partition=partition,
    )
    control.in_flight.add(beta.id, "run-1", 1)
    assert control.read_ended() == 1  # LRANGE and LTRIM in one transaction, on one slot
    assert control.in_flight.count(beta.id) == 0
    assert on_redis_cluster.llen(keys.ended_key(partition)) == 0


def test_the_cluster_emptied_mid_run_rebuilds_and_loses_or_doubles_nothing(
    live, on_redis_cluster, amqp_broker, new_process
):
    client = on_redis_cluster
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    for i in range(4):
        make_job(alpha, clock, name=f"j{i}", schedule={"interval_seconds": 2})
    process = new_process("a:1", clock)
    assert process.try_lead()
    for _ in range(10):
        process.lead_once()
        clock.advance(1)
    client.flushdb(target_nodes="primaries")  # index and lease gone (the broker is RabbitMQ)
    with pytest.raises(LeaseLost):
        process.lead_once()
    process.step_down("test")
    assert process.try_lead()
    process.lead_once()  # the rebuild: a small index ends in one step
    assert client.exists(index_built_key(0)) and client.zcard(index_key(0)) == 4
    for _ in range(20):
        process.lead_once()
        clock.advance(1)
    runs = runs_of(alpha)
    assert max(Counter((r.job_id, r.scheduled_for) for r in runs).values()) == 1
    first = sorted(r.scheduled_for for r in runs if r.job_id == runs[0].job_id)
    assert {(b - a).total_seconds() for a, b in itertools.pairwise(first)} == {2.0}
    # RabbitMQ kept the messages the flush did not reach: none is published twice
    published = _published(amqp_broker)
    assert sorted(published) == sorted(str(r.id) for r in runs if r.status == "queued")


def test_a_lease_is_one_holders_on_the_cluster(live, on_redis_cluster):
    one = Lease(on_redis_cluster, holder="a:1", expire_seconds=5)
    two = Lease(on_redis_cluster, holder="b:2", expire_seconds=5)
    assert one.try_acquire() and not two.try_acquire()
    one.release()
    assert two.try_acquire()


def test_status_metrics_readiness_and_the_throttle_read_the_cluster(
    live, on_redis_cluster, amqp_broker, settings, new_process
):
    from scheduler_site.api.throttling import take_slot
    from scheduler_site.metrics.facts import redis_facts

    settings.SCHEDULER_PARTITIONS = 4
    alpha = live["alpha"].tenant
    make_job(alpha, FakeClock(START), schedule={"cron": "* * * * *"})
    process = new_process("host:1", FakeClock(START))
    for _ in range(4):
        process.try_lead()
    assert len(process.held()) == 4
    out = StringIO()
    call_command("scheduler_status", "--json", stdout=out)
    status = json.loads(out.getvalue())
    assert status["index_size"] == 1
    assert {p["leader"] for p in status["partitions"]} == {"host:1"}
    facts = {m.name: m.samples[0].value for m in redis_facts({}) if m.samples}
    assert facts["tickwork_partitions_led"] == 4 and facts["tickwork_leader_up"] == 1
    assert [take_slot("tw:throttle-test", 2) for _ in range(2)] == [None, None]
    assert take_slot("tw:throttle-test", 2) > 0  # a third in the window waits


def test_readiness_finds_the_cluster_through_any_listed_node(live, on_redis_cluster, settings):
    from scheduler_site.health import check_redis

    assert check_redis() is None
    settings.REDIS_CLUSTER_NODES = []
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    assert check_redis().startswith("redis unreachable")
    live_node = on_redis_cluster.get_primaries()[0]
    settings.REDIS_CLUSTER_NODES = [("127.0.0.1", 1), (live_node.host, live_node.port)]
    assert check_redis() is None  # REDIS_URL's node away: another listed one answers


def _fleet_slot_primary(redis_cluster) -> int:
    return redis_cluster.primary_of(keys.schedulers_seen_key())


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_primary_failing_over_costs_only_the_partitions_on_it(
    live, on_redis_cluster, redis_cluster, amqp_broker, settings, new_process, partitions
):
    """One process leads every partition; a primary that serves some of the fleet's keys,
    and of the partitions' with P = 3, is killed. The partitions on the primaries that
    stayed are led throughout: the fleet's view (which reads keys on every primary)
    failing does not step them down, and their scripts, flushed from every node's cache
    beforehand, load on their own node (not on every primary). The partitions on the
    killed primary are given up and taken again once its replica is promoted."""
    import threading

    settings.SCHEDULER_PARTITIONS = partitions
    primaries = {n: redis_cluster.primary_of(keys.index_key(n)) for n in range(partitions)}
    victim = _fleet_slot_primary(redis_cluster)
    if partitions > 1 and victim not in primaries.values():
        victim = primaries[0]
    on_victim = sorted(n for n, port in primaries.items() if port == victim)
    elsewhere = sorted(n for n, port in primaries.items() if port != victim)
    if not elsewhere:
        pytest.skip("every partition's slot is on the fleet keys' primary")
    clock = FakeClock(START)
    for tenant in (live["alpha"].tenant, live["beta"].tenant):  # index moves every turn
        make_job(tenant, clock, name="each-second", schedule={"interval_seconds": 1})
    process = new_process("host:1", clock)
    stop = threading.Event()
    for _ in range(4):
        process.try_lead()
    assert sorted(leader.partition for leader in process.held()) == list(range(partitions))
    redis_cluster.flush_scripts()
    # the client's default node (which a pipeline would ask an EVAL's keys) is the victim
    on_redis_cluster.set_default_node(on_redis_cluster.get_node("127.0.0.1", victim))
    try:
        redis_cluster.kill(victim)
        turns = []
        for _ in range(5):  # the process's own turns: lead, wait (and look at the fleet)
            process.run_once(stop)
            clock.advance(1)
            turns.append({leader.partition for leader in process.held()})
        assert all(held >= set(elsewhere) for held in turns), turns
        if on_victim:
            assert any(not held & set(on_victim) for held in turns), turns  # given up
        redis_cluster.wait_healthy()  # the replica promoted
        for _ in range(40):
            process.run_once(stop)
            clock.advance(1)
            assert {leader.partition for leader in process.held()} >= set(elsewhere)
            if len(process.held()) == partitions:
                break
        assert sorted(leader.partition for leader in process.held()) == list(range(partitions))
    finally:
        redis_cluster.restart_dead()


def test_pipelined_scripts_reach_their_node_with_the_default_node_away(
    live, on_redis_cluster, redis_cluster, settings
):
    """A cluster pipeline asks the client's default node for an EVAL's keys unless the
    EVAL names its node: with that node away, the sweeps' fenced repairs and the workers'
    end reports would fail for partitions whose own primary is fine."""
    settings.SCHEDULER_PARTITIONS = 3
    alpha = live["alpha"].tenant
    partition = partition_of(alpha.id, 3)
    mine = redis_cluster.primary_of(keys.index_key(partition))
    victim = next(
        port
        for port in redis_cluster.live_ports()
        if port != mine and redis_cluster.primary_of_port(port)
    )
    client = on_redis_cluster
    lock = "lock:" + leader_lock_name(partition)
    client.set(lock, "token")
    writes = FencedRedis(client, lock, "token", partition)
    client.set_default_node(client.get_node("127.0.0.1", victim))
    try:
        redis_cluster.kill(victim)
        writes.lower_jobs({f"{alpha.id}:1": 5.0})
        assert client.zscore(keys.index_key(partition), f"{alpha.id}:1") == 5.0
        notify_run_ended(alpha.schema_name, 1, "allow", "run-9", 1)
        assert ENDED_REPORTER.flush(5)
        assert client.lrange(keys.ended_key(partition), 0, -1) == [f"{alpha.id}:run-9:1".encode()]
    finally:
        redis_cluster.restart_dead()


def test_a_cluster_entirely_away_is_a_step_down_not_an_error(
    live, on_redis_cluster, redis_cluster, amqp_broker, new_process
):
    """Every node killed: the client's own "cannot be connected" (not a RedisError) makes
    the leader step down as for any Redis outage, not back off as from a bug, and it
    leads again as soon as the cluster is back."""
    import threading

    clock = FakeClock(START)
    make_job(live["alpha"].tenant, clock, name="each-second", schedule={"interval_seconds": 1})
    process = new_process("host:1", clock)
    assert process.try_lead()
    [leader] = process.partitions
    engine = leader.engine
    stop = threading.Event()
    try:
        for port in redis_cluster.live_ports():
            redis_cluster.kill(port)
        for _ in range(3):
            process.run_once(stop)
            clock.advance(1)
        assert not process.held() and leader.engine is None and engine is not None
        assert leader.error_backoff == 0  # stepped down, not failed
    finally:
        redis_cluster.restart_dead()
    for _ in range(50):
        process.run_once(stop)
        clock.advance(1)
        if process.held():
            break
    assert process.held() and leader.error_backoff == 0


def test_a_wake_up_popped_before_a_node_fails_is_handled_not_dropped(
    live, on_redis_cluster, redis_cluster, amqp_broker, settings, new_process, monkeypatch
):
    """A process leading four partitions waits on the first one's wake list, then drains
    the others' in one pipeline. A node serving another partition's list is dead: the
    pipeline fails, and the wake-up already popped from the first list is handled before
    the process goes on (it used to be dropped, left to the relay)."""
    settings.SCHEDULER_PARTITIONS = 4
    process = new_process("host:1", FakeClock(START))
    for _ in range(4):
        process.try_lead()
    held = process.held()
    assert len(held) == 4
    first = redis_cluster.primary_of(keys.wake_key(held[0].partition))
    others = {redis_cluster.primary_of(keys.wake_key(p.partition)) for p in held[1:]}
    victim = next((port for port in sorted(others) if port != first), None)
    if victim is None:
        pytest.skip("every partition's wake list is on one primary")
    handled: list[str] = []
    monkeypatch.setattr(process, "_handle_wake", handled.append)
    on_redis_cluster.rpush(keys.wake_key(held[0].partition), "release:1:2")
    try:
        redis_cluster.kill(victim)
        process.wait(0.5)
        assert handled == ["release:1:2"]
    finally:
        redis_cluster.restart_dead()
