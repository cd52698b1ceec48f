"""Rebuild the Redis time indexes from PostgreSQL (invariant 6: Redis is only a cache).

Built into temporary keys and renamed into place, so stale members disappear; then a
catch-up pass re-applies jobs edited while the rebuild ran (an edit can move a job's next
run earlier, and a stale later score would delay it; a stale earlier score is harmless:
the leader re-reads the job and corrects it).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from psycopg import sql

from . import index
from .keys import index_built_key, index_key, index_synced_key
from .store import table
from .tenant_directory import TenantDirectory

log = logging.getLogger("beat.rebuild")

PAGE = 20_000
SCHEDULABLE = "deleted_at IS NULL AND NOT paused AND next_run_at IS NOT NULL"


@dataclass(frozen=True)
class RebuildResult:
    tenants: int
    jobs: int
    runs: int
    seconds: float


def _db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def _pages(schema: str, tbl: str, columns: str, where: str, params: list):
    last = None
    while True:
        query = sql.SQL("SELECT id, {cols} FROM {tbl} WHERE {where} {after} ORDER BY id LIMIT %s")
        query = query.format(
            cols=sql.SQL(columns),
            tbl=table(schema, tbl),
            where=sql.SQL(where),
            after=sql.SQL("AND id > %s" if last is not None else ""),
        )
        with connection.cursor() as cursor:
            cursor.execute(query, [*params, *([last] if last is not None else []), PAGE])
            rows = cursor.fetchall()
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def _fill(client, tenants: list[tuple[int, str]], jobs_key: str, runs_key: str) -> tuple[int, int]:
    jobs = runs = 0
    for tenant_id, schema in tenants:
        for rows in _pages(schema, "jobs_job", "next_run_at", SCHEDULABLE, []):
            pipe = client.pipeline(transaction=False)
            pipe.zadd(jobs_key, {index.member(tenant_id, i): at.timestamp() for i, at in rows})
            pipe.execute()
            jobs += len(rows)
        waiting = "status IN ('scheduled', 'retrying')"
        for rows in _pages(schema, "runs_run", "due_at", waiting, []):
            pipe = client.pipeline(transaction=False)
            pipe.zadd(runs_key, {index.member(tenant_id, i): at.timestamp() for i, at in rows})
            pipe.execute()
            runs += len(rows)
    return jobs, runs


def _swap(client, tmp: str, live: str) -> None:
    if client.exists(tmp):
        client.rename(tmp, live)
    else:
        client.delete(live)


def _catch_up(client, tenants: list[tuple[int, str]], since: datetime) -> int:
    """Re-apply jobs edited since `since` to the index."""
    changed = 0
    for tenant_id, schema in tenants:
        columns = f"next_run_at, ({SCHEDULABLE}) AS schedulable"
        for rows in _pages(schema, "jobs_job", columns, "updated_at >= %s", [since]):
            pipe = client.pipeline(transaction=False)
            index.put_jobs(pipe, [(tenant_id, i, at) for i, at, ok in rows if ok])
            index.remove_jobs(pipe, [(tenant_id, i) for i, _at, ok in rows if not ok])
            pipe.execute()
            changed += len(rows)
    return changed


def rebuild_index(client) -> RebuildResult:
    started_wall = time.monotonic()
    since = _db_now()
    tenants = TenantDirectory().all()
    jobs_tmp, runs_tmp = f"{index_key()}:rebuilding", f"{index.runs_index_key()}:rebuilding"
    client.delete(jobs_tmp, runs_tmp)
    jobs, runs = _fill(client, tenants, jobs_tmp, runs_tmp)
    _swap(client, jobs_tmp, index_key())
    _swap(client, runs_tmp, index.runs_index_key())
    _catch_up(client, tenants, since)
    client.set(index_built_key(), since.isoformat())
    client.set(index_synced_key(), since.isoformat())
    result = RebuildResult(len(tenants), jobs, runs, time.monotonic() - started_wall)
    log.info(
        "rebuilt the time index: %s jobs, %s waiting runs, %s tenants in %.2fs",
        result.jobs,
        result.runs,
        result.tenants,
        result.seconds,
    )
    return result


# Edits are re-applied from a little before the last sync: web hosts stamp updated_at with
# their own clocks, which may lag the database's.
SYNC_OVERLAP = timedelta(seconds=60)


def sync_index(client) -> int:
    """Re-apply jobs edited since the last sync (services write the index after commit; if
    Redis did not answer then, this is where the edit reaches the index)."""
    now = _db_now()
    raw = client.get(index_synced_key())
    if raw is None:
        client.set(index_synced_key(), now.isoformat())
        return 0
    since = datetime.fromisoformat(raw.decode()) - SYNC_OVERLAP
    changed = _catch_up(client, TenantDirectory().all(), since)
    client.set(index_synced_key(), now.isoformat())
    return changed
