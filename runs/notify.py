"""Tell the leader about runs that need it: retries waiting in the runs index, and jobs
whose held (`queue` policy) runs may now go."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import threading
import time
from datetime import datetime
from typing import Any

from celery.signals import worker_process_shutdown, worker_shutdown
from django.db import connection, transaction

from core import index
from core.keys import admission_waiting_key, ended_key, tenant_partition, wake_key
from core.redis import REDIS_ERRORS, get_redis, pipeline_eval
from jobs.indexing import best_effort

log = logging.getLogger("runs.notify")

_TENANT_IDS: dict[str, int] = {}


def tenant_id_for(schema: str) -> int:
    if schema not in _TENANT_IDS:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM public.tenants_tenant WHERE schema_name = %s", [schema])
            _TENANT_IDS[schema] = cursor.fetchone()[0]
    return _TENANT_IDS[schema]


def enqueue_retry_on_commit(schema: str, run_id: Any, due_at: datetime) -> None:
    tenant_id = tenant_id_for(schema)

    def push() -> None:
        try:
            client = get_redis()
            pipe = client.pipeline(transaction=False)
            index.put_runs(pipe, [(tenant_id, run_id, due_at)])
            pipe.execute()
            index.wake(client, "run", partitions=[tenant_partition(tenant_id)])
        except REDIS_ERRORS:
            pass  # the relay finds the retry in PostgreSQL once it is overdue

    transaction.on_commit(push)


def enqueue_runs_on_commit(tenant_id: int, runs: list) -> None:
    """Runs admitted on their own (manual, backfill, replay, dependency) go to the runs
    index once the transaction that created them commits; if Redis does not answer, the
    leader's relay finds them in PostgreSQL."""
    entries = [(tenant_id, run.id, run.due_at) for run in runs]

    def push() -> None:
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        index.put_runs(pipe, entries)
        index.wake_tenant(pipe, tenant_id, "run")
        pipe.execute()

    transaction.on_commit(lambda: best_effort(push))


# One round trip per ended attempt: record it for the leader's in-flight count (the list
# capped, since with no leader reading it a recount replaces what it would have said),
# wake the leader when runs wait for admission (unless wake-ups already wait: a busy
# leader drains them only when it sleeps), and release a `queue` job's held runs.
_ENDED_SCRIPT = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
local woken = 0
if ARGV[3] ~= '' then
    redis.call('RPUSH', KEYS[3], ARGV[3])
    woken = 1
end
if redis.call('EXISTS', KEYS[2]) == 1 and redis.call('LLEN', KEYS[3]) < 16 then
    redis.call('RPUSH', KEYS[3], 'admit')
    woken = 1
