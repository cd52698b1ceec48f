"""Heartbeats of the runs a worker process is executing, batched: one UPDATE per tenant
schema every interval for all of its running runs, never one per run per second.

A heartbeat names the attempt it vouches for, and its time is the database's clock (the
reaper compares it with the same clock, so two hosts' clocks are never compared). The same
UPDATE tells the worker which of its runs were cancelled, reaped, or moved on to another
attempt meanwhile: those rows no longer match (id, attempt, `running`), so their stop flag
is raised and a task that waits with `context.wait()` or polls `context.should_stop()`
ends early. A superseded attempt's worker therefore neither keeps the run looking alive
nor runs on unnoticed.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable

from django.db import DatabaseError, close_old_connections, connection
from psycopg import sql

from core.logs import log_event
from core.metrics import HEARTBEAT_FAILURES, HEARTBEAT_STOPPED
from core.sql import per_schema, pg_array, table
from tenants.services import slug_for_schema

from .status_sql import STATUS

log = logging.getLogger("runs.heartbeat")

BEAT_SQL = """
UPDATE {runs} r SET heartbeat_at = now()
FROM unnest(%s::uuid[], %s::int[]) AS u(id, attempt)
WHERE r.id = u.id AND r.attempt = u.attempt AND r.status = {running}
RETURNING r.id, r.attempt
"""


@per_schema
def _beat_sql(schema: str) -> sql.Composable:
    return sql.SQL(BEAT_SQL).format(runs=table(schema, "runs_run"), **STATUS)


class Heartbeats:
    def __init__(self, interval_seconds: float) -> None:
        self.interval = interval_seconds
        # What to call when an attempt is found stopped: its Event's set(), or the
        # callback of a run in the asyncio executor (which aborts its request).
        self._running: dict[tuple[str, str, int], Callable[[], object]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._owner_pid: int | None = None
        self._stop = threading.Event()

    def track(self, schema: str, run_id: str, attempt: int) -> threading.Event:
        """Start beating for one attempt of a run; returns the event raised if it is
        stopped (cancelled, reaped, or superseded by another attempt)."""
        stop = threading.Event()
        self.track_callback(schema, run_id, attempt, stop.set)
        return stop

    def track_callback(
        self, schema: str, run_id: str, attempt: int, on_stop: Callable[[], object]
    ) -> None:
        """As :meth:`track`, calling `on_stop` (from the heartbeat thread) instead of
        raising an event: no Event per run for thousands of requests in flight."""
        self._ensure_thread()
        with self._lock:
            self._running[(schema, str(run_id), attempt)] = on_stop

    def tracked(self) -> int:
        return len(self._running)

    def untrack(self, schema: str, run_id: str, attempt: int) -> None:
        with self._lock:
            self._running.pop((schema, str(run_id), attempt), None)

    def beat_once(self) -> int:
        """One batched heartbeat; returns how many runs were found stopped."""
        with self._lock:
            snapshot = dict(self._running)
        by_schema: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for schema, run_id, attempt in snapshot:
            by_schema[schema].append((run_id, attempt))
        stopped = 0
        for schema, attempts in by_schema.items():
            alive = self._beat_schema_isolated(schema, attempts)
            if alive is None:
                continue  # not known: nothing is stopped on a failed beat
            for run_id, attempt in attempts:
                if (run_id, attempt) not in alive:
                    snapshot[(schema, run_id, attempt)]()
                    stopped += 1
                    HEARTBEAT_STOPPED.inc()
                    log_event(
                        log,
                        "heartbeat.stopped",
                        "run %s attempt %s moved on (cancelled, reaped or superseded): stopping",
                        run_id,
                        attempt,
                        level=logging.WARNING,
                        tenant=slug_for_schema(schema),
                        run_id=run_id,
                        attempt=attempt,
                    )
        return stopped

    def _beat_schema_isolated(
        self, schema: str, attempts: list[tuple[str, int]]
    ) -> set[tuple[str, int]] | None:
        """`_beat_schema`, a failure costing only that schema (None): one tenant's broken
        or locked table must not leave the other tenants' runs on this worker without a
        heartbeat, or the reaper runs them again while they still execute. A connection
        that is gone fails every schema, and is left to the loop (it reconnects)."""
        try:
            return self._beat_schema(schema, attempts)
        except DatabaseError:
            raw = connection.connection
            if raw is None or raw.closed or getattr(raw, "broken", False):
                raise
            HEARTBEAT_FAILURES.inc()
            log_event(
                log,
                "heartbeat.failed",
                "heartbeat of %s runs of %s failed",
                len(attempts),
                slug_for_schema(schema),
                level=logging.ERROR,
                exc_info=True,
                tenant=slug_for_schema(schema),
            )
            return None

    def _beat_schema(self, schema: str, attempts: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """The (run, attempt) pairs still running: pairs, not ids, since two attempts of
        one run can be tracked by the same process (a thread pool ran the superseded
        attempt and then claimed the next)."""
        query = _beat_sql(schema)
        ids, numbers = zip(*attempts, strict=True)
        with connection.cursor() as cursor:
            cursor.execute(query, [pg_array(list(ids)), pg_array(list(numbers))])
            return {(str(row[0]), row[1]) for row in cursor.fetchall()}

    def _ensure_thread(self) -> None:
        # Started lazily in the process that executes runs: a thread does not survive the
        # fork of a prefork pool child, so each child starts its own.
        import os

        if self._thread is not None and self._owner_pid == os.getpid():
            return
        self._owner_pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="heartbeats", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval + 5)

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                try:
                    if self._running:
                        self.beat_once()
                except Exception:  # a failed beat must not kill the thread; retry next time
                    HEARTBEAT_FAILURES.inc()
                    log_event(
                        log,
                        "heartbeat.failed",
                        "heartbeat failed",
                        level=logging.ERROR,
                        exc_info=True,
                    )
                    close_old_connections()
        finally:
            connection.close()
