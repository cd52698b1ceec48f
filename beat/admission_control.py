"""Fair admission: a due run goes to the broker only while its tenant is under its quota
and the broker backlog is under the watermark; the rest wait here, in the leader's fair
queue, and the choice of what goes next is made as late as possible (ADR 0011).

- **Quota**: a tenant has at most `max_concurrency` runs in flight (queued or running).
  The leader counts them exactly: each (run, attempt) it admits is added, each one a
  worker or a service reports ended (`tw:ended`), or the fire cancels (`replace`), is
  removed, and a tenant's set is replaced by a recount from PostgreSQL when it first has
  runs waiting, and again every `SCHEDULER_INFLIGHT_RECOUNT_SECONDS` while it has runs
  waiting or in flight (a bounded number a fire of those waiting, the oldest count first,
  and a bounded number a second of those with nothing waiting). Only this
  leader moves runs into flight (runs it passes for their job's state to decide while the
  tenant is at its quota take no slot: `decided_by_policy`), and workers only take them
  out, so the count is never below the truth: a lost report (a worker killed after its
  finish, Redis flushed) can only hold a slot until the next recount, never admit one run
  too many. One exception (ADR 0011): a
  worker that claims a `scheduled` run from a stale message (a fire whose commit was lost
  after its push, a deposed leader's last push) puts in flight a run the leader never
  counted, and the tenant is over its quota by such runs until the next recount.
- **Watermark**: the broker holds at most `SCHEDULER_ADMISSION_BACKLOG_PER_SLOT` messages
  per live worker slot (workers register themselves, `runs/worker_registry.py`), and at
  least `SCHEDULER_ADMISSION_BACKLOG_MIN` (the depths: `core/broker.py`, Redis or RabbitMQ).
- **Order**: deficit round robin over tenants by `weight`, high priority first within a
  tenant, then oldest due (`beat/fair_share.py`).

Waiting runs stay `scheduled` in PostgreSQL: a new leader relays them like any other.
"""

from __future__ import annotations

import heapq
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db import connection, transaction
from psycopg import sql

from core.broker import amqp_queue_names, is_amqp, queue_depths
from core.keys import admission_stats_key, admission_waiting_key, ended_key, workers_key
from core.redis import REDIS_ERRORS
from core.sql import per_schema, table, tagged_union
from runs.status_sql import STATUS

from .fair_share import FairQueue
from .faults import TenantFaults, isolated, must_step_down
from .messages import PRIORITIES
from .pending import DUE_ORDER, Pending
from .store import job_admission_rows

log = logging.getLogger("beat.admission")

RECOUNT_CHUNK = 25  # tenant schemas per recount statement (about 13 locks each)
IDLE_RECOUNT_TENANTS = 4 * RECOUNT_CHUNK  # tenants with nothing waiting, per pass (bounded)
IDLE_RECOUNT_EVERY = 1.0  # seconds between two such passes, at most
# Tenants with waiting runs whose count is stale, recounted per fire at most (the oldest
# count first; one never counted is always counted). With 10,000 tenants due together,
# recounting every one before each fire held it 7.8 s (400 statements) and lost the lease;
# beyond this many, a waiting tenant's recount interval stretches instead.
STALE_RECOUNT_TENANTS = 4 * RECOUNT_CHUNK
ENDED_BATCH = 10_000


@dataclass(frozen=True)
class AdmissionConfig:
    enabled: bool = True
    backlog_per_slot: float = 2.0
    backlog_min: int = 20
    recount_seconds: float = 5.0
    poll_seconds: float = 0.25
    limits_refresh_seconds: float = 5.0

    @classmethod
    def from_settings(cls) -> AdmissionConfig:
        from django.conf import settings

        return cls(
            enabled=settings.SCHEDULER_FAIR_ADMISSION,
            backlog_per_slot=settings.SCHEDULER_ADMISSION_BACKLOG_PER_SLOT,
            backlog_min=settings.SCHEDULER_ADMISSION_BACKLOG_MIN,
            recount_seconds=settings.SCHEDULER_INFLIGHT_RECOUNT_SECONDS,
        )


