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

from jobs.schedule_fields import schedule_from_fields
from runs import states
from runs.ids import uuid7

from . import index, store
from .admission import DueRun, JobLimits, admit
from .clock import Clock
from .keys import index_key
from .messages import build_message, push_messages, queue_for
from .planning import MisfireRules, plan_job
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

    @classmethod
    def from_settings(cls) -> EngineConfig:
        return cls(
            lookahead_seconds=settings.SCHEDULER_LOOKAHEAD_SECONDS,
            shard_count=settings.SCHEDULER_SHARD_COUNT,
            materialise_batch=settings.SCHEDULER_MATERIALISE_BATCH,
            relay_interval_seconds=settings.SCHEDULER_RELAY_INTERVAL_SECONDS,
            misfire_max_runs=settings.SCHEDULER_MISFIRE_MAX_RUNS,
            misfire_max_age_seconds=settings.SCHEDULER_MISFIRE_MAX_AGE_SECONDS,
        )


@dataclass(order=True)
class Pending:
    """A run waiting in memory for its instant, with its Celery message already built."""

    due: float
    seq: int
    tenant_id: int = field(compare=False)
    schema: str = field(compare=False)
    run_id: Any = field(compare=False)
    job_id: int = field(compare=False)
    scheduled_for: datetime = field(compare=False)
    trigger: str = field(compare=False)
    queue: str = field(compare=False)
    message: bytes = field(compare=False, repr=False)


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
        self.pending: list[Pending] = []
        self.known: set = set()  # run ids in `pending` or `held`
        self.held: dict[tuple[int, int], list[Pending]] = defaultdict(list)
        self.last_relay: datetime | None = None
        self._seq = itertools.count()
        self.last_fire = FireStats()
        self.lag_log: list[float] | None = None  # benchmarks collect every publish lag here

    # --- building pending entries ----------------------------------------------------------
    def _pending(
        self,
        tenant_id: int,
        schema: str,
        run_id: Any,
        job_id: int,
        attempt: int,
        scheduled_for: datetime,
        due_at: datetime,
        priority: str,
        trigger: str = "schedule",
    ) -> Pending:
        queue = queue_for(priority, f"{tenant_id}:{job_id}", self.config.shard_count)
        message = build_message(
            task_name=EXECUTE_TASK,
            task_id=str(run_id),
            args=[schema, str(run_id), attempt],
            queue=queue,
            origin=self.origin,
        )
        return Pending(
            due_at.timestamp(),
            next(self._seq),
            tenant_id,
            schema,
            run_id,
            job_id,
            scheduled_for,
            trigger,
            queue,
            message,
        )

    def _remember(self, entry: Pending) -> None:
        if entry.run_id not in self.known:
            self.known.add(entry.run_id)
            heapq.heappush(self.pending, entry)

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
        for tenant_id, job_ids in by_tenant.items():
            self._materialise_tenant(tenant_id, job_ids, now, horizon)
        return len(entries)

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
                self._remember(
                    self._pending(tenant_id, schema, run_id, job_id, 1, slot, due, fresh[job_id])
                )

    def _plan(self, jobs: list[store.JobRow], now: datetime, horizon: datetime):
        rows: list[tuple] = []
        cursors: list[tuple[int, datetime | None]] = []
        priorities: dict[int, str] = {}
        for job in jobs:
            if not job.schedulable or job.next_run_at > horizon:
                continue
            schedule = schedule_from_fields(
                kind=job.schedule_kind,
                cron_resolved=job.cron_resolved,
                timezone=job.timezone,
                interval_seconds=job.interval_seconds,
                anchor_at=job.anchor_at,
                dst_gap=job.dst_gap,
                dst_repeat=job.dst_repeat,
            )
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
            priorities[job.id] = job.priority
        return rows, cursors, priorities

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
            self._remember(
                self._pending(
                    tenant_id,
                    schema,
                    row.run_id,
                    row.job_id,
                    row.attempt,
                    row.scheduled_for,
                    row.due_at,
                    row.priority,
                    row.trigger,
                )
            )
            added += 1
        return added

    # --- relay -----------------------------------------------------------------------------
    def relay(self, *, force: bool = False) -> int:
        """Find runs that wait for admission in PostgreSQL but not in this leader's memory
        (materialised by a leader that died before publishing, or lost from Redis)."""
        now = self.clock.now()
        interval = timedelta(seconds=self.config.relay_interval_seconds)
        if not force and self.last_relay is not None and now - self.last_relay < interval:
            return 0
        self.last_relay = now
        horizon = now + timedelta(seconds=self.config.lookahead_seconds)
        return sum(self._load_pending(t, s, horizon) for t, s in self.tenants.all())

    def republish_queued(self) -> int:
        """Publish every `queued` run again: used after Redis lost its data."""
        count = 0
        for tenant_id, schema in self.tenants.all():
            with connection.cursor() as cursor:
                rows = store.queued_runs(cursor, schema)
            entries = [
                self._pending(
                    tenant_id,
                    schema,
                    r.run_id,
                    r.job_id,
                    r.attempt,
                    r.scheduled_for,
                    r.due_at,
                    r.priority,
                    r.trigger,
                )
                for r in rows
            ]
            self._publish(entries)
            count += len(entries)
        if count:
            log.warning("re-published %s queued runs after Redis lost its data", count)
        return count

    # --- fire ------------------------------------------------------------------------------
    def fire(self) -> FireStats:
        now = self.clock.now()
        stats = FireStats()
        due: list[Pending] = []
        while self.pending and self.pending[0].due <= now.timestamp():
            due.append(heapq.heappop(self.pending))
        by_schema: dict[str, list[Pending]] = defaultdict(list)
        for entry in due:
            by_schema[entry.schema].append(entry)
        for schema, entries in by_schema.items():
            self._fire_schema(schema, entries, stats)
        self.last_fire = stats
        if self.lag_log is not None:
            self.lag_log.extend(stats.lags)
        return stats

    def _fire_schema(self, schema: str, entries: list[Pending], stats: FireStats) -> None:
        now = self.clock.now()
        by_id = {e.run_id: e for e in entries}
        with transaction.atomic(), connection.cursor() as cursor:
            store.fence(cursor, self.epoch)
            jobs = store.job_admission_rows(cursor, schema, sorted({e.job_id for e in entries}))
            live, paused, gone = _split_by_job_state(entries, jobs)
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
            queued = store.mark_queued(cursor, schema, decision.queue, now)
            # Published inside the transaction: if the commit is lost the runs stay
            # `scheduled`, workers may still claim them, and the relay re-publishes the rest
            # (a duplicate message claims nothing: invariant 4).
            self._publish([by_id[run_id] for run_id in decision.queue if run_id in queued])
        published_at = self.clock.now().timestamp()
        for run_id in decision.queue:
            if run_id in queued:
                stats.published += 1
                stats.lags.append(published_at - by_id[run_id].due)
        for run_id in decision.hold:
            entry = by_id[run_id]
            self.held[(entry.tenant_id, entry.job_id)].append(entry)
            stats.held += 1
        for run_id in by_id:
            if run_id not in decision.hold:
                self.known.discard(run_id)

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
            heapq.heappush(self.pending, entry)
        return len(entries)

    # --- timing ----------------------------------------------------------------------------
    def next_due(self) -> float | None:
        """Epoch seconds of the next thing to do: a pending run's instant, or the moment a
        job in the index enters the lookahead window."""
        candidates = []
        if self.pending:
            candidates.append(self.pending[0].due)
        for key in (index_key(), index.runs_index_key()):
            head = index.earliest(self.client, key)
            if head is not None:
                candidates.append(head - self.config.lookahead_seconds)
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
