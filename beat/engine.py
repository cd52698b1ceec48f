"""The leader's work: materialise due slots, fire runs at their instant, relay strays.

Each step is a method that returns how much it did, so that tests drive it directly with a
fake clock (the loop in `beat.loop` only sequences them and sleeps). Every transaction
that writes schedule state starts with the fencing check (invariant 3).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from core import index
from core.clock import Clock
from core.keys import index_key
from jobs.schedule_fields import schedule_of
from runs import states
from runs.ids import uuid7

from . import reaper, store
from .admission import DueRun, JobLimits, admit
from .messages import build_message, push_messages, queue_for, time_limits
from .planning import MisfireRules, plan_job
from .rebuild import sync_index
from .tenant_directory import TenantDirectory

log = logging.getLogger("beat.engine")

EXECUTE_TASK = "runs.execute_run"


@dataclass(frozen=True)
class EngineConfig:
    lookahead_seconds: float = 30.0
    shard_count: int = 4
    materialise_batch: int = 5000
    relay_interval_seconds: float = 10.0
    misfire_max_runs: int = 100
    misfire_max_age_seconds: int = 86400
    visibility_timeout_seconds: float = 300.0
    fire_chunk: int = 2000

    @classmethod
    def from_settings(cls) -> EngineConfig:
        return cls(
            lookahead_seconds=settings.SCHEDULER_LOOKAHEAD_SECONDS,
            shard_count=settings.SCHEDULER_SHARD_COUNT,
            materialise_batch=settings.SCHEDULER_MATERIALISE_BATCH,
            relay_interval_seconds=settings.SCHEDULER_RELAY_INTERVAL_SECONDS,
            misfire_max_runs=settings.SCHEDULER_MISFIRE_MAX_RUNS,
            misfire_max_age_seconds=settings.SCHEDULER_MISFIRE_MAX_AGE_SECONDS,
            visibility_timeout_seconds=settings.SCHEDULER_VISIBILITY_TIMEOUT_SECONDS,
        )

    @property
    def reap_interval_seconds(self) -> float:
        return min(self.visibility_timeout_seconds / 4, 30.0)


@dataclass
class Pending:
    """A run waiting in memory for its instant, with its Celery message already built."""

    due: float
    seq: int
    tenant_id: int
    schema: str
    run_id: Any
    job_id: int
    scheduled_for: datetime
    trigger: str
    queue: str
    message: bytes


@dataclass
class FireStats:
    published: int = 0
    skipped: int = 0
    held: int = 0
    cancelled: int = 0
    lags: list[float] = field(default_factory=list)  # publish time - due time, seconds


class Engine:
    def __init__(
        self, *, client, clock: Clock, epoch: int, config: EngineConfig, origin: str
    ) -> None:
        self.client = client
        self.clock = clock
        self.epoch = epoch
        self.config = config
        self.origin = origin
        self.tenants = TenantDirectory()
        # A heap of (due, seq, entry): tuples compare in C, dataclasses in Python.
        self.pending: list[tuple[float, int, Pending]] = []
        self.known: set = set()  # run ids in `pending` or `held`
        self.held: dict[tuple[int, int], list[Pending]] = defaultdict(list)
        self.last_relay: datetime | None = None
        self.last_reap: datetime | None = None
        self.materialise_interrupted = False
        self._seq = itertools.count()
        self.last_fire = FireStats()
        self.lag_log: list[float] | None = None  # benchmarks collect every publish lag here

    # --- building pending entries ----------------------------------------------------------
    def _pending(self, tenant_id: int, schema: str, ref: store.RunRef) -> Pending:
        queue = queue_for(ref.priority, f"{tenant_id}:{ref.job_id}", self.config.shard_count)
        message = build_message(
            task_name=EXECUTE_TASK,
            task_id=str(ref.run_id),
            args=[schema, str(ref.run_id), ref.attempt],
            queue=queue,
            origin=self.origin,
            time_limits=time_limits(ref.timeout_seconds),
        )
        return Pending(
            ref.due_at.timestamp(),
            next(self._seq),
            tenant_id,
            schema,
            ref.run_id,
            ref.job_id,
            ref.scheduled_for,
            ref.trigger,
            queue,
            message,
        )

    def _remember(self, entry: Pending) -> None:
        if entry.run_id not in self.known:
            self.known.add(entry.run_id)
            heapq.heappush(self.pending, (entry.due, entry.seq, entry))

    # --- materialise -----------------------------------------------------------------------
    def materialise(self) -> int:
        """Turn due index entries into runs; returns how many index entries it processed."""
        now = self.clock.now()
        horizon = now + timedelta(seconds=self.config.lookahead_seconds)
        entries = index.due(
            self.client, index_key(), horizon.timestamp(), self.config.materialise_batch
        )
        by_tenant: dict[int, list[int]] = defaultdict(list)
        for tenant_id, job_id, _score in entries:
            by_tenant[tenant_id].append(int(job_id))
        processed = 0
        self.materialise_interrupted = False
        for tenant_id, job_ids in by_tenant.items():
            self._materialise_tenant(tenant_id, job_ids, now, horizon)
            processed += len(job_ids)
            if processed < len(entries) and self._fire_is_due():
                self.materialise_interrupted = True  # firing on time comes first
                break
        return processed

    def _fire_is_due(self) -> bool:
        return bool(self.pending) and self.pending[0][0] <= self.clock.now().timestamp()

    def _materialise_tenant(
        self, tenant_id: int, job_ids: list[int], now: datetime, horizon: datetime
    ) -> None:
        schema = self.tenants.schema(tenant_id)
        if schema is None:  # the tenant is gone
            pipe = self.client.pipeline(transaction=False)
            index.remove_jobs(pipe, [(tenant_id, j) for j in job_ids])
            pipe.execute()
            return
        with transaction.atomic(), connection.cursor() as cursor:
            store.fence(cursor, self.epoch)
            jobs = store.lock_jobs(cursor, schema, job_ids)
            rows, cursors, fresh = self._plan(jobs, now, horizon)
            inserted = set(store.insert_scheduled_runs(cursor, schema, rows))
            store.advance_jobs(cursor, schema, cursors)
        self._sync_index(tenant_id, job_ids, jobs)
        for run_id, job_id, slot, due, status, _reason in rows:
            if run_id in inserted and status == states.SCHEDULED:
                job = fresh[job_id]
                ref = store.RunRef(
                    run_id, job_id, slot, due, 1, job.priority, "schedule", job.timeout_seconds
                )
                self._remember(self._pending(tenant_id, schema, ref))

    def _plan(self, jobs: list[store.JobRow], now: datetime, horizon: datetime):
        rows: list[tuple] = []
        cursors: list[tuple[int, datetime | None]] = []
        planned: dict[int, store.JobRow] = {}
        for job in jobs:
            if not job.schedulable or job.next_run_at > horizon:
                continue
            schedule = schedule_of(job)
            if schedule is None:
                continue
            plan = plan_job(
                schedule=schedule,
                next_run_at=job.next_run_at,
                now=now,
                horizon=horizon,
                rules=self._rules(job),
                seed=job.hash_seed,
                jitter_seconds=job.jitter_seconds,
                paused_window=_paused_window(job),
            )
            if plan.dropped or plan.truncated_before:
                log.warning(
                    "job %s: %s missed slots not recorded (before %s)",
                    job.id,
                    plan.dropped,
                    plan.truncated_before,
                )
            for run in plan.runs:
                rows.append(
                    (uuid7(), job.id, run.scheduled_for, run.due_at, run.status, run.skip_reason)
                )
            cursors.append((job.id, plan.next_run_at))
            job.next_run_at = plan.next_run_at
            planned[job.id] = job
        return rows, cursors, planned

    def _rules(self, job: store.JobRow) -> MisfireRules:
        return MisfireRules(
            policy=job.misfire_policy,
            grace_seconds=job.misfire_grace_seconds,
            max_catchup_runs=self.config.misfire_max_runs,
            max_age_seconds=self.config.misfire_max_age_seconds,
        )

    def _sync_index(self, tenant_id: int, job_ids: list[int], jobs: list[store.JobRow]) -> None:
        """After commit: new scores for advanced jobs, removal of the unschedulable/missing."""
        found = {job.id: job for job in jobs}
        keep = [(tenant_id, j.id, j.next_run_at) for j in jobs if j.schedulable]
        drop = [(tenant_id, j) for j in job_ids if j not in found or not found[j].schedulable]
        pipe = self.client.pipeline(transaction=False)
        index.put_jobs(pipe, keep)
        index.remove_jobs(pipe, drop)
        pipe.execute()

    # --- individually admitted runs (manual, retry, dependency) ----------------------------
    def load_run_index(self) -> int:
        now = self.clock.now()
        horizon = now + timedelta(seconds=self.config.lookahead_seconds)
        key = index.runs_index_key()
        entries = index.due(self.client, key, horizon.timestamp(), self.config.materialise_batch)
        by_tenant: dict[int, list[str]] = defaultdict(list)
        for tenant_id, run_id, _score in entries:
            by_tenant[tenant_id].append(run_id)
        for tenant_id, run_ids in by_tenant.items():
            schema = self.tenants.schema(tenant_id)
            if schema is not None:
                self._load_pending(tenant_id, schema, horizon, run_ids)
            # In memory now; if this leader dies, the next one's relay finds them in PG.
            pipe = self.client.pipeline(transaction=False)
            index.remove_runs(pipe, [(tenant_id, r) for r in run_ids])
            pipe.execute()
        return len(entries)

    def _load_pending(
        self, tenant_id: int, schema: str, until: datetime, run_ids: list | None = None
    ) -> int:
        with connection.cursor() as cursor:
            rows = store.pending_runs(cursor, schema, until=until, run_ids=run_ids)
        added = 0
        for row in rows:
            if row.run_id in self.known:
                continue
            self._remember(self._pending(tenant_id, schema, row))
            added += 1
        return added

    # --- relay -----------------------------------------------------------------------------
    def relay(self, *, force: bool = False) -> int:
        """Find runs that wait for admission in PostgreSQL but not in this leader's memory
        (materialised by a leader that died before publishing, or lost from Redis).

        At takeover (`force`) that is the whole lookahead window. Afterwards, the runs of
        the window are in memory, so the periodic sweep only asks for runs already overdue
        by a second: a cheap indexed query that returns nothing when all is well."""
        now = self.clock.now()
        interval = timedelta(seconds=self.config.relay_interval_seconds)
        if not force and self.last_relay is not None and now - self.last_relay < interval:
            return 0
        self.last_relay = now
        if force:
            until = now + timedelta(seconds=self.config.lookahead_seconds)
        else:
            until = now - timedelta(seconds=1)
        sync_index(self.client)
        return sum(self._load_pending(t, s, until) for t, s in self.tenants.all())

    # --- reap ------------------------------------------------------------------------------
    def reap(self, *, force: bool = False) -> int:
        """Runs whose worker went silent, and queued runs whose message went missing."""
        now = self.clock.now()
        interval = timedelta(seconds=self.config.reap_interval_seconds)
        if not force and self.last_reap is not None and now - self.last_reap < interval:
            return 0
        self.last_reap = now
        timeout = self.config.visibility_timeout_seconds
        count = 0
        for tenant_id, schema in self.tenants.all():
            with transaction.atomic(), connection.cursor() as cursor:
                store.fence(cursor, self.epoch)
                reaped = reaper.reap_lost(cursor, schema, now, timeout)
                stale = reaper.stale_queued(cursor, schema, now, timeout)
                self._publish([self._pending(tenant_id, schema, ref) for ref in stale])
            for ref in reaped.retrying:
                self._remember(self._pending(tenant_id, schema, ref))
            count += len(reaped.retrying) + reaped.dead + len(stale)
            if reaped.retrying or reaped.dead or stale:
                log.warning(
                    "%s: reaped %s lost runs (%s dead), re-published %s stale queued",
                    schema,
                    len(reaped.retrying) + reaped.dead,
                    reaped.dead,
                    len(stale),
                )
        return count

    def republish_queued(self) -> int:
        """Publish every `queued` run again: used after Redis lost its data."""
        count = 0
        for tenant_id, schema in self.tenants.all():
            with connection.cursor() as cursor:
                rows = store.queued_runs(cursor, schema)
            entries = [self._pending(tenant_id, schema, ref) for ref in rows]
            self._publish(entries)
            count += len(entries)
        if count:
            log.warning("re-published %s queued runs after Redis lost its data", count)
        return count

    # --- fire ------------------------------------------------------------------------------
    def fire(self) -> FireStats:
        """Admit and publish every run whose instant has come. Runs go in chunks of
        `fire_chunk`, oldest first, each chunk in ONE fenced transaction across schemas:
        one commit per chunk rather than one per tenant, and the first chunk is out
        before the last one is even looked at."""
        now = self.clock.now()
        stats = FireStats()
        due: list[Pending] = []
        while self.pending and self.pending[0][0] <= now.timestamp():
            due.append(heapq.heappop(self.pending)[2])
        for start in range(0, len(due), self.config.fire_chunk):
            self._fire_chunk(due[start : start + self.config.fire_chunk], now, stats)
        self.last_fire = stats
        if self.lag_log is not None:
            self.lag_log.extend(stats.lags)
        return stats

    def _fire_chunk(self, due: list[Pending], now: datetime, stats: FireStats) -> None:
        by_schema: dict[str, list[Pending]] = defaultdict(list)
        for entry in due:
            by_schema[entry.schema].append(entry)
        to_publish: list[Pending] = []
        held: list[Pending] = []
        with transaction.atomic(), connection.cursor() as cursor:
            store.fence(cursor, self.epoch)
            for schema, entries in by_schema.items():
                queued, waiting = self._admit_schema(cursor, schema, entries, now, stats)
                to_publish.extend(queued)
                held.extend(waiting)
            # Published inside the transaction: if the commit is lost the runs stay
            # `scheduled`, workers may still claim them, and the relay re-publishes the rest
            # (a duplicate message claims nothing: invariant 4).
            self._publish(to_publish)
        published_at = self.clock.now().timestamp()
        stats.published += len(to_publish)
        stats.lags.extend(published_at - e.due for e in to_publish)
        for entry in held:
            self.held[(entry.tenant_id, entry.job_id)].append(entry)
        stats.held += len(held)
        held_ids = {e.run_id for e in held}
        self.known.difference_update(e.run_id for e in due if e.run_id not in held_ids)

    def _admit_schema(
        self, cursor, schema: str, entries: list[Pending], now: datetime, stats: FireStats
    ) -> tuple[list[Pending], list[Pending]]:
        """(entries to publish, entries held by the `queue` policy) for one schema."""
        fast = store.queue_unconstrained(cursor, schema, [e.run_id for e in entries], now)
        queued = [e for e in entries if e.run_id in fast]
        rest = [e for e in entries if e.run_id not in fast]
        if not rest:
            return queued, []
        by_id = {e.run_id: e for e in rest}
        jobs = store.job_admission_rows(cursor, schema, sorted({e.job_id for e in rest}))
        live, paused, gone = _split_by_job_state(rest, jobs)
        stats.skipped += store.mark_skipped(cursor, schema, paused, states.SKIP_PAUSED, now)
        stats.cancelled += store.cancel_runs(cursor, schema, gone, "job deleted", now)
        decision = admit(
            [DueRun(e.run_id, e.job_id, e.scheduled_for) for e in live],
            {j.id: JobLimits(j.policy, j.max_concurrent, j.active) for j in jobs.values()},
        )
        stats.cancelled += store.cancel_active_runs_of_jobs(
            cursor, schema, decision.replace_jobs, "replaced by a newer run", now
        )
        stats.cancelled += store.cancel_runs(
            cursor, schema, decision.supersede, "superseded by a newer run", now
        )
        stats.skipped += store.mark_skipped(
            cursor, schema, decision.skip_overlap, states.SKIP_OVERLAP, now
        )
        moved = store.mark_queued(cursor, schema, decision.queue, now)
        queued += [by_id[run_id] for run_id in decision.queue if run_id in moved]
        return queued, [by_id[run_id] for run_id in decision.hold]

    def _publish(self, entries: list[Pending]) -> None:
        if not entries:
            return
        pipe = self.client.pipeline(transaction=False)
        push_messages(pipe, [(e.queue, e.message) for e in entries])
        pipe.execute()

    def release_held(self, tenant_id: int, job_id: int) -> int:
        """A run of the job ended: its held runs go back to the due heap."""
        entries = self.held.pop((tenant_id, job_id), [])
        for entry in entries:
            heapq.heappush(self.pending, (entry.due, entry.seq, entry))
        return len(entries)

    # --- timing ----------------------------------------------------------------------------
    def next_due(self) -> float | None:
        """Epoch seconds of the next thing to do: a pending run's instant, or the moment a
        job in the index enters the lookahead window."""
        candidates = []
        if self.pending:
            candidates.append(self.pending[0][0])
        pipe = self.client.pipeline(transaction=False)
        for key in (index_key(), index.runs_index_key()):
            pipe.zrange(key, 0, 0, withscores=True)
        for head in pipe.execute():  # both index heads in one round trip
            if head:
                candidates.append(head[0][1] - self.config.lookahead_seconds)
        return min(candidates) if candidates else None


def _paused_window(job: store.JobRow) -> tuple[datetime, datetime] | None:
    if job.paused_at and job.resumed_at and job.resumed_at > job.paused_at:
        return (job.paused_at, job.resumed_at)
    return None


def _split_by_job_state(entries: list[Pending], jobs: dict[int, store.JobAdmissionRow]):
    live, paused, gone = [], [], []
    for entry in entries:
        job = jobs.get(entry.job_id)
        if job is None or job.deleted:
            gone.append(entry.run_id)
        elif job.paused and entry.trigger == "schedule":
            paused.append(entry.run_id)
        else:
            live.append(entry)
    return live, paused, gone