@dataclass(frozen=True)
class TenantLimits:
    max_concurrency: int
    weight: int
    suspended: bool = False


_ACTIVE_SQL = "SELECT id::text, attempt FROM {runs} WHERE status IN {active}"


class InFlight:
    """Per tenant, the (run id, attempt) pairs admitted and not reported ended."""

    def __init__(self) -> None:
        self.attempts: dict[int, set[tuple[str, int]]] = defaultdict(set)
        self.counted_at: dict[int, float] = {}

    def count(self, tenant_id: int) -> int:
        return len(self.attempts.get(tenant_id, ()))

    def add(self, tenant_id: int, run_id, attempt: int) -> None:
        self.attempts[tenant_id].add((str(run_id), int(attempt)))

    def end(self, tenant_id: int, run_id: str, attempt: int) -> None:
        pairs = self.attempts.get(tenant_id)
        if pairs is not None:
            pairs.discard((str(run_id), int(attempt)))

    def forget(self, tenant_id: int) -> None:
        self.attempts.pop(tenant_id, None)
        self.counted_at.pop(tenant_id, None)

    def replace(self, tenant_id: int, pairs: Iterable[tuple[str, int]], at: float) -> None:
        self.attempts[tenant_id] = {(str(r), int(a)) for r, a in pairs}
        self.counted_at[tenant_id] = at


