"""The Redis time indexes. Two sorted sets, both rebuildable from PostgreSQL:

- jobs: member `<tenant id>:<job id>`, score = the job's next_run_at. The leader reads
  only the due head of it (ZRANGEBYSCORE, O(log n + due)), never the whole set.
- runs: member `<tenant id>:<run id>`, score = due time, for runs admitted one by one
  (manual triggers, retries, dependency runs) rather than materialised from a schedule.

How the jobs index stays right with many writers and no version memory: a score that is
too early only costs the leader a look at the job (it re-reads the row and corrects the
score); a score that is too late, or a missing member, loses a fire. So:

- everyone but the leader only *adds or lowers* a score (`ZADD LT`), and never removes:
  writes that arrive out of order can then only leave a score too early;
- the leader moves a score later, or removes a member, only by compare-and-set against the
  score it read (`beat/fenced.py`), so it never undoes a concurrent edit's write.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from .keys import index_built_key, index_key, runs_index_key, tenant_partition, wake_key


def member(tenant_id: int, object_id: object) -> str:
    return f"{tenant_id}:{object_id}"


def parse_member(raw: bytes | str) -> tuple[int, str]:
    text = raw.decode() if isinstance(raw, bytes) else raw
    tenant, _, object_id = text.partition(":")
    return int(tenant), object_id


def _by_partition(entries: Iterable[tuple[int, object, datetime]]) -> dict[int, dict]:
    """Entries grouped by their tenant's partition: `{partition: {member: score}}`."""
    out: dict[int, dict] = {}
    partitions: dict[int, int] = {}  # a bulk write is mostly one tenant: one hash each
    for tenant_id, object_id, when in entries:
        if tenant_id not in partitions:
            partitions[tenant_id] = tenant_partition(tenant_id)
        out.setdefault(partitions[tenant_id], {})[member(tenant_id, object_id)] = when.timestamp()
    return out


def lower_jobs(pipe, entries: Iterable[tuple[int, int, datetime]]) -> set[int]:
    """Add each job, or move its score earlier (never later): safe in any order. Returns
    the partitions written (their leaders are the ones to wake)."""
    grouped = _by_partition(entries)
    for partition, mapping in grouped.items():
        pipe.zadd(index_key(partition), mapping, lt=True)
    return set(grouped)


def put_runs(pipe, entries: Iterable[tuple[int, object, datetime]]) -> set[int]:
    grouped = _by_partition(entries)
    for partition, mapping in grouped.items():
        pipe.zadd(runs_index_key(partition), mapping)
    return set(grouped)


def due(client, key: str, horizon: float, limit: int) -> list[tuple[int, str, float]]:
    rows = client.zrangebyscore(key, "-inf", horizon, start=0, num=limit, withscores=True)
    return [(*parse_member(raw), score) for raw, score in rows]


def earliest(client, key: str) -> float | None:
    head = client.zrange(key, 0, 0, withscores=True)
    return head[0][1] if head else None


def is_built(client, partition: int = 0) -> bool:
    return bool(client.exists(index_built_key(partition)))


def wake(client, *reasons: str, partitions: Iterable[int]) -> None:
    """Wake the leaders of these partitions now (each sleeps until its next due instant
    otherwise)."""
    for partition in partitions:
        client.lpush(wake_key(partition), *(reasons or ("index",)))


def wake_tenant(pipe, tenant_id: int, reason: str) -> None:
    """Queue a wake-up of the tenant's leader on `pipe` (RPUSH: after what is queued)."""
    pipe.rpush(wake_key(tenant_partition(tenant_id)), reason)
