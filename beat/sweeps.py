"""The leader's periodic sweeps over every tenant: relay, index reconciliation, dirty-job
sync and reaping.

Each is bounded: a pass walks the tenants in chunks within a time budget per iteration,
stops early when a run is due (firing on time comes first), and goes on from where it
stopped in the next iteration, renewing the lease in between; so a few thousand tenants
never make one iteration outlast the lease. A chunk's tenants are read with ONE statement
(`UNION ALL` of each schema's query, on its partial index), not one round trip each; if
that statement fails, the chunk is done again one tenant at a time, each isolated
(`beat/faults.py`), so that a broken tenant costs only itself.

- relay: runs waiting in PostgreSQL (`scheduled`/`retrying`) but not in memory (a leader
  died between materialising and publishing, or an index write was lost) join the heap
  (invariant 2): every waiting run due within the window, its extra and the largest
  jitter (an hour) of a tenant the leader has not read whole yet (all of them at takeover), else
  only overdue ones; each periodic pass
  also admits held `queue`-policy runs again, so none stays held if the wake-up that
  should release it was lost.
- reconcile: schedulable jobs due within the lookahead window that the index misses, or
  holds too late, are put back (a lost index write must never lose a fire).
- sync: jobs whose post-commit index write did not happen (`index_dirty`) are written.
- reap: a chunk-wide check finds the tenants with runs whose worker went silent or whose
  message went missing; only those are reaped (`beat/reaper.py`, invariant 5).
- settle DAG runs: running DAG runs whose ended runs no longer match their last settle (a
  worker killed between its finish and its settle, a run reaped, cancelled or skipped at
  admission) are settled (`runs/dags.py`), so none waits for a settle that never comes.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import connection, transaction
from psycopg import sql

from core import index
from core.logs import log_event
from core.sql import per_schema, table, tagged_union
from jobs.indexing import mark_indexed
from jobs.validation import MAX_JITTER_SECONDS
from runs.dags import dag_settle, to_settle_query
from runs.status_sql import STATUS
from tenants.services import slug_for_schema

from . import reaper, store
from .faults import isolated, must_step_down
from .metrics import record_reap, record_relayed

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("beat.sweeps")

# Schemas per UNION ALL statement. Each keeps one lock per table and index it reads until
# it ends (about 10 a schema): 25 stays far below PostgreSQL's shared lock table (64 per
# connection by default), and a statement per chunk stays prepared.
CHUNK_TENANTS = 25
RELAY_PAGE = 10_000  # waiting runs per statement; a tenant's pages go on until all are read
RECONCILE_LIMIT = 1000  # jobs checked per tenant per pass: the soonest due
SYNC_BATCH = 2000  # dirty jobs per tenant per pass
DAG_SETTLE_BATCH = 100  # DAG runs settled per tenant per pass

Tenants = list[tuple[int, str]]


class TenantSweep:
    """A pass over every tenant, done in slices across iterations."""

    def __init__(self, name: str, interval_seconds: float) -> None:
        self.name = name
        self.interval = interval_seconds
        self._todo: Tenants = []
        self.last_started: datetime | None = None
        self.last_completed: datetime | None = None
        self.running = False

    def due(self, now: datetime, force: bool = False) -> bool:
        """A pass begins `interval` after the last one ended (or began, if none ended):
        with thousands of tenants a pass outlasts its interval, and counted from its start
        the next one began the moment it ended, so the sweeps took the leader's time
        without a pause (18 % of it at 10,000 tenants, all five running at once)."""
        if self.running or force or self.last_started is None:
            return True
        since = self.last_completed or self.last_started
        return now - since >= timedelta(seconds=self.interval)

    def start(self, tenants: Tenants, now: datetime) -> None:
        self._todo = list(tenants)
        self.last_started = now
        self.running = True

    def take(self, count: int) -> Tenants:
        chunk, self._todo = self._todo[:count], self._todo[count:]
        return chunk

    def finish_if_empty(self, now: datetime) -> None:
        if not self._todo:
            self.running = False
            self.last_completed = now

    @property
    def remaining(self) -> int:
        return len(self._todo)


def run_sweep(
    engine: Engine,
    sweep: TenantSweep,
    work: Callable[[Tenants], int],
    *,
    force: bool = False,
    on_start: Callable[[], None] | None = None,
) -> int:
    """One slice of `sweep`: `work(chunk)` per chunk of tenants until the budget is spent
    (at least one chunk), or a run comes due."""
    now = engine.clock.now()
    if not sweep.due(now, force):
        return 0
    if not sweep.running or force:
        sweep.start(engine.tenants.all(), now)
        if on_start:
            on_start()
    deadline = time.monotonic() + engine.config.sweep_budget_seconds
    done = 0
    while sweep.remaining:
        engine.checkpoint()
        chunk = [t for t in sweep.take(CHUNK_TENANTS) if engine.faults.allowed(t[0])]
        done += _work_chunk(engine, chunk, work)
        if time.monotonic() >= deadline or engine.fire_is_due():
            break
    sweep.finish_if_empty(now)
    return done


def _work_chunk(engine: Engine, chunk: Tenants, work: Callable[[Tenants], int]) -> int:
    """Reads in autocommit (each statement's locks, one per table and index of each schema,
    go as soon as it ends); what writes opens its own transaction."""
    if not chunk:
        return 0
    try:
        count = work(chunk)
    except Exception as exc:
        if must_step_down(exc):
            raise
        if len(chunk) == 1:
            engine.faults.failed(chunk[0][0], chunk[0][1], exc)
            return 0
        count = 0  # find the tenants at fault: one at a time, each isolated
        for tenant_id, schema in chunk:
            _ran, one = isolated(
                engine.faults, tenant_id, schema, lambda t=tenant_id, s=schema: work([(t, s)])
            )
            count += one or 0
        return count
    for tenant_id, _schema in chunk:
        engine.faults.succeeded(tenant_id)
    return count


def _union(chunk: Tenants, query: Callable[[str], sql.Composable]) -> sql.Composed:
    """One statement reading every tenant of the chunk; each row starts with its tenant."""
    return tagged_union((tenant_id, query(schema)) for tenant_id, schema in chunk)


def rows_by_tenant(chunk: Tenants, query, params: list) -> dict[int, list[tuple]]:
    rows: dict[int, list[tuple]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(_union(chunk, query), params * len(chunk))
        for tenant_id, *row in cursor.fetchall():
            rows[tenant_id].append(tuple(row))
    return rows


# --- relay -------------------------------------------------------------------------------


@per_schema
def any_waiting_query(schema: str) -> sql.Composable:
    """Whether the schema has waiting runs due by the parameter: the relay's check."""
    return sql.SQL(
        "SELECT EXISTS (SELECT 1 FROM {runs} WHERE status IN {waiting} AND due_at <= %s)"
    ).format(runs=table(schema, "runs_run"), **STATUS)


