"""Names of the engine's Redis keys. All are rebuildable from PostgreSQL (invariant 6).

The keys a leader writes are per partition (docs/adr/0020): with `SCHEDULER_PARTITIONS`
above 1, or on a Redis Cluster (`REDIS_CLUSTER`), each carries the hash tag `{p<n>.<P>}`,
so that one partition's keys, the fencing scripts' lock among them, share one cluster
slot; the partition count is in the tag, so a changed count starts from empty indexes
(rebuilt from PostgreSQL). With one partition on a single Redis the names are those of a
single leader (no tag), as before partitions existed.
"""

from __future__ import annotations

from django.conf import settings

from core.partitions import partition_of


def _key(*parts: str) -> str:
    return ":".join([settings.SCHEDULER_REDIS_PREFIX, *parts])


def partition_count() -> int:
    return settings.SCHEDULER_PARTITIONS


def tenant_partition(tenant_id: int) -> int:
    """The partition whose leader handles the tenant (services and workers write there)."""
    return partition_of(tenant_id, partition_count())


def _pkey(partition: int, *parts: str) -> str:
    count = partition_count()
    if count == 1 and not settings.REDIS_CLUSTER:
        return _key(*parts)
    if not 0 <= partition < count:
        raise ValueError(f"partition {partition} is not in 0..{count - 1}")
    return ":".join([settings.SCHEDULER_REDIS_PREFIX, f"{{p{partition}.{count}}}", *parts])


def index_key(partition: int = 0) -> str:
    """Sorted set: member `<tenant id>:<job id>`, score = the job's next_run_at (epoch s)."""
    return _pkey(partition, "index")


def runs_index_key(partition: int = 0) -> str:
    """Sorted set: member `<tenant id>:<run id>`, score = when the run is due; runs admitted
    one by one (manual, backfill, replay, retry)."""
    return _pkey(partition, "runs")


def index_built_key(partition: int = 0) -> str:
    """Present once the index holds every schedulable job; gone after a Redis flush."""
    return _pkey(partition, "index", "built")


def rebuild_state_key(partition: int = 0) -> str:
    """Hash: the progress of the rebuild in progress (phases left, per-tenant cursors)."""
    return _pkey(partition, "index", "rebuild")


def faults_key(partition: int = 0) -> str:
    """JSON: the tenants the leader skips right now and why (for scheduler_status)."""
    return _pkey(partition, "leader", "faults")


def leader_lock_name(partition: int = 0) -> str:
    return _pkey(partition, "leader")  # python-redis-lock stores it under `lock:<name>`


def leader_info_key(partition: int = 0) -> str:
    """`hostname:pid` of the leading runscheduler, with the lease's expiry."""
    return _pkey(partition, "leader", "info")


def wake_key(partition: int = 0) -> str:
    """List: services and workers push here to wake the leader early."""
    return _pkey(partition, "wake")


def ended_key(partition: int = 0) -> str:
    """List: `<tenant id>:<run id>:<attempt>` of attempts that stopped being in flight
    (ended, cancelled), pushed by workers and services; the leader's admission control
    reads it to free the tenant's quota slot (capped: a periodic recount covers the rest)."""
    return _pkey(partition, "ended")


def admission_waiting_key(partition: int = 0) -> str:
    """Present while runs wait for admission: an ended attempt then also wakes the leader."""
    return _pkey(partition, "admission", "waiting")


def admission_stats_key(partition: int = 0) -> str:
    """JSON: per tenant, runs in flight and waiting for admission (for scheduler_status)."""
    return _pkey(partition, "admission", "stats")


def workers_key() -> str:
    """Sorted set: member `<host>:<pid>:<slots>` of each live worker, score = when its
    registration expires (epoch s); the leader sums the slots into the broker watermark."""
    return _key("workers")


def metrics_leader_key() -> str:
    """Hash: the leaders' counters and histogram buckets (core/metrics.py), each leader
    adding what it recorded; read by the web's /metrics. A flush only loses history."""
    return _key("metrics", "leader")


def schedulers_key() -> str:
    """Sorted set: member `hostname:pid` of each live runscheduler process (leader or
    standby), score = when its announcement expires (epoch s); for /metrics."""
    return _key("schedulers")


def schedulers_seen_key() -> str:
    """Sorted set: member `hostname:pid` of each runscheduler, score = when it last looked
    at who holds which partition (epoch s; every 0.1 s or so while it runs): the live
    processes the partition plan spreads over (`beat/partition_plan.py`)."""
    return _key("schedulers", "seen")


def schedulers_partitions_key() -> str:
    """Hash: `hostname:pid` -> the SCHEDULER_PARTITIONS that runscheduler runs with; a
    process refuses to lead while a live one runs with another count (two layouts of the
    same tenants would be two leaders for them)."""
    return _key("schedulers", "partitions")


def metrics_facts_key() -> str:
    """JSON: the facts /metrics last read from PostgreSQL and Redis, shared by every web
    process (one computes them per METRICS_CACHE_SECONDS, under the `:lock` key)."""
    return _key("metrics", "facts")
