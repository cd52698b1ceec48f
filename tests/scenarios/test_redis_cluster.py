"""A fleet on a real Redis Cluster (three primaries with a replica each) and RabbitMQ: two
`runscheduler` processes sharing the partitions and a Celery worker. The scheduler leading
alpha's partition is killed with SIGKILL, then the Redis primary serving beta's partition
slot: every slot of the window still gets exactly one run, and every run executes once."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta

import pytest

from core.clock import SystemClock
from core.keys import index_key, leader_info_key
from core.partitions import partition_of

from ..integration.helpers import make_job, runs_of
from .procs import scheduler, wait_for, worker
from .test_failover import _assert_each_executed_once, _assert_every_slot_once, _wait_succeeded

pytestmark = pytest.mark.slow


def _leaders(client, partitions: int) -> dict[int, str | None]:
    out = {}
    for n in range(partitions):
        try:
            raw = client.get(leader_info_key(n))
        except Exception:  # a primary failing over: that partition is unknown for a moment
            raw = None
        out[n] = raw.decode() if raw else None
    return out


def _two_tenant_fleet(live, redis_cluster, amqp_broker, settings):
    """Alpha and beta in partitions of their own (the fewest that put them apart), three
    jobs every second each, and the environment of a fleet on the cluster:
    (P, jobs by tenant, env)."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    P = next(n for n in range(2, 9) if partition_of(alpha.id, n) != partition_of(beta.id, n))
    settings.SCHEDULER_PARTITIONS = P  # the services write each tenant's partition keys
    for tenant in (alpha, beta):
        tenant.max_concurrency = 1_000
        tenant.save(update_fields=["max_concurrency"])
    jobs = {
        tenant: [
            make_job(tenant, SystemClock(), name=f"j{i}", schedule={"interval_seconds": 1})
            for i in range(3)
        ]
        for tenant in (alpha, beta)
    }
    env = {
        "REDIS_URL": redis_cluster.url,
        "REDIS_CLUSTER": "1",
        "REDIS_CLUSTER_NODES": redis_cluster.nodes_setting,
        "CELERY_BROKER_URL": amqp_broker,
        "SCHEDULER_PARTITIONS": str(P),
        "SCHEDULER_LEASE_SECONDS": "2",
        "SCHEDULER_LOOKAHEAD_SECONDS": "3",
        "SCHEDULER_RELAY_INTERVAL_SECONDS": "2",
    }
    return P, jobs, env


def test_a_scheduler_kill_and_a_primary_failover_lose_and_double_nothing(
    live, on_redis_cluster, redis_cluster, amqp_broker, settings, tmp_path
):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    P, jobs, env = _two_tenant_fleet(live, redis_cluster, amqp_broker, settings)
    first, second = partition_of(alpha.id, P), partition_of(beta.id, P)
    schedulers = [scheduler(tmp_path, f"s{i}", **env) for i in range(2)]
    procs = [*schedulers, worker(tmp_path, "w1", "--concurrency", "4", **env)]
    try:
        wait_for(lambda: all(_leaders(on_redis_cluster, P).values()), timeout=40)
        time.sleep(3)
        # 1. SIGKILL the process leading alpha's partition: the other leads all within seconds.
        holder = _leaders(on_redis_cluster, P)[first]
        killed = next(p for p in schedulers if holder.endswith(f":{p.pid}"))
        survivor = next(p for p in schedulers if p is not killed)
        killed_at, killed_wall = time.monotonic(), datetime.now(UTC)
        killed.kill9()
        wait_for(
            lambda: all(
                (h or "").endswith(f":{survivor.pid}")
                for h in _leaders(on_redis_cluster, P).values()
            ),
            timeout=15,
        )
        takeover = time.monotonic() - killed_at
        time.sleep(3)
        # 2. Kill the primary serving beta's partition keys: its replica is promoted.
        primary = redis_cluster.primary_of(index_key(second))
        apart = redis_cluster.primary_of(index_key(first)) != primary
        log_before = len(survivor.log())
        failed_at = time.monotonic()
        redis_cluster.kill(primary)
        wait_for(lambda: redis_cluster.primary_of(index_key(second)) != primary, timeout=30)
        redis_cluster.wait_healthy()
        promoted = time.monotonic() - failed_at
        promoted_wall = datetime.now(UTC)
        time.sleep(5)
        stopped_at = datetime.now(UTC)
        # the runs due before the window's end have time to execute
        _wait_succeeded((alpha, beta), stopped_at - timedelta(seconds=2), 30)
    finally:
        for proc in procs:
            proc.stop()
        redis_cluster.restart_dead()
        for tenant in (alpha, beta):
            tenant.max_concurrency = 100
            tenant.save(update_fields=["max_concurrency"])
    print(f"partition takeover after SIGKILL: {takeover:.2f}s; replica promoted: {promoted:.2f}s")
    for tenant, tenant_jobs in jobs.items():
        runs = runs_of(tenant)
        _assert_every_slot_once(runs, tenant_jobs, stopped_at - timedelta(seconds=2))
        until = stopped_at - timedelta(seconds=2)
        done = [r for r in runs if r.due_at <= until]
        # Every slot once (above) from before the kill to the last second before `until`,
        # after the promotion: the jobs went on through both faults. (A count of runs, as
        # before, depended on how long the fleet took to start.)
        for job in tenant_jobs:
            slots = [r.scheduled_for for r in done if r.job_id == job.id]
            assert min(slots) < killed_wall, (tenant.slug, job.id)
            assert max(slots) > max(promoted_wall, until - timedelta(seconds=1)), (
                tenant.slug,
                job.id,
            )
        _assert_each_executed_once(tenant, done)
    assert "took the lease" in survivor.log()
    during = survivor.log()[log_before:]
    assert f"stepping down from partition {second}" in during  # its primary went away
    if apart:  # alpha's partition, on a primary that stayed, was led throughout
        assert f"stepping down from partition {first}" not in during, during