end
return woken
"""
ENDED_LIST_CAP = 100_000


class EndedReporter:
    """Sends the ended-attempt reports from a thread of their own, pipelined, so that a
    worker's task does not wait for a Redis round trip after its finish has committed
    (about a fifth of a no-op task's bookkeeping, docs/benchmarks.md).

    A report is the same best effort as before: one that a killed process never sent, or
    that Redis refused, is made good by the leader's recount and relay. The queue is
    bounded (with Redis down, reports past `capacity` are dropped, not held in memory),
    and a worker's shutdown flushes what is queued, bounded by `flush`'s timeout. One
    thread per process: a prefork child forked from a parent that had one starts its own.

    After the first report of a batch the thread waits `linger` seconds (50 ms) for more,
    unless a full batch is already queued: a slot is freed, and a held run released, up to
    that much later, for one wake-up and one round trip per batch instead of per task."""

    BATCH = 500

    def __init__(self, capacity: int = 10_000, linger: float = 0.05) -> None:
        self.capacity = capacity
        self.linger = linger
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._queue: queue.Queue = queue.Queue(capacity)
        self.dropped = 0

    def report(self, keys: tuple[str, str, str], args: tuple) -> None:
        try:
            self._live_queue().put_nowait((keys, args))
        except queue.Full:
            self.dropped += 1
            if self.dropped % 1_000 == 1:
                log.warning(
                    "ended-attempt reports dropped (%d so far): Redis is not taking them; the"
                    " leader's recount frees their slots",
                    self.dropped,
                )

    def flush(self, timeout: float) -> bool:
        """Wait until every report queued so far was sent (or given up on); False if
        `timeout` seconds passed first."""
        if self._pid != os.getpid():
            return True  # nothing was reported from this process
        deadline = time.monotonic() + timeout
        done = threading.Event()
        try:
            self._live_queue().put((None, done), timeout=timeout)
        except queue.Full:
            return False
        return done.wait(max(0.0, deadline - time.monotonic()))

    def _live_queue(self) -> queue.Queue:
        pid = os.getpid()
        if self._pid != pid:
            with self._lock:
                if self._pid != pid:
                    # After a fork the parent's thread is gone and its queue's lock may be
                    # held: a new queue and a new thread.
                    self._queue = queue.Queue(self.capacity)
                    thread = threading.Thread(
                        target=self._send_forever,
                        args=(self._queue,),
                        name="ended-reports",
                        daemon=True,
                    )
                    thread.start()
                    self._pid = pid
        return self._queue

    def _send_forever(self, reports: queue.Queue) -> None:
        while True:
            batch = [reports.get()]
            if batch[0][0] is not None and reports.qsize() < self.BATCH:
                # Let the reports of the next tasks gather before sending: a thread woken
                # and a Redis round trip per task took the interpreter lock from the
                # task's own thread at its database replies (docs/benchmarks.md, "Where the
                # time goes, and the end reports batched"). A flush alone goes at once.
                time.sleep(self.linger)
            while len(batch) < self.BATCH:
                try:
                    batch.append(reports.get_nowait())
                except queue.Empty:
                    break
            try:
                self._send([item for item in batch if item[0] is not None])
            except Exception:
                # Never let one bad batch end the thread: every later report would wait
                # in the queue until it filled.
                log.exception("ended-attempt reports not sent (%d)", len(batch))
            finally:
                for keys, done in batch:
                    if keys is None:
                        done.set()

    def _send(self, batch: list) -> None:
        if not batch:
            return
        with contextlib.suppress(*REDIS_ERRORS):
            client = get_redis()
            pipe = client.pipeline(transaction=False)
            for keys, args in batch:
                pipeline_eval(client, pipe, _ENDED_SCRIPT, keys, args)
            pipe.execute(raise_on_error=False)


ENDED_REPORTER = EndedReporter()
FLUSH_SECONDS = 5.0  # at a worker's shutdown, reports still unsent after this are recounted


def notify_run_ended(
    schema: str, job_id: int, concurrency_policy: str, run_id: Any, attempt: int
) -> None:
    """An attempt stopped being in flight (finished, retrying, dead, cancelled): its
    tenant's quota slot is free again, and a `queue`-policy job's held runs may go. Best
    effort, sent by ENDED_REPORTER's thread: if Redis does not answer, the leader's recount
    frees the slot and its relay admits held runs again within their intervals."""
    tenant_id = tenant_id_for(schema)
    release = f"release:{tenant_id}:{job_id}" if concurrency_policy == "queue" else ""
    partition = tenant_partition(tenant_id)  # the three keys share its hash tag
    ENDED_REPORTER.report(
        (ended_key(partition), admission_waiting_key(partition), wake_key(partition)),
        (f"{tenant_id}:{run_id}:{attempt}", ENDED_LIST_CAP, release),
    )


@worker_process_shutdown.connect
@worker_shutdown.connect
def _flush_ended_reports(**_: object) -> None:
    ENDED_REPORTER.flush(FLUSH_SECONDS)


# A web process (a cancel's report) or a solo worker ending normally flushes too; a prefork
# child leaves with os._exit, after the signal above.
atexit.register(ENDED_REPORTER.flush, 2.0)


def notify_finished(claimed) -> None:
    notify_run_ended(
        claimed.schema,
        claimed.job_id,
        claimed.concurrency_policy,
        claimed.run_id,
        claimed.attempt,
    )
