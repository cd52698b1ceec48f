"""Keeping the Redis time index in step with a job's row (PostgreSQL is the truth).

A service saves a changed job flagged `index_dirty` in its own transaction; after the
commit it adds the job's index entry (or lowers its score) and clears the flag. If Redis
does not answer, or the process dies in between, the flag stays and the leader's sync
writes the entry: an edit can never be lost to the index, and the sync reads only flagged
jobs. A service never removes an entry or moves one later (see `core/index.py`): a job
paused, deleted or postponed keeps its old score until the leader, reading the row when
that score comes due, removes it or moves it on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import connection, transaction
from psycopg import sql

from core import index
from core.keys import tenant_partition, wake_key
from core.redis import REDIS_ERRORS, get_redis
from core.sql import pg_array, table, without_waiting_for_disk
from tenants.models import Tenant

from .models import Job

log = logging.getLogger("jobs.indexing")


def save_and_index(tenant: Tenant, job: Job, *, creating: bool = False) -> None:
    """Save a changed job (version bumped, flagged dirty); index it after the commit."""
    if not creating:
        job.version += 1
    job.index_dirty = True
    job.save()
    index_after_commit(tenant, [job])


def create_and_index(tenant: Tenant, jobs: list[Job]) -> None:
    """Insert new jobs in one statement, flagged dirty; index them after the commit, as
    `save_and_index` does one job."""
    for job in jobs:
        job.index_dirty = True
    Job.objects.bulk_create(jobs)
    index_after_commit(tenant, jobs)


_batch: ContextVar[list | None] = ContextVar("index_batch", default=None)


@contextmanager
def batched_index_writes(tenant: Tenant) -> Iterator[None]:
    """Inside a transaction: the index writes of every job saved in the block go to Redis
    together after the commit (one pipeline, one flag update) instead of one round trip
    each: a bulk action on 1,000 jobs."""
    jobs: list[Job] = []
    token = _batch.set(jobs)
    try:
        yield
    finally:
        _batch.reset(token)
    _index_after_commit(tenant, jobs)


def index_after_commit(tenant: Tenant, jobs: list[Job]) -> None:
    batch = _batch.get()
    if batch is not None:
        batch.extend(jobs)
    else:
        _index_after_commit(tenant, jobs)


def _index_after_commit(tenant: Tenant, jobs: list[Job]) -> None:
    if not jobs:
        return
    schema, tenant_id = tenant.schema_name, tenant.id
    entries = [
        (tenant_id, job.id, job.next_run_at)
        for job in jobs
        if job.deleted_at is None and not job.paused and job.next_run_at is not None
    ]
    marks = list({job.id: (job.id, job.version) for job in jobs}.values())

    def sync() -> None:
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        index.lower_jobs(pipe, entries)
        index.wake_tenant(pipe, tenant_id, "index")
        pipe.execute()
        mark_indexed(schema, marks)

    transaction.on_commit(lambda: best_effort(sync))


def mark_indexed(schema: str, jobs: list[tuple[int, int]]) -> None:
    """Clear `index_dirty` of jobs whose index entry was written at that version (a newer
    edit keeps its flag)."""
    if not jobs:
        return
    ids, versions = zip(*jobs, strict=True)
    query = sql.SQL(
        "UPDATE {} AS j SET index_dirty = false FROM unnest(%s::bigint[], %s::int[]) AS u(id, v) "
        "WHERE j.id = u.id AND j.version = u.v"
    ).format(table(schema, "jobs_job"))
    # A flag lost in a crash only makes the leader's sync sweep write the entry again.
    with without_waiting_for_disk(), connection.cursor() as cursor:
        cursor.execute(query, [pg_array(list(ids)), pg_array(list(versions))])


def best_effort(write_index: Callable[[], None]) -> None:
    """The change is committed in PostgreSQL, the truth. If Redis does not answer now, the
    leader's periodic sync (jobs) and relay (runs) bring the index up to date later: the
    request must not fail for it."""
    try:
        write_index()
    except REDIS_ERRORS as exc:
        log.warning("time index not updated now (%s); the leader's sync will catch up", exc)


INDEX_PAGE = 5000
# A job the index must hold (the partial index job_schedulable_idx has the same predicate).
SCHEDULABLE = "deleted_at IS NULL AND NOT paused AND next_run_at IS NOT NULL AND fault_code = ''"


def index_tenant_jobs(tenant: Tenant) -> int:
    """Write every schedulable job of the tenant into the index (add or lower, a page of
    jobs per round trip): after a suspension, which the leader treats as the tenant being
    gone, dropping its entries. Returns how many jobs were written."""
    client = get_redis()
    written, after = 0, 0
    while True:
        query = sql.SQL(
            f"SELECT id, next_run_at FROM {{}} WHERE {SCHEDULABLE} AND id > %s ORDER BY id LIMIT %s"
        ).format(table(tenant.schema_name, "jobs_job"))
        with connection.cursor() as cursor:
            cursor.execute(query, [after, INDEX_PAGE])
            rows = cursor.fetchall()
        if rows:
            pipe = client.pipeline(transaction=False)
            index.lower_jobs(pipe, [(tenant.id, job_id, at) for job_id, at in rows])
            pipe.execute()
            written += len(rows)
        if len(rows) < INDEX_PAGE:
            break
        after = rows[-1][0]
    client.rpush(wake_key(tenant_partition(tenant.id)), "index")
    return written
