"""Heartbeats of the runs a worker process is executing, batched: one UPDATE per tenant
schema every interval for all of its running runs, never one per run per second.

The same UPDATE tells the worker which of its runs were cancelled (or reaped) meanwhile:
those rows no longer match `status = 'running'`, so their stop flag is raised and a task
that waits with `context.wait()` or polls `context.should_stop()` ends early.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime

from django.db import close_old_connections, connection
from psycopg import sql

from core.sql import table

from .status_sql import STATUS

log = logging.getLogger("runs.heartbeat")


class Heartbeats:
    def __init__(self, interval_seconds: float, now: Callable[[], datetime]) -> None:
        self.interval = interval_seconds
        self.now = now
        self._running: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._owner_pid: int | None = None
        self._stop = threading.Event()

    def track(self, schema: str, run_id: str) -> threading.Event:
        """Start beating for a run; returns the event raised if the run is stopped."""
        self._ensure_thread()
        stop = threading.Event()
        with self._lock:
            self._running[(schema, str(run_id))] = stop
        return stop

    def untrack(self, schema: str, run_id: str) -> None:
        with self._lock:
            self._running.pop((schema, str(run_id)), None)

    def beat_once(self) -> int:
        """One batched heartbeat; returns how many runs were found stopped."""
        with self._lock:
            snapshot = dict(self._running)
        by_schema: dict[str, list[str]] = defaultdict(list)
        for schema, run_id in snapshot:
            by_schema[schema].append(run_id)
        stopped = 0
        for schema, run_ids in by_schema.items():
            alive = self._beat_schema(schema, run_ids)
            for run_id in run_ids:
                if run_id not in alive:
                    snapshot[(schema, run_id)].set()
                    stopped += 1
        return stopped

    def _beat_schema(self, schema: str, run_ids: list[str]) -> set[str]:
        query = sql.SQL(
            "UPDATE {} SET heartbeat_at = %s WHERE id = ANY(%s::uuid[]) AND status = {running} "
            "RETURNING id"
        ).format(table(schema, "runs_run"), **STATUS)
        with connection.cursor() as cursor:
            cursor.execute(query, [self.now(), run_ids])
            return {str(row[0]) for row in cursor.fetchall()}

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
                    log.exception("heartbeat failed")
                    close_old_connections()
        finally:
            connection.close()
