"""Rebuild the Redis time indexes from PostgreSQL (invariant 6: Redis is only a cache).

A rebuild is done in bounded steps: the leader runs one step per iteration (renewing its
lease in between, and firing and materialising as usual), so a million jobs never hold an
iteration past the lease. Its progress lives in Redis (`tw:index:rebuild`), so a new
leader resumes it; if Redis is emptied again, the progress goes with it and the rebuild
starts over.

It writes into the live keys with add-or-lower writes only (`core/index.py`), so it is
safe beside the leader's own writes, beside edits, and beside another rebuild (the
`rebuild_index` command, or a second scheduler): concurrent rebuilds cannot undo each
other or an edit, they only repeat work. Phases:

1. jobs: every schedulable job, each tenant's soonest first (so that the jobs due next
   fire again first), tenants taken round-robin;
2. runs: every run waiting for admission, into the runs index;
3. republish (only when Redis lost its data and was the broker): every run queued before
   the rebuild began is published again, since its message went with Redis (a duplicate
   delivery claims nothing). Runs queued since were published into the Redis that is there
   now: publishing them again only doubled the broker's work (a burst of 100,000 due during
   a rebuild left 40,000 duplicates in the backlog). RabbitMQ keeps its messages when
   Redis loses its data, so on it this phase is skipped;
4. prune (the `rebuild_index` command): members whose job is gone or unschedulable are
   removed, by compare-and-set and re-checked, so that a job resumed meanwhile stays.

Then `tw:index:built` is set.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from psycopg import sql

from core import index
from core.broker import is_amqp
from core.keys import partition_count, rebuild_state_key
from core.logs import log_event
from core.sql import table
from runs.status_sql import STATUS
from tenants.services import slug_for_schema

from . import store
from .faults import must_step_down
from .fenced import Cas, FencedRedis
from .pending import PendingRuns
from .tenant_directory import TenantDirectory

log = logging.getLogger("beat.rebuild")

PAGE = 5000
PHASES = ("jobs", "runs", "republish", "prune")


MAX_TENANT_FAILURES = 5  # a tenant's page fails this often (with back-off): given up on
FIRST_RETRY_SECONDS = 1.0


@dataclass
class Progress:
    jobs: int = 0
    runs: int = 0
    republished: int = 0
    pruned: int = 0


class StateLost(Exception):
    """The rebuild's state vanished (Redis emptied) or another rebuild replaced it: what
    was just done is not recorded, and the state is read again."""


class IndexRebuild:
    """One rebuild, resumable: `step(deadline)` does pages until the deadline (time.monotonic)
    passes and returns True once the whole rebuild is done.

    Every write of its progress checks, inside Redis, that the state is still this
    rebuild's (and, for a leader, that it still holds the lease): if Redis is emptied
    mid-page, the page's progress is not recorded into a fresh, half-empty state, and the
    rebuild begins again instead of marking a partial index as built."""

    def __init__(
        self,
        client,
        writes: FencedRedis,
        *,
        state_key: str | None = None,
        messages: PendingRuns | None = None,
        checkpoint: Callable[[], None] = lambda: None,
        tenants: TenantDirectory | None = None,
    ) -> None:
        """`writes` decide the partition whose index is rebuilt; `tenants` must be that
        partition's (both default to the only one, with SCHEDULER_PARTITIONS = 1)."""
        self.client = client
        self.writes = writes
        self.key = state_key or rebuild_state_key(writes.partition)
        self.messages = messages
        self.checkpoint = checkpoint
        self.progress = Progress()
        self.tenants = tenants or TenantDirectory(writes.partition, partition_count())
        self.id: str | None = None
        self.prune = False
        self.waiting = False  # the last step found only tenants waiting for a retry

    # --- state ---------------------------------------------------------------------------
    def exists(self) -> bool:
        return bool(self.client.exists(self.key))

    def start(self, *, lost: bool, prune: bool) -> None:
        # RabbitMQ keeps its messages when Redis loses its data: nothing to publish again.
        republish = lost and not is_amqp()
        phases = ["jobs", "runs"] + (["republish"] if republish else [])
        phases += ["prune"] if prune else []
        self.id, self.prune = uuid.uuid4().hex, prune
        with connection.cursor() as cursor:  # queued_at is the database's clock too
            cursor.execute("SELECT clock_timestamp()")
            began = cursor.fetchone()[0]
        fields = {
            "phases": json.dumps(phases),
            "started": repr(time.time()),
            "queued_before": json.dumps(began.isoformat()),
        }
        self.writes.rebuild_state(self.key, self.id, "start", fields)
        log_event(
            log,
            "leader.rebuild_started",
            "rebuilding the time index from PostgreSQL (phases: %s)%s",
            ", ".join(phases),
            "; Redis lost its data" if lost else "",
            level=logging.WARNING,
            phases=",".join(phases),
            redis_lost=lost,
        )

    def _load(self) -> list[str] | None:
        """The phases left (None: no state); adopts the state's id (a resumed rebuild)."""
        raw_id, raw_phases = self.client.hmget(self.key, "id", "phases")
        if raw_id is None or raw_phases is None:
            return None
        self.id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
        return json.loads(raw_phases)

    def _cursor(self, name: str):
        raw = self.client.hget(self.key, name)
        return json.loads(raw) if raw else None

    def _set_cursor(self, name: str, value) -> None:
        if not self.writes.rebuild_state(self.key, self.id, "set", {name: json.dumps(value)}):
            raise StateLost(name)

    # --- stepping ------------------------------------------------------------------------
    def step(self, deadline: float) -> bool:
        """At least one page, then more until `deadline` (time.monotonic()) passes."""
        self.waiting = False
        while True:
            phases = self._load()
            try:
                if phases is None:  # the state vanished with Redis's data: begin again
                    if self.id is not None:
                        log_event(
                            log,
                            "leader.rebuild_restarted",
                            "the index rebuild's state vanished: starting over",
                            level=logging.WARNING,
                        )
                    self.start(lost=True, prune=self.prune)
                    continue
                if not phases:
                    if self._finish():
                        return True
                    continue
                if self._page(phases[0], deadline):  # the phase is complete
                    self._set_cursor("phases", phases[1:])
            except StateLost:
                log.warning("the index rebuild's state changed under it: reading it again")
                continue
            self.checkpoint()
            if self.waiting or time.monotonic() >= deadline:
                return False

    def run_to_end(self, step_seconds: float = 0.5) -> Progress:
        while not self.step(time.monotonic() + step_seconds):
            if self.waiting:
                time.sleep(FIRST_RETRY_SECONDS / 4)
        return self.progress

    def _finish(self) -> bool:
        gave_up = self._cursor("gave_up") or []
        if not self.writes.rebuild_state(self.key, self.id, "finish"):
            return False
        log_event(
            log,
            "leader.rebuilt",
            "time index rebuilt: %s jobs, %s waiting runs, %s queued runs published again, "
            "%s stale members removed",
            self.progress.jobs,
            self.progress.runs,
            self.progress.republished,
            self.progress.pruned,
            jobs=self.progress.jobs,
            runs=self.progress.runs,
            republished=self.progress.republished,
            pruned=self.progress.pruned,
        )
        if gave_up:
            log_event(
                log,
                "leader.rebuilt_incomplete",
                "time index rebuilt WITHOUT tenants that could not be read (phase, tenant): "
                "%s; the reconcile and relay sweeps index their due jobs and waiting runs "
                "once they can be read, and the reaper publishes their queued runs again",
                gave_up,
                level=logging.ERROR,
            )
        return True

    def _page(self, phase: str, deadline: float) -> bool:
        """A page of the phase: for the per-tenant phases, one page of each tenant in turn
        until the deadline (at least one); True when the phase has nothing left."""
        if phase == "prune":
            return self._prune_page()
        todo = self._cursor(f"{phase}:todo")
        if todo is None:
            todo = [tenant_id for tenant_id, _ in self.tenants.all()]
        visited: list[int] = []
        paged = False
        while todo:
            tenant_id = todo.pop(0)
            schema = self.tenants.schema(tenant_id)
            if schema is not None and self._retry_later(phase, tenant_id):
                visited.append(tenant_id)  # its back-off after a failure is not over
                continue
            paged = True
            if schema is not None and not self._tenant_page(phase, tenant_id, schema):
                visited.append(tenant_id)  # more pages to come: round-robin
            self.checkpoint()
            if time.monotonic() >= deadline:
                break
        todo += visited
        self._set_cursor(f"{phase}:todo", todo)
        self.waiting = bool(todo) and not paged
        return not todo

    def _retry_later(self, phase: str, tenant_id: int) -> bool:
        failures = self._cursor(f"failures:{phase}:{tenant_id}")
        return bool(failures) and failures["retry_at"] > time.time()

    def _tenant_page(self, phase: str, tenant_id: int, schema: str) -> bool:
        """One page of one tenant; True when that tenant is done with the phase."""
        name = f"{phase}:{tenant_id}"
        after = self._cursor(name)
        try:
            if phase == "jobs":
                rows, last = self._jobs_page(tenant_id, schema, after)
            elif phase == "runs":
                rows, last = self._runs_page(tenant_id, schema, after)
            else:
                rows, last = self._queued_page(tenant_id, schema, after)
        except Exception as exc:
            if must_step_down(exc):  # Redis or the connection: not this tenant's fault
                raise
            return self._tenant_failed(phase, tenant_id, schema, exc)
        self._set_cursor(name, last)
        return rows < PAGE

    def _tenant_failed(self, phase: str, tenant_id: int, schema: str, exc: Exception) -> bool:
        """A tenant's page failed (its schema broken, a statement timeout): tried again
        after a back-off, the other tenants going on meanwhile; given up on after
        MAX_TENANT_FAILURES, so that one broken tenant cannot hold every other tenant's
        queued runs back from the later phases. True when given up on."""
        name = f"failures:{phase}:{tenant_id}"
        count = (self._cursor(name) or {"count": 0})["count"] + 1
        if count < MAX_TENANT_FAILURES:
            log_event(
                log,
                "leader.rebuild_tenant_failed",
                "rebuild: tenant %s (%s) failed (%s of %s), tried again: %s",
                tenant_id,
                schema,
                count,
                MAX_TENANT_FAILURES,
                exc,
                level=logging.WARNING,
                tenant=slug_for_schema(schema),
                failures=count,
            )
            retry_at = time.time() + FIRST_RETRY_SECONDS * 2 ** (count - 1)
            self._set_cursor(name, {"count": count, "retry_at": retry_at})
            return False
        log_event(
            log,
            "leader.rebuild_gave_up",
            "rebuild: gave up on tenant %s (%s) in phase %s: %s",
            tenant_id,
            schema,
            phase,
            exc,
            level=logging.ERROR,
            tenant=slug_for_schema(schema),
            phase=phase,
        )
        self._set_cursor("gave_up", [*(self._cursor("gave_up") or []), [phase, tenant_id]])
        return True

    def _jobs_page(self, tenant_id: int, schema: str, after) -> tuple[int, list]:
        # Soonest first, keyset on (next_run_at, id) over job_schedulable_idx.
        where = store.SCHEDULABLE + (" AND (next_run_at, id) > (%s, %s)" if after else "")
        query = sql.SQL(
            "SELECT id, next_run_at FROM {} WHERE " + where + " ORDER BY next_run_at, id LIMIT %s"
        ).format(table(schema, "jobs_job"))
        with connection.cursor() as cursor:
            cursor.execute(query, [*(after or []), PAGE])
            rows = cursor.fetchall()
        if rows:
            self.writes.lower_jobs({index.member(tenant_id, i): at.timestamp() for i, at in rows})
            self.progress.jobs += len(rows)
        last = [rows[-1][1].isoformat(), rows[-1][0]] if rows else after
        return len(rows), last

    def _runs_page(self, tenant_id: int, schema: str, after) -> tuple[int, str | None]:
        query = sql.SQL(
            "SELECT id, due_at FROM {runs} WHERE status IN {waiting}"
            + (" AND id > %s" if after else "")
            + " ORDER BY id LIMIT %s"
        ).format(runs=table(schema, "runs_run"), **STATUS)
        with connection.cursor() as cursor:
            cursor.execute(query, [*([after] if after else []), PAGE])
            rows = cursor.fetchall()
        if rows:
            pipe = self.client.pipeline(transaction=False)
            index.put_runs(pipe, [(tenant_id, i, at) for i, at in rows])
            pipe.execute()
            self.progress.runs += len(rows)
        return len(rows), str(rows[-1][0]) if rows else after

    def _queued_page(self, tenant_id: int, schema: str, after) -> tuple[int, str | None]:
        began = self._cursor("queued_before")  # absent in a state an older version wrote
        with connection.cursor() as cursor:
            refs = store.queued_runs(
                cursor,
                schema,
                after=after,
                limit=PAGE,
                queued_before=datetime.fromisoformat(began) if began else None,
            )
        if refs and self.messages is not None:
            entries = [self.messages.build(tenant_id, schema, ref) for ref in refs]
            self.writes.push_messages([(e.queue, e.message) for e in entries])
            self.progress.republished += len(refs)
        return len(refs), str(refs[-1].run_id) if refs else after

    def _prune_page(self) -> bool:
        position = self._cursor("prune:cursor") or 0
        position, raw = self.client.zscan(self.writes.index_key, position, count=PAGE)
        by_tenant: dict[int, dict[int, float]] = {}
        for member, score in raw:
            tenant_id, job_id = index.parse_member(member)
            by_tenant.setdefault(tenant_id, {})[int(job_id)] = score
        for tenant_id, scores in by_tenant.items():
            self.progress.pruned += prune_members(self.writes, self.tenants, tenant_id, scores)
        self._set_cursor("prune:cursor", position)
        return position == 0


