"""The I/O-bound execution mode (TICKWORK_HTTP_EXECUTION=async): one asyncio event loop
per worker process holds thousands of HTTP target calls in flight (ADR 0018).

The Celery task takes a slot here (:meth:`HttpExecutor.reserve`), then claims the run and
prepares its call as in the threaded mode (runs.execution), then :meth:`HttpExecutor.submit`
hands it over in that slot and the task returns: the pool slot and the broker consumer are
free again within a few milliseconds, whatever the receiver's pace. Here:

- At most `max_inflight` calls are held (and never more than the process's open-file
  limit allows): `reserve` blocks while the executor is full, BEFORE the claim, so the
  pool stops taking messages, prefetch leaves the rest in the broker for other workers,
  and no claimed run ever waits (unheartbeaten, exposed to a time limit and the reaper).
- Each call is tracked by the process's batched heartbeats (runs/heartbeat.py: one UPDATE
  per schema per interval for all of them). When a heartbeat finds the attempt cancelled,
  reaped or superseded, its call is cancelled on the loop, whenever that lands (before its
  task exists, before its first step, or mid-request): nothing is sent or the request is
  aborted, and its late outcome changes nothing (the finish is conditional on the attempt).
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
RESERVE_WAIT_SECONDS = 5.0  # a full executor is rechecked this often (a dead loop raises)
CANCELLED = "cancelled while in flight: the run was cancelled, reaped or superseded"

Finish = Callable[[PreparedHttp, Outcome, float], object]
Key = tuple[str, str, int]


class _Call:
    """One call handed over; touched on the loop thread only (after `submit`)."""

    __slots__ = ("key", "prepared", "started", "stopped", "task")

    def __init__(self, key: Key, prepared: PreparedHttp, started: float) -> None:
        self.key = key
        self.prepared = prepared
        self.started = started
        self.stopped = False  # a heartbeat found the attempt stopped
        self.task: asyncio.Task | None = None


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
        self._inflight = 0  # slots taken: reserved for a claim, or held by a call
        self.cap = max_inflight

    # --- the worker's side ---------------------------------------------------------------

    def reserve(self) -> None:
        """Take a slot for a run about to be claimed; blocks while `cap` are taken. Called
        before the claim, so that a claimed run never waits for one. Either `submit` the
        claimed run's call in it or `release` it."""
        self._ensure_started()
        with self._lock:
            while self._inflight >= self.cap:
                if not self._thread.is_alive():
                    raise RuntimeError("the HTTP executor's event loop has stopped")
                self._idle.wait(RESERVE_WAIT_SECONDS)
            self._inflight += 1

    def try_reserve(self) -> bool:
        """As :meth:`reserve`, without waiting: False if the executor is full."""
        self._ensure_started()
        with self._lock:
            if self._inflight >= self.cap:
                return False
            self._inflight += 1
            return True

    def release(self) -> None:
        """Give back a reserved slot whose run was not handed over (not claimed, not an
        HTTP target, or refused before its call)."""
        with self._lock:
            self._inflight -= 1
            self._idle.notify_all()

    def submit(self, prepared: PreparedHttp, started: float) -> None:
        """Hand one prepared call over, in the slot `reserve` took for it (never waits)."""
        claimed = prepared.claimed
        call = _Call((claimed.schema, str(claimed.run_id), claimed.attempt), prepared, started)
        self.heartbeats.track_callback(*call.key, lambda: self._cancel_soon(call))
        try:
            self._loop.call_soon_threadsafe(self._start, call)
        except BaseException:  # not handed over: no heartbeat may keep the run looking alive
            self.heartbeats.untrack(*call.key)
            raise

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
            self._inflight = 0
            self._owner_pid = os.getpid()

    def _start(self, call: _Call) -> None:
        if call.stopped:  # stopped before its task existed: nothing is sent
            self._finish_later(call, Outcome(False, CANCELLED))
            return
        call.task = self._loop.create_task(self._send(call.prepared))
        # A callback, not the coroutine's own `except`: a task cancelled before its first
        # step never runs its body, and its slot and heartbeat must still be given back.
        call.task.add_done_callback(lambda task: self._ended(call, task))

    def _cancel_soon(self, call: _Call) -> None:
        """From the heartbeat thread: the attempt moved on."""
        self._loop.call_soon_threadsafe(self._cancel, call)

    def _cancel(self, call: _Call) -> None:
        call.stopped = True  # seen by `_start` if the call has not started yet
        if call.task is not None:
            call.task.cancel()

    async def _send(self, prepared: PreparedHttp) -> Outcome:
        with redacting(prepared.secrets):
            try:
                result = await send_async(prepared.call, allow=self._allow())
            except Exception as exc:  # a bug of ours must still end the attempt
                return http_call_failed(prepared.claimed, exc)
            http_call_ended(result)
            return http_outcome(result)

    def _ended(self, call: _Call, task: asyncio.Task) -> None:
        outcome = Outcome(False, CANCELLED) if task.cancelled() else task.result()
        self._finish_later(call, outcome)

    def _finish_later(self, call: _Call, outcome: Outcome) -> None:
        outcome = redacted(outcome, call.prepared.secrets)
        self._finishers.submit(self._record, call.key, call.prepared, outcome, call.started)

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