def relay_chunk(engine: Engine, chunk: Tenants, *, overdue: datetime) -> int:
    """Waiting runs that the leader does not hold. A tenant it has not read whole yet
    (every tenant at takeover, one its back-off kept out until it is read) is read for
    every run due within the window, its extra and the largest jitter: the leader that prepared a
    run far ahead (jitter of up to an hour) held it only in its memory, and found once
    overdue it would be judged late. Retries due later wait in the runs index. The others
    are asked only for runs due by `overdue`."""
    fresh = [t for t in chunk if t[0] not in engine.relayed]
    read = [t for t in chunk if t[0] in engine.relayed]
    added = _relay(engine, read, overdue)
    # A run prepared ahead is due at most the window, its extra and the largest jitter from now;
    # retries due later are in the runs index, which the leader loads as they come due.
    ahead = engine.clock.now() + timedelta(
        seconds=engine.config.prepare_until_seconds + MAX_JITTER_SECONDS
    )
    for schema, count in _relay(engine, fresh, ahead).items():
        added[schema] = added.get(schema, 0) + count
    # Only once read without an error: a tenant that failed is read whole by a later pass.
    engine.relayed.update(tenant_id for tenant_id, _schema in fresh)
    _log_relayed(added)
    return sum(added.values())


def _relay(engine: Engine, chunk: Tenants, until: datetime) -> dict[str, int]:
    """Waiting runs due by `until` that the leader does not hold join its heap: first one
    cheap check for the whole chunk (usually: none anywhere), then the runs of the tenants
    that have some. Returns how many joined, per schema."""
    added: dict[str, int] = {}
    if not chunk:
        return added
    waiting = rows_by_tenant(chunk, any_waiting_query, [until])
    flagged = [(t, s) for t, s in chunk if waiting.get(t, [(False,)])[0][0]]
    now = engine.clock.now()
    for tenant_id, schema in flagged:
        for ref in _waiting_runs(engine, schema, until):
            if ref.run_id not in engine.runs.known:
                entry = engine.runs.build(tenant_id, schema, ref)
                # Already past its instant with no leader holding it: the misfire policy
                # decides it. A run still ahead (takeover) is held from now on, on time.
                entry.judge_lateness = ref.due_at <= now
                if engine.runs.remember(entry):
                    added[entry.schema] = added.get(entry.schema, 0) + 1
    return added


