"""Names of the engine's Redis keys. All are rebuildable from PostgreSQL (invariant 6)."""

from __future__ import annotations

from django.conf import settings


def _key(*parts: str) -> str:
    return ":".join([settings.SCHEDULER_REDIS_PREFIX, *parts])


def index_key() -> str:
    """Sorted set: member `<tenant id>:<job id>`, score = the job's next_run_at (epoch s)."""
    return _key("index")


def runs_index_key() -> str:
    """Sorted set: member `<tenant id>:<run id>`, score = when the run is due; runs admitted
    one by one (manual, backfill, replay, retry)."""
    return _key("runs")


def index_built_key() -> str:
    """Present once the index holds every schedulable job; gone after a Redis flush."""
    return _key("index", "built")


def rebuild_state_key() -> str:
    """Hash: the progress of the rebuild in progress (phases left, per-tenant cursors)."""
    return _key("index", "rebuild")


def faults_key() -> str:
    """JSON: the tenants the leader skips right now and why (for scheduler_status)."""
    return _key("leader", "faults")


def leader_lock_name() -> str:
    return _key("leader")  # python-redis-lock stores it under `lock:<name>`


def leader_info_key() -> str:
    """`hostname:pid` of the leading runscheduler, with the lease's expiry."""
    return _key("leader", "info")


def wake_key() -> str:
    """List: services and workers push here to wake the leader early."""
    return _key("wake")


def ended_key() -> str:
    """List: `<tenant id>:<run id>:<attempt>` of attempts that stopped being in flight
    (ended, cancelled), pushed by workers and services; the leader's admission control
    reads it to free the tenant's quota slot (capped: a periodic recount covers the rest)."""
    return _key("ended")


def admission_waiting_key() -> str:
    """Present while runs wait for admission: an ended attempt then also wakes the leader."""
    return _key("admission", "waiting")


def admission_stats_key() -> str:
    """JSON: per tenant, runs in flight and waiting for admission (for scheduler_status)."""
    return _key("admission", "stats")


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


def metrics_facts_key() -> str:
    """JSON: the facts /metrics last read from PostgreSQL and Redis, shared by every web
    process (one computes them per METRICS_CACHE_SECONDS, under the `:lock` key)."""
    return _key("metrics", "facts")
