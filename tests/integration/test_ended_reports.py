"""The ended-attempt reports a worker sends from a thread of its own (runs/notify.py):
they reach Redis, a full queue drops instead of growing, a forked process sends its own,
and a Redis that does not answer loses reports without raising into the task."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
from django.test import override_settings

from core.keys import ended_key, wake_key
from runs.notify import ENDED_REPORTER, EndedReporter, notify_run_ended


def _keys(n: int = 0) -> tuple[str, str, str]:
    return (ended_key(n), f"{ended_key(n)}:waiting-probe", wake_key(n))


def test_reports_reach_redis_in_order_once_flushed(redis_client):
    reporter = EndedReporter()
    for n in range(1_200):  # more than one pipelined batch
        reporter.report(_keys(), (f"1:run-{n}:1", 100_000, "release:1:7" if n == 5 else ""))
    assert reporter.flush(10)
    ended = redis_client.lrange(ended_key(0), 0, -1)
    assert ended == [f"1:run-{n}:1".encode() for n in range(1_200)]
    assert redis_client.lrange(wake_key(0), 0, -1) == [b"release:1:7"]


def test_a_full_queue_drops_reports_rather_than_holding_them(redis_client):
    sending = threading.Event()
    unblock = threading.Event()

    class Stalled(EndedReporter):
        def _send(self, batch):
            sending.set()
            unblock.wait(10)
            super()._send(batch)

    reporter = Stalled(capacity=3)
    reporter.report(_keys(), ("1:first:1", 100, ""))
    assert sending.wait(5)  # the thread holds the first report, the queue is empty
    for n in range(5):
        reporter.report(_keys(), (f"1:later-{n}:1", 100, ""))
    assert reporter.dropped == 2
    unblock.set()
    assert reporter.flush(10)
    assert redis_client.llen(ended_key(0)) == 4


def _report_in_child(queue) -> None:
    notify_run_ended_keys = _keys()
    ENDED_REPORTER.report(notify_run_ended_keys, ("1:from-child:1", 100, ""))
    queue.put(ENDED_REPORTER.flush(10))


def test_a_forked_process_sends_its_own_reports(redis_client):
    ENDED_REPORTER.report(_keys(), ("1:from-parent:1", 100, ""))  # the parent's thread runs
    assert ENDED_REPORTER.flush(5)
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_report_in_child, args=(results,))
    child.start()
    child.join(20)
    assert child.exitcode == 0 and results.get(timeout=5) is True
    assert redis_client.lrange(ended_key(0), 0, -1) == [b"1:from-parent:1", b"1:from-child:1"]


@pytest.mark.django_db
def test_with_redis_not_answering_a_report_is_lost_quietly(redis_client, world):
    schema = next(iter(world.values())).schema
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        reporter = EndedReporter()
        reporter.report(_keys(), ("1:lost:1", 100, ""))
        assert reporter.flush(10)  # sent and refused, not stuck
        notify_run_ended(schema, 1, "queue", "run-lost", 1)  # the task's call returns
        assert ENDED_REPORTER.flush(10)
    # Given up on, not kept for later: with Redis back, nothing of them arrives.
    assert ENDED_REPORTER.flush(10) and reporter.flush(10)
    assert redis_client.llen(ended_key(0)) == 0 and redis_client.llen(wake_key(0)) == 0


def test_a_batch_that_raises_does_not_end_the_thread(redis_client):
    class Faulty(EndedReporter):
        failures = 1

        def _send(self, batch):
            if self.failures:
                self.failures -= 1
                raise ValueError("not a Redis error")
            super()._send(batch)

    reporter = Faulty()
    reporter.report(_keys(), ("1:lost-to-a-bug:1", 100, ""))
    assert reporter.flush(10)  # the flush is answered although its batch failed
    reporter.report(_keys(), ("1:after:1", 100, ""))
    assert reporter.flush(10)
    assert redis_client.lrange(ended_key(0), 0, -1) == [b"1:after:1"]


def test_a_worker_shutdown_flushes_the_reports(monkeypatch):
    from celery.signals import worker_process_shutdown, worker_shutdown

    flushed: list[float] = []
    monkeypatch.setattr(ENDED_REPORTER, "flush", flushed.append)
    worker_process_shutdown.send(sender=None, pid=0, exitcode=0)
    worker_shutdown.send(sender=None)
    assert len(flushed) == 2 and all(timeout > 0 for timeout in flushed)


def test_reports_made_within_the_linger_go_in_one_batch(redis_client):
    batches: list[int] = []

    class Counting(EndedReporter):
        def _send(self, batch):
            batches.append(len(batch))
            super()._send(batch)

    # Reports 50 ms apart, as tasks end (without a linger the thread, idle between them,
    # sends each alone), within a linger far longer than they take.
    reporter = Counting(linger=1.0)
    for n in range(5):
        reporter.report(_keys(), (f"1:run-{n}:1", 100, ""))
        threading.Event().wait(0.05)
    assert reporter.flush(10)
    assert batches == [5]
    assert redis_client.llen(ended_key(0)) == 5


def test_a_flush_with_nothing_queued_is_answered_without_the_linger(redis_client):
    reporter = EndedReporter(linger=1.0)
    reporter.report(_keys(), ("1:first:1", 100, ""))
    assert reporter.flush(10)  # the first batch waited its linger
    assert reporter.flush(0.5)  # nothing queued: no linger for a flush alone
