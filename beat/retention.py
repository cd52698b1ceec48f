"""The leader prunes run history: ended runs older than their tenant's retention go, with
their attempts, in small batches (what a batch deletes and keeps: `runs/retention.py`).

A pass starts every RUN_RETENTION_INTERVAL_SECONDS (when the previous one is done) over
every tenant that is not suspended, each with its own cutoff (`run_retention_days`, else
RUN_RETENTION_DAYS; 0 keeps everything). The pass is sliced across leader iterations:

- each batch is one short transaction, fenced by the lease epoch like every leader write
  (a deposed leader's batch fails and the leader steps down), with its own statement
  timeout; it takes only the rows it deletes (`SKIP LOCKED`), so no writer waits on it;
- tenants take turns (`beat/retention_plan.py`), one batch each;
- an iteration prunes for at most the sweeps' budget, and a batch deletes only as many
  runs as fit before the next run is due (`BatchSizer`: fire lag comes first; a leader
  never idle long enough still gets a small batch every 30 s);
- a tenant whose batch fails (a broken schema, a timeout) is logged and left out until its
  own back-off ends; this back-off is retention's own, so it never holds up the tenant's
  firing, and the other tenants go on.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection

from core.logs import log_event
from core.metrics import LEADER
from runs.retention import Pruned, prune_batch
from tenants.services import slug_for_schema

from . import store
from .faults import TenantFaults, isolated
from .retention_plan import BatchSizer, RoundRobin, TenantTurn, cutoff_for, retention_days

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("beat.retention")


@dataclass(frozen=True)
class RetentionConfig:
    default_days: int = 30
    batch: int = 5000
    interval_seconds: float = 300.0
    budget_seconds: float = 0.25  # per leader iteration
    statement_timeout_seconds: float = 2.0  # per batch statement

    @classmethod
    def from_settings(cls) -> RetentionConfig:
        return cls(
            default_days=settings.RUN_RETENTION_DAYS,
            batch=settings.RUN_RETENTION_BATCH,
            interval_seconds=settings.RUN_RETENTION_INTERVAL_SECONDS,
            budget_seconds=settings.SCHEDULER_LEASE_SECONDS / 8,
        )


class Retention:
    def __init__(self, config: RetentionConfig | None = None) -> None:
        self.config = config or RetentionConfig.from_settings()
        self.turns = RoundRobin()
        self.sizer = BatchSizer(self.config.batch)
        self.faults = TenantFaults()
        self.last_started: datetime | None = None

    def step(self, engine: Engine) -> int:
        """One slice of the pass (starting one when due); returns the runs it deleted."""
        now = engine.clock.now()
        if not len(self.turns):
            if self.last_started and now - self.last_started < timedelta(
                seconds=self.config.interval_seconds
            ):
                return 0
            self.last_started = now
            self.turns.start(self._tenants(now, engine))
        deadline = time.monotonic() + self.config.budget_seconds
        pruned = 0
        while len(self.turns):
            limit = self.sizer.size(engine.clock.now().timestamp(), engine.runs.next_due)
            if not limit:
                break  # a run is due before even a small batch would end: fire first
            engine.checkpoint()
            pruned += self._turn(engine, self.turns.next(), limit)
            if time.monotonic() >= deadline:
                break
        return pruned

    def _tenants(self, now: datetime, engine: Engine) -> list[TenantTurn]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, schema_name, run_retention_days FROM public.tenants_tenant"
                " WHERE schema_name <> 'public' AND suspended_at IS NULL ORDER BY id"
            )
            rows = cursor.fetchall()
        turns = []
        for tenant_id, schema, own in rows:
            if not engine.tenants.includes(tenant_id):
                continue  # another partition's leader prunes it
            cutoff = cutoff_for(now, retention_days(own, self.config.default_days))
            if cutoff is not None:
                turns.append(TenantTurn(tenant_id, schema, cutoff))
        return turns

    def _turn(self, engine: Engine, turn: TenantTurn, limit: int) -> int:
        started = time.monotonic()
        ran, done = isolated(
            self.faults, turn.tenant_id, turn.schema, lambda: self._batch(engine, turn, limit)
        )
        took = time.monotonic() - started
        if ran and done is not None:
            self.sizer.record(engine.clock.now().timestamp(), took, done.runs)
        else:
            self.sizer.failed(engine.clock.now().timestamp(), limit, took)
        if not ran or done is None:
            return 0  # failed (logged, backed off): the others go on; next pass tries again
        turn.runs += done.runs
        turn.attempts += done.attempts
        turn.dag_runs += done.dag_runs
        turn.batches += 1
        LEADER.inc("tickwork_runs_pruned", done.runs)
        if max(done.runs, done.dag_runs) >= limit:
            self.turns.again(turn)
        else:
            self._finished(turn)
        return done.runs

    def _batch(self, engine: Engine, turn: TenantTurn, limit: int) -> Pruned:
        """One batch in its own transaction (`isolated` opens it): fenced, time-bounded."""
        with connection.cursor() as cursor:
            store.fence(cursor, engine.epoch, "prune", engine.partition)
            cursor.execute(
                "SELECT set_config('statement_timeout', %s, true)",
                [f"{self.config.statement_timeout_seconds * 1000:.0f}"],
            )
            return prune_batch(cursor, turn.schema, cutoff=turn.cutoff, limit=limit)

    def _finished(self, turn: TenantTurn) -> None:
        if not (turn.runs or turn.dag_runs):
            return
        log_event(
            log,
            "retention.pruned",
            "%s: pruned %s runs (%s attempts, %s DAG runs) that ended before %s",
            turn.schema,
            turn.runs,
            turn.attempts,
            turn.dag_runs,
            turn.cutoff.isoformat(timespec="seconds"),
            tenant=slug_for_schema(turn.schema),
            runs=turn.runs,
            attempts=turn.attempts,
            dag_runs=turn.dag_runs,
            batches=turn.batches,
            cutoff=turn.cutoff.isoformat(timespec="seconds"),
        )