def _log_relayed(added: dict[str, int]) -> None:
    if not added:
        return
    record_relayed(sum(added.values()))
    log_event(
        log,
        "leader.relayed",
        "relayed %s waiting runs the leader did not hold, of %s tenants (%s)",
        sum(added.values()),
        len(added),
        ", ".join(sorted(added)[:5]) + (", ..." if len(added) > 5 else ""),
        level=logging.WARNING,
        count=sum(added.values()),
        tenants=len(added),
    )


def _waiting_runs(engine: Engine, schema: str, until: datetime):
    """Every waiting run of the schema due by `until`, page by page: a takeover must hold
    them all, however many runs one tenant has waiting."""
    after = None
    while True:
        with connection.cursor() as cursor:
            page = store.pending_runs(cursor, schema, until=until, limit=RELAY_PAGE, after=after)
        yield from page
        if len(page) < RELAY_PAGE:
            return
        after = (page[-1].due_at, page[-1].run_id)
        engine.checkpoint()


# --- reconcile the jobs index with PostgreSQL -------------------------------------------


@per_schema
def _due_jobs_query(schema: str) -> sql.Composable:
    return sql.SQL(
        f"SELECT id, next_run_at FROM {{}} WHERE {store.SCHEDULABLE} AND next_run_at <= %s "
        "ORDER BY next_run_at LIMIT %s"
    ).format(table(schema, "jobs_job"))


def reconcile_chunk(engine: Engine, chunk: Tenants, until: datetime) -> int:
    """Put back schedulable jobs due by `until` that the index misses or holds too late."""

    due = [
        (index.member(tenant_id, job_id), at)
        for tenant_id, rows in rows_by_tenant(
            chunk, _due_jobs_query, [until, RECONCILE_LIMIT]
        ).items()
        for job_id, at in rows
    ]
    if not due:
        return 0
    scores = engine.client.zmscore(engine.index_key, [m for m, _ in due])
    repairs = {
        m: at.timestamp()
        for (m, at), score in zip(due, scores, strict=True)
        if score is None or score > at.timestamp() + 0.001
    }
    if repairs:
        engine.writes.lower_jobs(repairs)
        log_event(
            log,
            "leader.reconciled",
            "%s due jobs were missing from the index (or late in it): put back",
            len(repairs),
            level=logging.WARNING,
            count=len(repairs),
        )
    return len(repairs)


# --- sync jobs whose index write was lost ------------------------------------------------


@per_schema
def _dirty_jobs_query(schema: str) -> sql.Composable:
    return sql.SQL(
        f"SELECT id, next_run_at, ({store.SCHEDULABLE}), version FROM {{}} "
        "WHERE index_dirty ORDER BY id LIMIT %s"
    ).format(table(schema, "jobs_job"))


def sync_chunk(engine: Engine, chunk: Tenants) -> int:
    schemas = dict(chunk)
    synced = 0
    for tenant_id, rows in rows_by_tenant(chunk, _dirty_jobs_query, [SYNC_BATCH]).items():
        # Add or lower only: an unschedulable job keeps its entry until the leader reads
        # its row when the score comes due (see core/index.py).
        engine.writes.lower_jobs(
            {index.member(tenant_id, i): at.timestamp() for i, at, ok, _v in rows if ok}
        )
        mark_indexed(schemas[tenant_id], [(i, v) for i, _at, _ok, v in rows])
        synced += len(rows)
    return synced


