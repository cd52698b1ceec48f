"""The leader's alerting: evaluate every tenant's alert conditions in a sweep, and deliver
the notifications that evaluation wrote from a thread of its own.

Evaluation is a `TenantSweep` like the relay's (time-budgeted per iteration, chunks of
tenants read with one statement, a failing tenant isolated and backed off): one `UNION ALL`
asks each tenant of a chunk whether it has a channel and whether a notification is due;
tenants with channels are evaluated (`alerts/evaluate.py`), each in one fenced transaction
that writes its incidents and notifications together.

Delivery makes network calls (seconds, bounded by ALERTS_HTTP_TIMEOUT_SECONDS or
EMAIL_TIMEOUT), which must never hold up firing: it runs in one thread of the leader's
process, started when it takes the lease and stopped when it steps down, fed with the
tenants the sweep found with due notifications. Each claim is fenced by the leader's epoch
and leased (`alerts/delivery.py`): a deposed leader claims nothing, and a new leader sends
what a crashed one claimed only after that claim's lease expires. Alerts are delivered by
the scheduler, not by Celery workers, because they matter most when workers are down
(ADR 0016).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from psycopg import sql

from alerts.delivery import deliver_tenant
from alerts.evaluate import evaluate_tenant
from alerts.states import PENDING, SENDING
from core.logs import log_event
from core.sql import table
from tenants.services import slug_for_schema

from . import store, sweeps
from .faults import must_step_down

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("beat.alerting")

DELIVERY_POLL_SECONDS = 1.0
DELIVERIES_PER_TENANT_TURN = 20


def _flags(schema: str) -> sql.Composable:
    return sql.SQL(
        "SELECT EXISTS (SELECT 1 FROM {channels}), EXISTS (SELECT 1 FROM {notifications} "
        "WHERE (state = {pending} AND next_attempt_at <= %s) "
        "OR (state = {sending} AND lease_until <= %s))"
    ).format(
        channels=table(schema, "alerts_alertchannel"),
        notifications=table(schema, "alerts_notification"),
        pending=sql.Literal(PENDING),
        sending=sql.Literal(SENDING),
    )


class Alerting:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sweep = sweeps.TenantSweep("alerts", settings.ALERTS_EVALUATE_SECONDS)
        self._due: dict[int, str] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- evaluation (the leader's thread) --------------------------------------------------
    def evaluate(self, *, force: bool = False) -> int:
        """A slice of the evaluation sweep; returns how many incidents it opened or resolved."""
        return sweeps.run_sweep(self.engine, self.sweep, self._chunk, force=force)

    def _chunk(self, chunk: sweeps.Tenants) -> int:
        now = self.engine.clock.now()
        flags = sweeps.rows_by_tenant(chunk, _flags, [now, now])
        changed = 0
        due: dict[int, str] = {}
        for tenant_id, schema in chunk:
            has_channels, has_due = (flags.get(tenant_id) or [(False, False)])[0]
            if not has_channels:
                continue
            self.engine.checkpoint()
            with transaction.atomic(), connection.cursor() as cursor:
                store.fence(cursor, self.engine.epoch, "alerts", self.engine.partition)
                done = evaluate_tenant(
                    cursor,
                    schema=schema,
                    slug=slug_for_schema(schema),
                    now=now,
                    overlap=settings.ALERTS_OVERLAP_SECONDS,
                )
            changed += done.opened + done.resolved
            if has_due or done.notifications:
                due[tenant_id] = schema
        if due:
            with self._lock:
                self._due.update(due)
            self._wake.set()
        return changed

    # --- delivery (its own thread) ---------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._deliver_loop, name="alerts", daemon=True)
        self._thread.start()

    def stop(self, wait_seconds: float = 0.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and wait_seconds:
            self._thread.join(wait_seconds)

    def deliver_due(self) -> int:
        """Send what the sweep found due, a bounded number per tenant per turn."""
        with self._lock:
            todo, self._due = self._due, {}
        sent = 0
        for tenant_id, schema in todo.items():
            if self._stop.is_set():
                break
            try:
                tried = deliver_tenant(
                    schema=schema,
                    slug=slug_for_schema(schema),
                    clock=self.engine.clock,
                    holder=self.engine.origin,
                    fence=lambda cursor: store.fence(
                        cursor, self.engine.epoch, "alert delivery", self.engine.partition
                    ),
                    limit=DELIVERIES_PER_TENANT_TURN,
                    should_stop=self._stop.is_set,
                )
            except Exception as exc:
                if must_step_down(exc):
                    raise
                log_event(  # one tenant's failure costs that tenant: the next sweep retries
                    log,
                    "alert.delivery_error",
                    "%s: alert delivery failed; retried at the next sweep",
                    schema,
                    level=logging.ERROR,
                    exc_info=True,
                    tenant=slug_for_schema(schema),
                    error=exc.__class__.__name__,
                )
                close_old_connections()
                continue
            sent += tried
            if tried >= DELIVERIES_PER_TENANT_TURN:  # more wait: next turn, after the others
                with self._lock:
                    self._due.setdefault(tenant_id, schema)
                self._wake.set()
        return sent

    def _deliver_loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._wake.wait(DELIVERY_POLL_SECONDS)
                self._wake.clear()
                try:
                    self.deliver_due()
                except Exception as exc:
                    if must_step_down(exc):
                        log_event(
                            log,
                            "alert.delivery_stopped",
                            "alert delivery stops: %s",
                            exc,
                            level=logging.WARNING,
                            error=exc.__class__.__name__,
                        )
                        return
                    log_event(
                        log,
                        "alert.delivery_error",
                        "alert delivery failed; retried at the next sweep",
                        level=logging.ERROR,
                        exc_info=True,
                        error=exc.__class__.__name__,
                    )
                    close_old_connections()
        finally:
            connection.close()