def prune_members(
    writes: FencedRedis, tenants: TenantDirectory, tenant_id: int, scores: dict[int, float]
) -> int:
    """Remove index members whose job is gone or unschedulable; a job that became
    schedulable while this ran is put back (remove, then re-check)."""
    schema = tenants.schema(tenant_id)
    try:
        states = job_states(schema, list(scores)) if schema else {}
    except Exception:
        if _connection_broken():
            raise
        return 0  # the tenant cannot be read now: prune nothing of it
    stale = [j for j in scores if not states.get(j, (False, None))[0]]
    if not stale:
        return 0
    changes = [Cas(index.member(tenant_id, j), scores[j], None) for j in stale]
    applied = writes.cas_jobs(changes)
    removed = [j for j, ok in zip(stale, applied, strict=True) if ok]
    if schema and removed:
        put_back_schedulable(writes, tenant_id, schema, dict.fromkeys(removed))
    return len(removed)


def job_states(schema: str, job_ids: list[int]) -> dict[int, tuple[bool, datetime | None]]:
    with connection.cursor() as cursor:
        return store.job_states(cursor, schema, job_ids)


def put_back_schedulable(
    writes: FencedRedis, tenant_id: int, schema: str, moved: dict[int, float | None]
) -> None:
    """After compare-and-set moves (job id -> the new score, None: removed): a job whose row
    now says earlier than its new score goes back to the row's time. An edit that
    committed just before the move wrote its `ZADD LT` against the score the move
    compared with: a no-op when the edit's time was not earlier than that score, yet
    earlier than the move's. Re-reading after the move closes it: an edit that commits
    later writes its `ZADD LT` after the move."""
    put_back_schedulable_many(writes, [(tenant_id, schema, moved)])


def put_back_schedulable_many(
    writes: FencedRedis,
    moves: list[tuple[int, str, dict[int, float | None]]],
    checkpoint: Callable[[], None] = lambda: None,
) -> None:
    """`put_back_schedulable` for several tenants: one read for all of them, and, if that
    fails (one tenant's schema broken), one read each, renewing the lease (`checkpoint`)
    between them."""
    try:
        with connection.cursor() as cursor:
            found = store.job_states_of_schemas(cursor, [(s, list(m)) for _t, s, m in moves])
    except Exception:
        if _connection_broken():
            raise
        if len(moves) == 1:
            return  # the reconciliation sweep puts them back once the tenant can be read
        for move in moves:
            checkpoint()
            put_back_schedulable_many(writes, [move])
        return
    back = {
        index.member(tenant_id, j): at.timestamp()
        for (tenant_id, _schema, moved), states in zip(moves, found, strict=True)
        for j, (ok, at) in states.items()
        if ok and at is not None and (moved.get(j) is None or at.timestamp() < moved[j])
    }
    if back:
        writes.lower_jobs(back)


def _connection_broken() -> bool:
    raw = connection.connection
    return raw is None or getattr(raw, "closed", False) or getattr(raw, "broken", False)