def test_a_scheduler_started_while_no_cluster_node_answers_waits_for_one(
    live, rabbitmq_url, tmp_path
):
    """The cluster client reads the slot map as it is made: with no node answering,
    `runscheduler` says so and waits (a plain client would have started as a standby)
    instead of exiting with a traceback; it stops cleanly on SIGTERM."""
    env = {
        "REDIS_CLUSTER": "1",
        "REDIS_URL": "redis://127.0.0.1:1/0",  # nothing listens there
        "REDIS_CLUSTER_NODES": "",
        "CELERY_BROKER_URL": rabbitmq_url,
    }
    proc = scheduler(tmp_path, "waiting", **env)
    try:
        wait_for(lambda: "cannot reach Redis" in proc.log(), timeout=30, interval=0.2)
        time.sleep(2)  # still there after several tries
        assert proc.popen.poll() is None, proc.log()
    finally:
        proc.stop()
    assert proc.popen.returncode == 0, proc.log()
    assert "Traceback" not in proc.log()


def _gaps(runs, until: datetime) -> float:
    """The longest time between two consecutive runs' starts, up to `until` (seconds)."""
    starts = sorted(r.started_at for r in runs if r.started_at and r.due_at <= until)
    return max(((b - a).total_seconds() for a, b in itertools.pairwise(starts)), default=0.0)


@pytest.mark.parametrize(
    ("held", "socket_timeout"), [(1.0, 10), (12.0, 3)], ids=["thawed-at-once", "thawed-late"]
)
def test_a_frozen_primary_thawed_after_its_replica_took_over_doubles_and_loses_nothing(
    live, on_redis_cluster, redis_cluster, amqp_broker, settings, tmp_path, held, socket_timeout
):
    """The primary serving beta's partition is SIGSTOPped: its connections stay open and
    nothing answers. Its replica is promoted; then the old primary is thawed, `held`
    seconds later. Thawed at once, clients still wait on it (inside their 10 s socket
    timeout), so the commands queued on it run there, as on a primary, before it learns it
    was demoted and drops its data: a lease renewal it acknowledges then is one the
    cluster forgets. Thawed late, with REDIS_SOCKET_TIMEOUT_SECONDS=3, the clients give up
    on it after 3 s and the fleet goes on well before the thaw. Either way every slot fires
    once and every run executes once (the epochs in PostgreSQL fence a leader that believes
    it still leads)."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    P, jobs, env = _two_tenant_fleet(live, redis_cluster, amqp_broker, settings)
    second = partition_of(beta.id, P)
    env["REDIS_SOCKET_TIMEOUT_SECONDS"] = str(socket_timeout)
    schedulers = [scheduler(tmp_path, f"s{i}", **env) for i in range(2)]
    procs = [*schedulers, worker(tmp_path, "w1", "--concurrency", "4", **env)]
    primary = None
    try:
        wait_for(lambda: all(_leaders(on_redis_cluster, P).values()), timeout=40)
        time.sleep(3)
        primary = redis_cluster.primary_of(index_key(second))
        frozen_at = time.monotonic()
        redis_cluster.freeze(primary)
        wait_for(lambda: redis_cluster.primary_of(index_key(second)) != primary, timeout=30)
        promoted = time.monotonic() - frozen_at
        time.sleep(held)
        redis_cluster.thaw(primary)
        thawed = time.monotonic() - frozen_at
        redis_cluster.wait_healthy()
        rejoined = time.monotonic() - frozen_at
        time.sleep(12)  # past every client's socket timeout (10 s) on the frozen node
        stopped_at = datetime.now(UTC)
        _wait_succeeded((alpha, beta), stopped_at - timedelta(seconds=2), 40)
    finally:
        if primary is not None and primary in redis_cluster.frozen:
            redis_cluster.thaw(primary)
        for proc in procs:
            proc.stop()
        redis_cluster.restart_dead()
        for tenant in (alpha, beta):
            tenant.max_concurrency = 100
            tenant.save(update_fields=["max_concurrency"])
    until = stopped_at - timedelta(seconds=2)
    gaps = {t.slug: _gaps(runs_of(t), until) for t in (alpha, beta)}
    print(
        f"frozen primary (thawed {held:.0f} s after the promotion, socket timeout"
        f" {socket_timeout} s): replica promoted after"
        f" {promoted:.2f}s, thawed at {thawed:.2f}s,"
        f" rejoined as a replica at {rejoined:.2f}s; longest gap between run starts: "
        + ", ".join(f"{slug} {gap:.2f}s" for slug, gap in gaps.items())
    )
    for tenant, tenant_jobs in jobs.items():
        runs = runs_of(tenant)
        _assert_every_slot_once(runs, tenant_jobs, until)
        done = [r for r in runs if r.due_at <= until]
        _assert_each_executed_once(tenant, done)
    assert not redis_cluster.primary_of_port(primary)  # the old primary came back a replica
    if held > socket_timeout + 5:
        # the fleet went on while the node was still frozen, not only once it was thawed
        assert max(gaps.values()) < held, gaps
