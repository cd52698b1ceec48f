"""The I/O-bound execution mode (TICKWORK_HTTP_EXECUTION=async): one asyncio event loop
per worker process holds thousands of HTTP target calls in flight (ADR 0018).

The Celery task claims the run and prepares its call as in the threaded mode
(runs.execution), then :meth:`HttpExecutor.submit` hands it here and the task returns:
the pool slot and the broker consumer are free again within a few milliseconds, whatever
the receiver's pace. Here:

- At most `max_inflight` calls are held (and never more than the process's open-file
  limit allows): `submit` blocks while the executor is full, so the pool stops taking
  messages and prefetch leaves the rest in the broker for other workers.
- Each call is tracked by the process's batched heartbeats (runs/heartbeat.py: one UPDATE
  per schema per interval for all of them). When a heartbeat finds the attempt cancelled,
  reaped or superseded, its task is cancelled on the loop: the request is aborted and its
  late outcome changes nothing (the finish is conditional on the attempt).
- The call runs under `send_async` (runs/targets/http_async.py): the SSRF guard of every
  hop, one overall deadline, the body read capped at SCHEDULER_HTTP_MAX_RESPONSE_BYTES.
- Its outcome is recorded by a few finisher threads with `runs.execution.complete_run`,
  the threaded mode's own finish; the run stays tracked (heartbeats) until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import connection

from core.logs import log_event
from core.redaction import redacting
from core.ssrf import AllowList

from .execution import PreparedHttp, http_call_failed, http_outcome, redacted
from .heartbeat import Heartbeats
from .observe import http_call_ended, ids
from .outcomes import Outcome
from .targets.http_async import send_async

log = logging.getLogger("runs.http_executor")

FD_RESERVE = 200  # database, broker, heartbeat and log descriptors besides the requests
SUBMIT_WAIT_SECONDS = 5.0  # a full executor is rechecked this often (a dead loop raises)
CANCELLED = "cancelled while in flight: the run was cancelled, reaped or superseded"

Finish = Callable[[PreparedHttp, Outcome, float], object]
Key = tuple[str, str, int]


def raise_open_files_limit() -> int:
    """The soft limit raised to the hard one (no privilege needed); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft


def effective_cap(max_inflight: int, open_files: int) -> int:
    """Each call in flight holds one socket: the cap never exceeds what the limit allows."""
    return max(1, min(max_inflight, open_files - FD_RESERVE))


class HttpExecutor:
    def __init__(
        self,
        *,
        max_inflight: int,
        heartbeats: Heartbeats,
        finish: Finish,
        allow: Callable[[], AllowList],
        finishers: int = 4,
    ) -> None:
        self.asked = max_inflight
        self.heartbeats = heartbeats
        self._finish = finish
        self._allow = allow
        self._finisher_count = finishers
        self._owner_pid: int | None = None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._inflight = 0
        self._tasks: dict[Key, asyncio.Task] = {}
        self.cap = max_inflight

    # --- the worker's side ---------------------------------------------------------------

    def submit(self, prepared: PreparedHttp, started: float) -> None:
        """Hand one prepared call over; blocks while `cap` calls are in flight."""
        self._ensure_started()
        with self._lock:
            while self._inflight >= self.cap:
                if not self._thread.is_alive():
                    raise RuntimeError("the HTTP executor's event loop has stopped")
                self._idle.wait(SUBMIT_WAIT_SECONDS)
            self._inflight += 1
        claimed = prepared.claimed
        key = (claimed.schema, str(claimed.run_id), claimed.attempt)
        self.heartbeats.track_callback(*key, lambda: self._cancel_soon(key))
        self._loop.call_soon_threadsafe(self._start, key, prepared, started)

    def inflight(self) -> int:
        return self._inflight

    def drain(self, timeout: float) -> bool:
        """Wait (bounded) until every call has ended and been recorded; True if so."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._inflight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    # --- the loop's side ---------------------------------------------------------------

    def _ensure_started(self) -> None:
        # Per process: a prefork child starts its own loop (threads do not survive fork).
        if self._owner_pid == os.getpid():
            return
        with self._lock:
            if self._owner_pid == os.getpid():
                return
            self.cap = effective_cap(self.asked, raise_open_files_limit())
            if self.cap < self.asked:
                log_event(
                    log,
                    "http_executor.capped",
                    "HTTP executor: %s calls in flight at most (asked %s): the open-files "
                    "limit allows no more",
                    self.cap,
                    self.asked,
                    level=logging.WARNING,
                )
            self._loop = asyncio.new_event_loop()
            self._finishers = ThreadPoolExecutor(
                self._finisher_count, thread_name_prefix="http-finish"
            )
            self._thread = threading.Thread(
                target=self._loop.run_forever, name="http-executor", daemon=True
            )
            self._thread.start()
            self._inflight, self._tasks = 0, {}
            self._owner_pid = os.getpid()

    def _start(self, key: Key, prepared: PreparedHttp, started: float) -> None:
        self._tasks[key] = self._loop.create_task(self._call(key, prepared, started))

    def _cancel_soon(self, key: Key) -> None:
        """From the heartbeat thread: the attempt moved on."""
        self._loop.call_soon_threadsafe(self._cancel, key)

    def _cancel(self, key: Key) -> None:
        task = self._tasks.get(key)
        if task is not None:
            task.cancel()

    async def _call(self, key: Key, prepared: PreparedHttp, started: float) -> None:
        with redacting(prepared.secrets):
            try:
                result = await send_async(prepared.call, allow=self._allow())
            except asyncio.CancelledError:
                outcome = Outcome(False, CANCELLED)
            except Exception as exc:  # a bug of ours must still end the attempt
                outcome = http_call_failed(prepared.claimed, exc)
            else:
                http_call_ended(result)
                outcome = http_outcome(result)
        self._tasks.pop(key, None)
        outcome = redacted(outcome, prepared.secrets)
        self._finishers.submit(self._record, key, prepared, outcome, started)

    def _record(self, key: Key, prepared: PreparedHttp, outcome: Outcome, started: float) -> None:
        try:
            self._finish(prepared, outcome, started)
        except Exception:  # unrecorded: the run stays running and is reaped, as a dead worker's
            log_event(
                log,
                "run.finish_failed",
                "run %s: its outcome could not be recorded",
                prepared.claimed.run_id,
                level=logging.ERROR,
                exc_info=True,
                **ids(prepared.claimed),
            )
        finally:
            self.heartbeats.untrack(*key)
            if connection.schema_name != "public":
                connection.set_schema_to_public()
            with self._lock:
                self._inflight -= 1
                self._idle.notify_all()
