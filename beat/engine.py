"""The leader's work: materialise due slots, fire runs at their instant, keep the indexes
right, relay strays, reap the lost.

Each step is a method that returns how much it did, so that tests drive it directly with a
fake clock (the loop in `beat.loop` only sequences them and sleeps). Every transaction
that writes schedule state starts with the fencing check (invariant 3), every Redis write
is fenced by the lease token (`beat/fenced.py`), and the engine calls `checkpoint` between
units of work, which renews the lease when due: no step holds the loop past the lease.
The steps live in their own modules: `materialise`, `fire`, `sweeps`, `rebuild`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection

from core import index
from core.clock import Clock
from core.gc_pause import gc_paused
from core.keys import (
    faults_key,
    index_key,
    partition_count,
    rebuild_state_key,
    runs_index_key,
)

from . import fire as fire_step
from . import materialise as materialise_step
from . import sweeps
from .admission_control import AdmissionConfig, AdmissionControl
from .amqp_writes import leader_writes
from .faults import TenantFaults, isolated
from .fenced import Cas, FencedRedis
from .pending import Pending, PendingRuns
from .rebuild import IndexRebuild, put_back_schedulable_many
from .retention import Retention
from .tenant_directory import TenantDirectory

log = logging.getLogger("beat.engine")

FireStats = fire_step.FireStats


@dataclass(frozen=True)
class EngineConfig:
    lookahead_seconds: float = 30.0
    # A job taken up is prepared this much past the lookahead (SCHEDULER_LOOKAHEAD_EXTRA_SECONDS).
    lookahead_extra_seconds: float = 30.0
    shard_count: int = 4
    materialise_batch: int = 5000
    # Jobs, and about as many runs, in one materialise transaction: the unit between two
    # lease renewals (90 us a run on this machine's PostgreSQL: ~0.1 s, ten times that
    # on a slow one still well inside a 2 s lease).
    materialise_chunk: int = 1000
    relay_interval_seconds: float = 10.0
    misfire_max_runs: int = 100
    misfire_max_age_seconds: int = 86400
    visibility_timeout_seconds: float = 300.0
    fire_chunk: int = 2000
    fire_chunk_schemas: int = 50  # tenant schemas one fire transaction touches at most
    # With at least this many small tenants due in one fire, their runs are written first
    # and published after, their schemas' statements grouped (beat/fire.py, ADR 0031).
    fire_write_first_min_tenants: int = 50
    fire_lock_timeout_seconds: float = 0.1
    # The longest a fire waits for the broker to take its pushes while its fenced
    # transaction sits idle: under the leader session's idle-in-transaction bound, past
    # which PostgreSQL ends that transaction (and the fence with it).
    push_wait_seconds: float = 8.0
    sweep_budget_seconds: float = 0.25  # per sweep per iteration
    rebuild_budget_seconds: float = 0.4  # per iteration while a rebuild runs
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)

    @classmethod
    def from_settings(cls) -> EngineConfig:
        lease = settings.SCHEDULER_LEASE_SECONDS
        return cls(
            lookahead_seconds=settings.SCHEDULER_LOOKAHEAD_SECONDS,
            lookahead_extra_seconds=settings.SCHEDULER_LOOKAHEAD_EXTRA_SECONDS,
            shard_count=settings.SCHEDULER_SHARD_COUNT,
            materialise_batch=settings.SCHEDULER_MATERIALISE_BATCH,
            relay_interval_seconds=settings.SCHEDULER_RELAY_INTERVAL_SECONDS,
            misfire_max_runs=settings.SCHEDULER_MISFIRE_MAX_RUNS,
            misfire_max_age_seconds=settings.SCHEDULER_MISFIRE_MAX_AGE_SECONDS,
            visibility_timeout_seconds=settings.SCHEDULER_VISIBILITY_TIMEOUT_SECONDS,
            fire_lock_timeout_seconds=settings.SCHEDULER_FIRE_LOCK_TIMEOUT_SECONDS,
            push_wait_seconds=0.8 * settings.SCHEDULER_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS,
            sweep_budget_seconds=lease / 8,
            rebuild_budget_seconds=lease / 5,
            admission=AdmissionConfig.from_settings(),
        )

    @property
    def prepare_until_seconds(self) -> float:
        """How far ahead of now a job taken up has its slots prepared."""
        return self.lookahead_seconds + self.lookahead_extra_seconds

    @property
    def reap_interval_seconds(self) -> float:
        return min(self.visibility_timeout_seconds / 4, 30.0)


class Engine:
    def __init__(
        self,
        *,
        client,
        clock: Clock,
        epoch: int,
        config: EngineConfig,
        origin: str,
        writes: FencedRedis | None = None,
        checkpoint: Callable[[], None] | None = None,
        partition: int = 0,
    ) -> None:
        self.client = client
        self.partition = partition  # the tenants this engine leads (docs/adr/0020)
        self.clock = clock
        self.epoch = epoch
        self.config = config
        self.origin = origin
        self.writes = writes or leader_writes(client, lock_key="", token=None, partition=partition)
        self.checkpoint = checkpoint or (lambda: None)
        self.index_key = index_key(partition)
        self.runs_index_key = runs_index_key(partition)
        self.tenants = TenantDirectory(partition, partition_count())
        self.faults = TenantFaults()
        self.runs = PendingRuns(shard_count=config.shard_count, origin=origin)
        self.materialise_interrupted = False
        self.materialise_alone: set[int] = set()  # tenants kept out of grouped materialise
        self.fire_limited = False  # the last fire left admissible runs for the next call
        self.last_fire = FireStats()
        self.lag_log: list[float] | None = None  # benchmarks collect every publish lag here
        self.relay_sweep = sweeps.TenantSweep("relay", config.relay_interval_seconds)
        self.takeover_sweep = sweeps.TenantSweep("takeover relay", 0)
        # Tenants whose every waiting run this engine has read (`sweeps.relay_chunk`): for
        # those, what it holds in memory is complete, and the relay looks only for strays.
        self.relayed: set[int] = set()
        self.reconcile_sweep = sweeps.TenantSweep("reconcile", config.relay_interval_seconds)
        self.sync_sweep = sweeps.TenantSweep("sync", config.relay_interval_seconds)
        self.reap_sweep = sweeps.TenantSweep("reap", config.reap_interval_seconds)
        self.dag_sweep = sweeps.TenantSweep("settle DAG runs", config.relay_interval_seconds)
        self.rebuild: IndexRebuild | None = None
        self.retention = Retention()  # run history pruning (beat/retention.py)
        self.admission = (
            AdmissionControl(
                client=client,
                config=config.admission,
                shard_count=config.shard_count,
                faults=self.faults,
                partition=partition,
                partitions=partition_count(),
            )
            if config.admission.enabled
            else None
        )
        if self.admission is not None:  # late-bound: tests and benchmarks replace checkpoint
            self.admission.checkpoint = lambda: self.checkpoint()
        self._admission_published = float("-inf")

    # --- the steps -------------------------------------------------------------------------
    def materialise(self) -> int:
        """Turn due index entries into runs; returns how many index entries it processed."""
        return materialise_step.materialise(self)

    def fire(self) -> FireStats:
        """Admit and publish every run whose instant has come."""
        with gc_paused():  # a full collection here delays the whole due second
            return fire_step.fire(self)

    def load_run_index(self) -> int:
        """Runs admitted one by one (manual, backfill, replay, retry) that are due within the
        lookahead window join the heap; their index entries are removed (if this leader
        dies, the next one's relay finds them in PostgreSQL)."""
        now = self.clock.now()
        horizon = now + timedelta(seconds=self.config.lookahead_seconds)
        key = self.runs_index_key
        entries = index.due(self.client, key, horizon.timestamp(), self.config.materialise_batch)
        by_tenant: dict[int, list[str]] = {}
        for tenant_id, run_id, _score in entries:
            by_tenant.setdefault(tenant_id, []).append(run_id)
        for tenant_id, run_ids in by_tenant.items():
            schema = self.tenants.schema(tenant_id)
            if schema is not None:
                ran, _ = isolated(
                    self.faults,
                    tenant_id,
                    schema,
                    lambda t=tenant_id, s=schema, r=run_ids: self._load_runs(t, s, r, horizon),
                )
                if not ran:  # tried again after the tenant's back-off, out of the way
                    self.defer_run_entries(tenant_id, run_ids)
                    continue
            self.writes.remove_runs([index.member(tenant_id, r) for r in run_ids])
        return len(entries)

    def _load_runs(self, tenant_id: int, schema: str, run_ids: list[str], until: datetime) -> int:
        from .store import pending_runs_by_id

        with connection.cursor() as cursor:
            rows = pending_runs_by_id(cursor, schema, until=until, run_ids=run_ids)
        return sum(self.runs.remember(self.runs.build(tenant_id, schema, row)) for row in rows)

    def relay(self, *, force: bool = False) -> int:
        """Runs waiting in PostgreSQL but not in this leader's memory join the heap.

        A tenant this engine has not read whole yet (every tenant at takeover, `force`) is
        read for every run due within the window, its extra and the largest jitter: a jittered run,
        due up to an hour after its slot entered the window, was held only by the leader
        that made it, and must be held again before its instant, not judged late once
        overdue (retries due later, reaped ones included, wait in the runs index).
        Afterwards this engine holds what it makes, so the periodic sweep asks the tenants
        it has read only for runs already overdue by a second: a cheap indexed query that
        returns nothing when all is well. Each periodic pass also admits held runs again."""
        now = self.clock.now()
        if force:
            self.relayed.clear()  # a new leader relies on no memory: every tenant whole
            self.relay_sweep.last_started = now  # the takeover pass covers the periodic one
        return sweeps.run_sweep(
            self,
            self.takeover_sweep if force else self.relay_sweep,
            lambda chunk: sweeps.relay_chunk(self, chunk, overdue=now - timedelta(seconds=1)),
            force=force,
            on_start=None if force else self.runs.release_all,
        )

    def finish_takeover_relay(self) -> int:
        """Go on with a takeover relay that its budget cut short."""
        if not self.takeover_sweep.running:
            return 0
        overdue = self.clock.now() - timedelta(seconds=1)
        return sweeps.run_sweep(
            self,
            self.takeover_sweep,
            lambda chunk: sweeps.relay_chunk(self, chunk, overdue=overdue),
        )

    def reconcile(self) -> int:
        """Schedulable jobs due within the window that the index misses are put back."""
        until = self.clock.now() + timedelta(seconds=self.config.lookahead_seconds)
        return sweeps.run_sweep(
            self, self.reconcile_sweep, lambda chunk: sweeps.reconcile_chunk(self, chunk, until)
        )

    def sync_dirty(self) -> int:
        """Jobs whose post-commit index write was lost are written."""
        return sweeps.run_sweep(self, self.sync_sweep, lambda chunk: sweeps.sync_chunk(self, chunk))

    def reap(self, *, force: bool = False) -> int:
        """Runs whose worker went silent, and queued runs whose message went missing."""
        return sweeps.run_sweep(
            self, self.reap_sweep, lambda chunk: sweeps.reap_chunk(self, chunk), force=force
        )

    def settle_dag_runs(self, *, force: bool = False) -> int:
        """DAG runs whose last end nobody settled are settled."""
        return sweeps.run_sweep(
            self, self.dag_sweep, lambda chunk: sweeps.dag_chunk(self, chunk), force=force
        )

    def sweeps_running(self) -> bool:
        return any(
            s.running
            for s in (
                self.takeover_sweep,
                self.relay_sweep,
                self.reconcile_sweep,
                self.reap_sweep,
                self.dag_sweep,
            )
        )

    # --- the index -------------------------------------------------------------------------
    def start_rebuild(self, *, lost: bool) -> None:
        self.rebuild = IndexRebuild(
            self.client,
            self.writes,
            messages=self.runs,
            checkpoint=self.checkpoint,
            tenants=self.tenants,
            state_key=rebuild_state_key(self.partition),
        )
        if not self.rebuild.exists():  # else: resume the one a previous leader began
            self.rebuild.start(lost=lost, prune=False)

    def rebuild_step(self) -> bool:
        """One bounded step of a rebuild in progress; True when none is (any more), or
        when what is left waits for a failing tenant's retry (nothing to do at once)."""
        if self.rebuild is None:
            return True
        if self.rebuild.step(time.monotonic() + self.config.rebuild_budget_seconds):
            self.rebuild = None
            return True
        return self.rebuild.waiting

    def verify_moved(self, moves: list[tuple[int, str, dict[int, float | None]]]) -> None:
        """After the leader's compare-and-set moves, of one tenant or of a grouped
        materialise's several: put back what an edit made earlier."""
        put_back_schedulable_many(self.writes, moves, checkpoint=self.checkpoint)

    # --- fault isolation -------------------------------------------------------------------
    def defer_jobs(self, tenant_id: int, scores: dict[int, float]) -> None:
        """A failing tenant's due index entries move past the lookahead window (or to the end
        of its back-off, if later), so that they do not stay at the head of the index and
        fill every batch, hiding other tenants' due jobs. Its slots then fire late, and its
        jobs' misfire policies decide."""
        wait = max(self.faults.remaining(tenant_id), self.config.lookahead_seconds + 1)
        later = self.clock.now().timestamp() + wait
        self.writes.cas_jobs(
            [Cas(index.member(tenant_id, j), s, max(s, later)) for j, s in scores.items()]
        )

    def defer_run_entries(self, tenant_id: int, run_ids: list[str]) -> None:
        """A failing tenant's runs-index entries move past the lookahead window (or to the
        end of its back-off, if later), as `defer_jobs` does for its jobs; once it can be
        read, the relay finds the overdue ones in PostgreSQL sooner."""
        wait = max(self.faults.remaining(tenant_id), self.config.lookahead_seconds + 1)
        until = self.clock.now().timestamp() + wait
        self.writes.defer_runs([index.member(tenant_id, r) for r in run_ids], until)

    def defer_runs(self, entries: list[Pending]) -> None:
        if not entries:
            return
        wait = max(self.faults.remaining(entries[0].tenant_id), 1.0)
        for entry in entries:
            entry.judge_lateness = True  # its instant may pass while its tenant fails
        self.runs.requeue(entries, not_before=self.clock.now().timestamp() + wait)

    def publish_faults(self) -> None:
        self.faults.publish(self.client, faults_key(self.partition), ttl_seconds=60)

    def read_ended(self) -> int:
        """Attempts reported ended free their tenants' quota slots."""
        return self.admission.read_ended() if self.admission is not None else 0

    def publish_admission(self) -> None:
        """Runs in flight and waiting per tenant, for scheduler_status (once a second)."""
        now = time.time()
        if self.admission is not None and now - self._admission_published >= 1.0:
            self.admission.publish(now)
            self._admission_published = now

    def runs_waiting_for_admission(self) -> int:
        return self.admission.waiting() if self.admission is not None else 0

    # --- timing ----------------------------------------------------------------------------
    def fire_is_due(self) -> bool:
        head = self.runs.next_due
        return head is not None and head <= self.clock.now().timestamp()

    def release_held(self, tenant_id: int, job_id: int) -> int:
        """A run of the job ended: its held runs go back to the due heap."""
        return self.runs.release(tenant_id, job_id)

    def republish_queued(self) -> int:
        """Publish every `queued` run again (used by tests; the rebuild does it in steps)."""
        rebuild = IndexRebuild(self.client, self.writes, messages=self.runs, tenants=self.tenants)
        count = 0
        for tenant_id, schema in self.tenants.all():
            after = None
            while True:
                rows, after = rebuild._queued_page(tenant_id, schema, after)
                count += rows
                if rows < 5000:
                    break
        return count

    def next_due(self) -> float | None:
        """Epoch seconds of the next thing to do: a pending run's instant, or the moment a
        job in the index enters the lookahead window."""
        candidates = []
        if self.runs.next_due is not None:
            candidates.append(self.runs.next_due)
        pipe = self.client.pipeline(transaction=False)
        for key in (self.index_key, self.runs_index_key):
            pipe.zrange(key, 0, 0, withscores=True)
        for head in pipe.execute():  # both index heads in one round trip
            if head:
                candidates.append(head[0][1] - self.config.lookahead_seconds)
        return min(candidates) if candidates else None