class AdmissionControl:
    def __init__(
        self,
        *,
        client,
        config: AdmissionConfig,
        shard_count: int,
        faults: TenantFaults,
        partition: int = 0,
        partitions: int = 1,
    ) -> None:
        self.client = client
        # Called between recount statements: the engine's lease renewal (set by the engine).
        self.checkpoint: Callable[[], None] = lambda: None
        # Each partition's leader admits into its part of the broker watermark (the queues
        # are shared): the sum stays under it, at the cost of idle partitions' share.
        self.partition = partition
        self.partitions = max(partitions, 1)
        self.ended_key = ended_key(partition)
        self.waiting_key = admission_waiting_key(partition)
        self.stats_key = admission_stats_key(partition)
        self.faults = faults
        self.config = config
        self.queue = FairQueue()
        self.in_flight = InFlight()
        self.amqp = is_amqp()
        self.queue_names = (
            amqp_queue_names(shard_count)
            if self.amqp
            else [f"runs.{p}.{s}" for p in PRIORITIES for s in range(shard_count)]
        )
        self._limits: dict[int, TenantLimits] = {}
        self._limits_at = float("-inf")
        self._schemas: dict[int, str] = {}
        self._flagged = False
        self._policies: dict[tuple[int, int], str] = {}  # (tenant, job) -> concurrency policy
        self._idle_recount_at = float("-inf")
        self.last_room: int | None = None
        self._slots_seen = 0  # the live workers' slots at the last count that answered

    # --- runs in ---------------------------------------------------------------------------
    def offer(self, entries: Iterable[Pending]) -> None:
        for entry in entries:
            self._schemas[entry.tenant_id] = entry.schema
            self.queue.push(entry.tenant_id, entry, priority=entry.priority, due=entry.due)

    def decided_by_policy(self) -> list[Pending]:
        """Waiting runs of tenants at their quota that their job's own state decides
        without taking a slot: a `forbid` job's overlap (skipped) or a `queue` job's
        (held) while the job has max_concurrent_runs in flight, a `replace` job's run while
        the job has one to cancel (it takes that run's place), a deleted job's run
        (cancelled), a paused job's schedule slot (skipped) or dependency run (held by the
        pause). A paused job's manual runs and retries still run, so they wait for a slot
        like any other. These go to the fire now: waiting for the tenant's quota would
        delay a decision that frees or needs no slot (a `replace` run would wait behind
        the very run it is to replace). The fire takes no slot for them whatever it then
        reads (`beat/fire.py`: such a run that would be queued waits again here, and a
        `replace` job queues no more of them than it cancels). Jobs' policies are
        remembered (`allow` jobs are not read again)."""
        out: list[Pending] = []
        for tenant_id in self.queue.tenants():
            if self._free(tenant_id) > 0:
                continue
            schema = self._schemas[tenant_id]
            jobs = {e.job_id for e in self.queue.items(tenant_id)}
            asked = sorted(j for j in jobs if self._policies.get((tenant_id, j)) != "allow")
            if not asked:
                continue
            ran, rows = isolated(
                self.faults, tenant_id, schema, lambda s=schema, a=asked: _job_rows(s, a)
            )
            if not ran:
                continue
            for job_id, row in rows.items():
                if not row.paused:  # a paused job is read again: its slots are decided
                    self._policies[(tenant_id, job_id)] = "allow" if row.deleted else row.policy
            out += self.queue.remove(
                tenant_id,
                keep=lambda e, r=rows, a=set(asked): (
                    e.job_id not in a or not decided_without_slot(r.get(e.job_id), e)
                ),
            )
        return out

    def admitted(self, entries: Iterable[Pending]) -> None:
        for entry in entries:
            self.in_flight.add(entry.tenant_id, entry.run_id, entry.attempt)

    def ended(self, tenant_id: int, pairs: Iterable[tuple]) -> None:
        """Attempts the fire itself ended (a `replace` job's cancelled runs)."""
        for run_id, attempt in pairs:
            self.in_flight.end(tenant_id, run_id, attempt)

    def read_ended(self) -> int:
        """Attempts reported ended since the last read free their tenants' slots."""
        pipe = self.client.pipeline(transaction=True)
        pipe.lrange(self.ended_key, 0, ENDED_BATCH - 1)
        pipe.ltrim(self.ended_key, ENDED_BATCH, -1)
        raw, _ = pipe.execute()
        for item in raw:
            try:
                tenant, run_id, attempt = item.decode().split(":")
                self.in_flight.end(int(tenant), run_id, int(attempt))
            except ValueError:
                log.warning("ignored a malformed ended entry %r", item)
        return len(raw)

    # --- runs out --------------------------------------------------------------------------
    def choose(
        self, now: float, limit: int | None = None
    ) -> tuple[list[Pending], dict[int, list[Pending]], list[Pending]]:
        """The waiting runs to admit now (at most `limit`), oldest first (the fire chunks'
        order); the
        waiting runs of tenants that could not be counted (their data broken: they wait
        for the tenant's back-off, as a failed admission's runs do); and those of tenants
        suspended (or gone) since they were offered, to be forgotten: they stay
        `scheduled`, and the relay finds them once the tenant is resumed."""
        if not len(self.queue):
            self._flag(False)
            self._recount_idle(now)
            return [], {}, []
        self._refresh_limits(now)
        dropped = [
            entry
            for tenant_id in self.queue.tenants()
            if self._limit(tenant_id).suspended
            for entry in self.queue.remove(tenant_id, keep=lambda _entry: False)
        ]
        self._recount(now)
        self._recount_idle(now)
        uncounted = {
            tenant_id: self.queue.remove(tenant_id, keep=lambda _entry: False)
            for tenant_id in self.queue.tenants()
            if tenant_id not in self.in_flight.counted_at
        }
        room = self._room(time.time())  # worker registrations are wall-clock times
        self.last_room = room
        if limit is not None:
            room = limit if room is None else min(room, limit)
        taken = self.queue.take(
            room,
            self._free,
            lambda t: self._limit(t).weight,
        )
        self._flag(bool(len(self.queue)))
        chosen = [entry for _, entry in taken]
        chosen.sort(key=DUE_ORDER)
        return chosen, uncounted, dropped

    def waiting(self) -> int:
        return len(self.queue)

    # --- the numbers -------------------------------------------------------------------------
    def _room(self, now: float) -> int:
        pipe = self.client.pipeline(transaction=False)
        if not self.amqp:
            for name in self.queue_names:
                pipe.llen(name)
        pipe.zrangebyscore(workers_key(), now, "+inf")
        try:
            *lengths, members = pipe.execute()
        except REDIS_ERRORS:
            if not self.amqp:
                raise  # the broker's own lists: no room can be told
            # On a Redis Cluster the workers' registrations are on a slot of their own:
            # while its primary fails over, admit by the slots counted last, rather than
            # stop this partition for a key that is not its own.
            lengths, members = [], None
        if self.amqp:  # RabbitMQ's message counts (bounded, cached for an instant)
            lengths = list(queue_depths(self.client, self.queue_names).values())
        if members is None:
            slots = self._slots_seen
        else:
            slots = 0
            for member in members:
                try:
                    slots += int(member.decode().rsplit(":", 1)[1])
                except (ValueError, IndexError):
                    continue
            self._slots_seen = slots
        watermark = max(self.config.backlog_min, int(slots * self.config.backlog_per_slot))
        return max(watermark // self.partitions - sum(lengths) // self.partitions, 0)

    def _limit(self, tenant_id: int) -> TenantLimits:
        return self._limits.get(tenant_id) or TenantLimits(1, 1, suspended=True)

    def _free(self, tenant_id: int) -> int:
        return self._limit(tenant_id).max_concurrency - self.in_flight.count(tenant_id)

    def _refresh_limits(self, now: float) -> None:
        """Quotas and weights as the operators set them (admin, provision_tenant), read
        again every few seconds: an edit takes effect without a restart."""
        missing = any(t not in self._limits for t in self.queue.tenants())
        if not missing and now - self._limits_at < self.config.limits_refresh_seconds:
            return
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, max_concurrency, weight, suspended_at IS NOT NULL"
                " FROM public.tenants_tenant"
            )
            self._limits = {t: TenantLimits(m, w, s) for t, m, w, s in cursor.fetchall()}
        self._limits_at = now
        self._policies.clear()  # an edited policy is seen within the same refresh

    def _recount(self, now: float) -> None:
        """Tenants with waiting runs whose count is unknown or older than the recount
        interval are counted again from PostgreSQL: one held too high by a lost end report,
        and one held too low by a run a worker claimed from a stale message (a fire whose
        commit was lost after its push, a deposed leader's last push), are both put right.
        A tenant never counted is counted now (its quota must be known before it admits);
        of the stale ones, at most `STALE_RECOUNT_TENANTS` a call, the oldest count first."""
        never, stale = [], []
        for tenant_id in self.queue.tenants():
            counted = self.in_flight.counted_at.get(tenant_id)
            if counted is None:
                never.append(tenant_id)
            elif now - counted >= self.config.recount_seconds and self.faults.allowed(tenant_id):
                # (a tenant backing off would fail again and, never recounted, stay the
                # oldest: a hundred of them would starve every healthy tenant's recount)
                stale.append(tenant_id)
        oldest = heapq.nsmallest(
            STALE_RECOUNT_TENANTS, stale, key=lambda t: self.in_flight.counted_at[t]
        )
        self._recount_tenants([(t, self._schemas[t]) for t in never + oldest], now)

    def _recount_idle(self, now: float) -> None:
        """Tenants with runs in flight and none waiting are counted again too, so that a
        lost end report does not leave their count (scheduler_status, the in-flight
        metric, and the slots they find when runs come again) wrong for good. Bounded: at
        most `IDLE_RECOUNT_TENANTS` a pass (the longest uncounted first) and one pass a
        second, so beyond that many tenants in flight the interval stretches. A tenant
        gone from the directory (deleted) is forgotten instead."""
        if now - self._idle_recount_at < min(IDLE_RECOUNT_EVERY, self.config.recount_seconds):
            return
        self._idle_recount_at = now
        waiting = set(self.queue.tenants())
        stale = [
            tenant_id
            for tenant_id, pairs in self.in_flight.attempts.items()
            if pairs
            and tenant_id not in waiting
            and tenant_id in self._schemas
            and now - self.in_flight.counted_at.get(tenant_id, float("-inf"))
            >= self.config.recount_seconds
        ]
        if not stale:
            return
        self._refresh_limits(now)
        for tenant_id in [t for t in stale if t not in self._limits]:
            self.in_flight.forget(tenant_id)
        oldest = heapq.nsmallest(
            IDLE_RECOUNT_TENANTS,
            (t for t in stale if t in self._limits),
            key=lambda t: self.in_flight.counted_at.get(t, float("-inf")),
        )
        self._recount_tenants([(t, self._schemas[t]) for t in oldest], now)

    def _recount_tenants(self, due: list[tuple[int, str]], now: float) -> None:
        for start in range(0, len(due), RECOUNT_CHUNK):
            if start:
                self.checkpoint()  # thousands never counted (a takeover): keep the lease
            chunk = due[start : start + RECOUNT_CHUNK]
            try:
                with transaction.atomic():
                    rows = recount(chunk)
            except Exception as exc:
                if must_step_down(exc):
                    raise
                self._recount_one_by_one(chunk, now)  # find the tenant whose data is broken
                continue
            for tenant_id, _schema in chunk:
                self.in_flight.replace(tenant_id, rows.get(tenant_id, []), now)

    def _recount_one_by_one(self, chunk: list[tuple[int, str]], now: float) -> None:
        """A tenant that cannot be counted (its schema broken) is reported and admits
        nothing until it can; the others are counted on their own."""
        for n, (tenant_id, schema) in enumerate(chunk):
            if n:
                self.checkpoint()
            ran, rows = isolated(
                self.faults, tenant_id, schema, lambda c=[(tenant_id, schema)]: recount(c)
            )
            if ran:
                self.in_flight.replace(tenant_id, rows.get(tenant_id, []), now)

    def _flag(self, waiting: bool) -> None:
        """Workers wake the leader at each ended attempt only while runs wait."""
        if waiting:
            self.client.set(self.waiting_key, "1", ex=60)
        elif self._flagged:
            self.client.delete(self.waiting_key)
        self._flagged = waiting

    def stats(self, now: float) -> dict[int, dict]:
        tenants = set(self.queue.tenants()) | {t for t, s in self.in_flight.attempts.items() if s}
        out = {}
        for tenant_id in sorted(tenants):
            oldest = self.queue.oldest_due(tenant_id)
            limits = self._limit(tenant_id)
            out[tenant_id] = {
                "in_flight": self.in_flight.count(tenant_id),
                "max_concurrency": limits.max_concurrency,
                "weight": limits.weight,
                "waiting": self.queue.waiting(tenant_id),
                "oldest_wait_seconds": round(max(now - oldest, 0.0), 3) if oldest else 0.0,
            }
        return out

    def publish(self, now: float, ttl_seconds: int = 60) -> None:
        body = {
            "at": now,
            "room": self.last_room,
            "tenants": {str(t): v for t, v in self.stats(now).items()},
        }
        self.client.set(self.stats_key, json.dumps(body), ex=ttl_seconds)


