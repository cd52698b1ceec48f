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
from datetime import datetime

from django.db import connection
from psycopg import sql

from core import index
from core.keys import index_built_key, index_key
from core.sql import table
from jobs.indexing import mark_indexed
from runs.status_sql import STATUS

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
            where=where if isinstance(where, sql.Composable) else sql.SQL(where),
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
        waiting = sql.SQL("status IN {waiting}").format(**STATUS)
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
    result = RebuildResult(len(tenants), jobs, runs, time.monotonic() - started_wall)
    log.info(
        "rebuilt the time index: %s jobs, %s waiting runs, %s tenants in %.2fs",
        result.jobs,
        result.runs,
        result.tenants,
        result.seconds,
    )
    return result


SYNC_BATCH = 2000


def sync_index(client, batch: int = SYNC_BATCH) -> int:
    """Write the index entries of jobs still flagged `index_dirty` (their service could not
    reach Redis after committing, or died first); at most `batch` per tenant per call, so
    a burst of edits never stalls the leader's loop."""
    synced = 0
    for tenant_id, schema in TenantDirectory().all():
        query = sql.SQL(
            f"SELECT id, next_run_at, ({SCHEDULABLE}), version FROM {{}} "
            "WHERE index_dirty ORDER BY id LIMIT %s"
        ).format(table(schema, "jobs_job"))
        with connection.cursor() as cursor:
            cursor.execute(query, [batch])
            rows = cursor.fetchall()
        if not rows:
            continue
        pipe = client.pipeline(transaction=False)
        index.put_jobs(pipe, [(tenant_id, i, at) for i, at, ok, _v in rows if ok])
        index.remove_jobs(pipe, [(tenant_id, i) for i, _at, ok, _v in rows if not ok])
        pipe.execute()
        mark_indexed(schema, [(i, v) for i, _at, _ok, v in rows])
        synced += len(rows)
    return synced