# --- reap --------------------------------------------------------------------------------


@per_schema
def _anything_to_reap_query(schema: str) -> sql.Composable:
    return sql.SQL(
        "SELECT EXISTS (SELECT 1 FROM {runs} WHERE status = {running} "
        "  AND heartbeat_at < now() - make_interval(secs => %s)"
        "  AND pg_postmaster_start_time() < now() - make_interval(secs => %s))"
        " OR EXISTS (SELECT 1 FROM {runs} WHERE status = {queued} "
        "  AND queued_at < now() - make_interval(secs => %s))"
    ).format(runs=table(schema, "runs_run"), **STATUS)


def reap_chunk(engine: Engine, chunk: Tenants) -> int:
    """Reap only the tenants of the chunk that have something to reap."""
    timeout = engine.config.visibility_timeout_seconds
    schemas = dict(chunk)
    found = rows_by_tenant(chunk, _anything_to_reap_query, [timeout, timeout, timeout])
    count = 0
    for tenant_id, rows in found.items():
        if rows and rows[0][0]:
            with transaction.atomic():
                count += reap_tenant(engine, tenant_id, schemas[tenant_id])
    return count


def reap_tenant(engine: Engine, tenant_id: int, schema: str) -> int:
    timeout = engine.config.visibility_timeout_seconds
    now = engine.clock.now()
    with connection.cursor() as cursor:
        store.fence(cursor, engine.epoch, "reap", engine.partition)
        reaped = reaper.reap_lost(cursor, schema, now, timeout)
        stale = reaper.stale_queued(cursor, schema, timeout)
        entries = [engine.runs.build(tenant_id, schema, ref) for ref in stale]
        engine.writes.push_messages([(e.queue, e.message) for e in entries])
    # Memory moves before the commit: if it fails, these runs are still `running` in
    # PostgreSQL, and admission moves nothing that is not waiting.
    for ref in reaped.retrying:
        engine.runs.remember(engine.runs.build(tenant_id, schema, ref))
    if reaped.retrying:
        # In the runs index too, as a worker's retry is: a leader taking over loads it as
        # it comes due, however long its back-off (the takeover relay reads the next hour).
        pipe = engine.client.pipeline(transaction=False)
        index.put_runs(pipe, [(tenant_id, ref.run_id, ref.due_at) for ref in reaped.retrying])
        pipe.execute()
    for job_id in reaped.jobs:
        engine.runs.release(tenant_id, job_id)  # a `queue` job's held runs may go now
    count = len(reaped.retrying) + reaped.dead + len(stale)
    record_reap(schema, retrying=len(reaped.retrying), dead=reaped.dead, republished=len(stale))
    if count:
        log_event(
            log,
            "leader.reaped",
            "%s: reaped %s lost runs (%s dead), re-published %s stale queued",
            schema,
            len(reaped.retrying) + reaped.dead,
            reaped.dead,
            len(stale),
            level=logging.WARNING,
            tenant=slug_for_schema(schema),
            retrying=len(reaped.retrying),
            dead=reaped.dead,
            republished=len(stale),
        )
    return count


# --- settle DAG runs ---------------------------------------------------------------------


def dag_chunk(engine: Engine, chunk: Tenants) -> int:
    """Settle the DAG runs of the chunk's tenants that a settle missed. Settling is safe
    from any process at any time (runs/dags.py), so it is not fenced."""
    schemas = dict(chunk)
    settled = 0
    for tenant_id, rows in rows_by_tenant(chunk, to_settle_query, [DAG_SETTLE_BATCH]).items():
        for (dag_run_id,) in rows:
            engine.checkpoint()
            dag_settle(schema=schemas[tenant_id], dag_run_id=dag_run_id, now=engine.clock.now())
            settled += 1
    if settled:
        log_event(
            log,
            "leader.dag_runs_settled",
            "settled %s DAG runs whose last end had not been settled",
            settled,
            level=logging.WARNING,
            count=settled,
        )
    return settled
