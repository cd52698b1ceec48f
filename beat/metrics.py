"""The leader's metrics: what fire, reap and relay did, recorded in memory
(`core.metrics.LEADER`) and added to Redis about once a second, where the web's /metrics
reads them whatever host it runs on (ADR 0013). Recording never fails the leader's work:
a flush that Redis refuses keeps its figures for the next one."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable

from core.keys import schedulers_key, schedulers_partitions_key
from core.metrics import LEADER, tenant_label
from core.redis import REDIS_ERRORS
from runs import states
from tenants.services import slug_for_schema

from .pending import Pending

FLUSH_SECONDS = 1.0
_last_flush = [float("-inf")]
_last_announce: dict[str, float] = {}


def record_fire(
    schema: str, queued: Iterable[Pending], skipped: int, cancelled: int, published_at: float
) -> None:
    """One schema's admission in a fire chunk: the published runs' lag by priority, and the
    runs it ended (skipped: paused, misfire, overlap; cancelled: deleted, replaced)."""
    lags: dict[str, list[float]] = defaultdict(list)
    for entry in queued:
        lags[entry.priority].append(max(published_at - entry.due, 0.0))
    for priority, values in lags.items():
        LEADER.observe_many("tickwork_fire_lag_seconds", values, priority=priority)
    if skipped or cancelled:
        tenant = tenant_label(slug_for_schema(schema))
        LEADER.inc("tickwork_runs_finished", skipped, tenant=tenant, status=states.SKIPPED)
        LEADER.inc("tickwork_runs_finished", cancelled, tenant=tenant, status=states.CANCELLED)


def record_reap(schema: str, *, retrying: int, dead: int, republished: int) -> None:
    LEADER.inc("tickwork_runs_reaped", retrying, outcome=states.RETRYING)
    LEADER.inc("tickwork_runs_reaped", dead, outcome=states.DEAD)
    LEADER.inc("tickwork_queued_runs_republished", republished)
    if dead:
        tenant = tenant_label(slug_for_schema(schema))
        LEADER.inc("tickwork_runs_finished", dead, tenant=tenant, status=states.DEAD)


def record_relayed(count: int) -> None:
    LEADER.inc("tickwork_runs_relayed", count)


def iteration_done(client, started: float, *, force_flush: bool = False) -> None:
    """One leader iteration ended (`started`: its time.monotonic()); flush when due."""
    now = time.monotonic()
    LEADER.observe("tickwork_leader_iteration_duration_seconds", now - started)
    if force_flush or now - _last_flush[0] >= FLUSH_SECONDS:
        flush(client)
        _last_flush[0] = now


def flush(client) -> bool:
    """Add the recorded figures to Redis; False (figures kept) if Redis did not answer."""
    try:
        LEADER.flush(client, at=time.time())
    except REDIS_ERRORS:
        return False
    return True


def announcement_ttl(lease_seconds: float) -> float:
    """How long an announcement stands (`tickwork_schedulers` counts those standing)."""
    return max(3 * lease_seconds, 5.0)


def announce(client, holder: str, lease_seconds: float, *, partitions: int = 1) -> None:
    """Every scheduler process, leader or standby, says it is alive about once a second
    (for `tickwork_schedulers`: a fleet down to one process has no standby left; and for
    the partition plan, which spreads partitions over the live processes), with the
    partition count it runs with."""
    now = time.monotonic()
    if now - _last_announce.get(holder, float("-inf")) < FLUSH_SECONDS:
        return
    _last_announce[holder] = now
    wall = time.time()
    try:
        pipe = client.pipeline(transaction=False)
        pipe.zadd(schedulers_key(), {holder: wall + announcement_ttl(lease_seconds)})
        pipe.zrangebyscore(schedulers_key(), "-inf", wall)
        pipe.zremrangebyscore(schedulers_key(), "-inf", wall)
        pipe.hset(schedulers_partitions_key(), holder, partitions)
        gone = pipe.execute()[1]
        if gone:
            client.hdel(schedulers_partitions_key(), *gone)
    except REDIS_ERRORS:
        pass  # the lease handling notices Redis is away; this is only a figure
