"""The leader's periodic sweeps over every tenant: relay, index reconciliation, dirty-job
sync and reaping. Each is bounded: a pass walks the tenants round-robin within a time
budget per iteration and goes on from where it stopped in the next one, so a few thousand
tenants never make one iteration outlast the lease.

- relay: runs waiting in PostgreSQL (`scheduled`/`retrying`) but not in memory (a leader
  died between materialising and publishing, or an index write was lost) join the heap
  (invariant 2); held `queue`-policy runs are admitted again, so none stays held if the
  wake-up that should release it was lost.
- reconcile: schedulable jobs due within the lookahead window that the index misses, or
  holds too late, are put back (a lost index write must never lose a fire).
- sync: jobs whose post-commit index write did not happen (`index_dirty`) are written.
- reap: runs whose worker went silent, and queued runs whose message went missing
  (`beat/reaper.py`, invariant 5).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import connection
from psycopg import sql

from core import index
from core.sql import table
from jobs.indexing import mark_indexed

from . import reaper, store
from .faults import isolated

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("beat.sweeps")

RECONCILE_LIMIT = 1000  # jobs checked per tenant per pass: the soonest due
SYNC_BATCH = 2000


class TenantSweep:
    """A pass over every tenant, done in slices: `slice(deadline)` yields tenants from where
    the last slice stopped until the deadline passes; `complete` once the pass wrapped."""

    def __init__(self, name: str, interval_seconds: float) -> None:
        self.name = name
        self.interval = interval_seconds
        self._todo: list[tuple[int, str]] = []
        self.last_started: datetime | None = None
        self.last_completed: datetime | None = None
        self.running = False

    def due(self, now: datetime, force: bool = False) -> bool:
        if self.running:
            return True
        if force or self.last_started is None:
            return True
        return now - self.last_started >= timedelta(seconds=self.interval)

    def start(self, tenants: list[tuple[int, str]], now: datetime) -> None:
        self._todo = list(reversed(tenants))
        self.last_started = now
        self.running = True

    def slice(self, deadline: float, now: datetime) -> Iterator[tuple[int, str]]:
        """At least one tenant, then more until the deadline (time.monotonic()) passes."""
        first = True
        while self._todo and (first or time.monotonic() < deadline):
            first = False
            yield self._todo.pop()
        if not self._todo:
            self.running = False
            self.last_completed = now


def run_sweep(
    engine: Engine,
    sweep: TenantSweep,
    work: Callable[[int, str], int],
    *,
    force: bool = False,
    on_start: Callable[[], None] | None = None,
) -> int:
    """One slice of `sweep`: `work(tenant_id, schema)` per tenant, each isolated."""
    now = engine.clock.now()
    if not sweep.due(now, force):
        return 0
    if not sweep.running or force:
        sweep.start(engine.tenants.all(), now)
        if on_start:
            on_start()
    deadline = time.monotonic() + engine.config.sweep_budget_seconds
    done = 0
    for tenant_id, schema in sweep.slice(deadline, now):
        engine.checkpoint()
        _ran, count = isolated(
            engine.faults, tenant_id, schema, lambda t=tenant_id, s=schema: work(t, s)
        )
        done += count or 0
    return done


# --- relay -------------------------------------------------------------------------------


def relay_tenant(engine: Engine, tenant_id: int, schema: str, until: datetime) -> int:
    with connection.cursor() as cursor:
        rows = store.pending_runs(cursor, schema, until=until)
    added = 0
    for row in rows:
        if row.run_id not in engine.runs.known:
            added += engine.runs.remember(engine.runs.build(tenant_id, schema, row))
    if added:
        log.warning("%s: relayed %s waiting runs the leader did not hold", schema, added)
    return added


# --- reconcile the jobs index with PostgreSQL -------------------------------------------


def reconcile_tenant(engine: Engine, tenant_id: int, schema: str, until: datetime) -> int:
    """Put back schedulable jobs due by `until` that the index misses or holds too late."""
    with connection.cursor() as cursor:
        due = store.due_jobs(cursor, schema, until=until, limit=RECONCILE_LIMIT)
    if not due:
        return 0
    members = [index.member(tenant_id, job_id) for job_id, _ in due]
    scores = engine.client.zmscore(engine.index_key, members)
    repairs = {
        m: at.timestamp()
        for m, (_, at), score in zip(members, due, scores, strict=True)
        if score is None or score > at.timestamp() + 0.001
    }
    if repairs:
        engine.writes.lower_jobs(repairs)
        log.warning(
            "%s: %s due jobs were missing from the index (or late in it): put back",
            schema,
            len(repairs),
        )
    return len(repairs)


# --- sync jobs whose index write was lost ------------------------------------------------


def sync_tenant(engine: Engine, tenant_id: int, schema: str) -> int:
    query = sql.SQL(
        f"SELECT id, next_run_at, ({store.SCHEDULABLE}), version FROM {{}} "
        "WHERE index_dirty ORDER BY id LIMIT %s"
    ).format(table(schema, "jobs_job"))
    with connection.cursor() as cursor:
        cursor.execute(query, [SYNC_BATCH])
        rows = cursor.fetchall()
    if not rows:
        return 0
    # Add or lower only: an unschedulable job keeps its entry until the leader reads its
    # row when the score comes due (see core/index.py).
    engine.writes.lower_jobs(
        {index.member(tenant_id, i): at.timestamp() for i, at, ok, _v in rows if ok}
    )
    mark_indexed(schema, [(i, v) for i, _at, _ok, v in rows])
    return len(rows)


# --- reap --------------------------------------------------------------------------------


def reap_tenant(engine: Engine, tenant_id: int, schema: str) -> int:
    timeout = engine.config.visibility_timeout_seconds
    now = engine.clock.now()
    with connection.cursor() as cursor:
        store.fence(cursor, engine.epoch)
        reaped = reaper.reap_lost(cursor, schema, now, timeout)
        stale = reaper.stale_queued(cursor, schema, timeout)
        engine.writes.push_messages(
            [(e.queue, e.message) for e in (engine.runs.build(tenant_id, schema, r) for r in stale)]
        )
    # Memory moves before the commit: if it fails, these runs are still `running` in
    # PostgreSQL, and admission moves nothing that is not waiting.
    for ref in reaped.retrying:
        engine.runs.remember(engine.runs.build(tenant_id, schema, ref))
    for job_id in reaped.jobs:
        engine.runs.release(tenant_id, job_id)  # a `queue` job's held runs may go now
    count = len(reaped.retrying) + reaped.dead + len(stale)
    if count:
        log.warning(
            "%s: reaped %s lost runs (%s dead), re-published %s stale queued",
            schema,
            len(reaped.retrying) + reaped.dead,
            reaped.dead,
            len(stale),
        )
    return count