def decided_without_slot(row, entry: Pending) -> bool:
    """Whether the fire decides this waiting run without queueing it, by its job's state
    (`row`: `store.JobAdmissionRow`, None for a job gone altogether)."""
    if row is None or row.deleted:
        return True  # cancelled
    if row.paused and (
        entry.trigger == "dependency" or (entry.trigger == "schedule" and entry.attempt == 1)
    ):
        return True  # skipped (`paused`) or held by the pause
    if row.policy in ("forbid", "queue"):
        return row.active >= max(row.max_concurrent, 1)  # skipped or held
    return row.policy == "replace" and row.active > 0  # in the place of a cancelled run


def _job_rows(schema: str, job_ids: list[int]) -> dict:
    with connection.cursor() as cursor:
        return job_admission_rows(cursor, schema, job_ids)


@per_schema
def _active_runs_sql(schema: str) -> sql.Composable:
    return sql.SQL(_ACTIVE_SQL).format(runs=table(schema, "runs_run"), **STATUS)


def recount(chunk: list[tuple[int, str]]) -> dict[int, list[tuple[str, int]]]:
    """(run id, attempt) of every queued or running run of each tenant, in one statement."""
    query = tagged_union((tenant_id, _active_runs_sql(schema)) for tenant_id, schema in chunk)
    out: dict[int, list[tuple[str, int]]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(query)
        for tenant_id, run_id, attempt in cursor.fetchall():
            out[tenant_id].append((run_id, attempt))
    return out
