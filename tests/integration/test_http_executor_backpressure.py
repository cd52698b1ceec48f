"""The asyncio executor when it is full, and cancels that land early (ADR 0018), against
real PostgreSQL and Redis and a real local receiver: a run waiting for a slot must stay
unclaimed (no claimed run without heartbeats, no time limit that loses it, no reaper
retry racing a late send), and a cancel must end a call whenever it lands, giving its slot
and heartbeat back."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import pytest
from billiard.pool import soft_timeout_sighandler
from celery.exceptions import Reject
from django.db import connection
from django_tenants.utils import schema_context

from core.clock import FakeClock
from runs import states, tasks
from runs.heartbeat import Heartbeats
from runs.services import job_trigger, run_cancel

from .helpers import ACTOR, make_job, new_engine
from .test_async_execution import (
    ALLOW_LOCAL,
    START,
    _attempts,
    _executor,
    _hand_off,
    _http_run,
    _run,
    _until,
    slow_receiver,  # noqa: F401  (the fixture)
)


@pytest.fixture
def receiver(slow_receiver):  # noqa: F811  (the fixture imported above)
    return slow_receiver


def _held(alpha, clock, receiver, seconds: float):
    """An executor of one slot, taken by a call the receiver holds `seconds`."""
    executor, beats = _executor(clock, max_inflight=1)
    holder = _http_run(alpha, clock, f"{receiver.base}/hold/{seconds}")
    assert _hand_off(alpha, holder, clock, executor, beats) == "handed-off"
    assert _until(lambda: receiver.live == 1)
    return executor, beats, holder


def _in_thread(work: Callable[[], object]) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = work()
        finally:
            connection.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def _sent_for(receiver, run) -> int:
    return sum(1 for head in receiver.heads if head.get("Idempotency-Key") == str(run.id))


@ALLOW_LOCAL
def test_a_run_waiting_for_a_slot_stays_unclaimed_through_the_visibility_timeout(
    live, redis_client, receiver
):
    """Claimed before its wait, the run had no heartbeat: the reaper declared it lost (with
    one attempt: dead) while this worker then sent it all the same."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    executor, beats, holder = _held(alpha, clock, receiver, 2.5)
    waiting = _http_run(alpha, clock, f"{receiver.base}/hold/0", retry={"max_attempts": 1})
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=1)
    thread, box = _in_thread(lambda: _hand_off(alpha, waiting, clock, executor, beats))
    time.sleep(1.3)
    assert thread.is_alive()  # still waiting for the slot
    assert _run(alpha, waiting.id).status in states.CLAIMABLE  # not claimed meanwhile
    engine.reap(force=True)  # finds no silent `running` run to declare lost
    thread.join(10)
    assert box["result"] == "handed-off"
    assert executor.drain(10)
    beats.stop()
    done = _run(alpha, waiting.id)
    assert (done.status, done.attempt) == (states.SUCCEEDED, 1)
    assert [a[:2] for a in _attempts(alpha, waiting.id)] == [(1, "succeeded")]
    assert _sent_for(receiver, waiting) == 1
    assert _run(alpha, holder.id).status == states.SUCCEEDED


@ALLOW_LOCAL
def test_a_soft_time_limit_in_the_slot_wait_requeues_the_delivery(
    live, redis_client, receiver, monkeypatch
):
    """Celery's soft time limit, as billiard delivers it (SIGUSR1 to the pool process, whose
    handler raises), lands while the task waits for a slot: the delivery goes back to the
    broker and the run stays claimable; before, it stayed `running`, never sent."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    executor, beats, _ = _held(alpha, clock, receiver, 2)
    waiting = _http_run(alpha, clock, f"{receiver.base}/hold/0")
    monkeypatch.setattr(tasks, "HTTP_EXECUTOR", executor)
    monkeypatch.setattr(tasks, "HEARTBEATS", beats)
    previous = signal.signal(signal.SIGUSR1, soft_timeout_sighandler)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(Reject) as rejected:
            tasks.execute_run(alpha.schema_name, str(waiting.id), 1)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    assert rejected.value.requeue is True
    assert _run(alpha, waiting.id).status in states.CLAIMABLE
    assert executor.inflight() == 1  # the holder's slot only: the wait took none
    assert _hand_off(alpha, waiting, clock, executor, beats) == "handed-off"  # redelivered
    assert executor.drain(10)
    beats.stop()
    assert _run(alpha, waiting.id).status == states.SUCCEEDED


@ALLOW_LOCAL
def test_a_python_task_does_not_wait_for_a_full_executor(live, redis_client, receiver):
    """A guard of the look before the wait: only an HTTP run waits for an HTTP slot."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    executor, beats, _ = _held(alpha, clock, receiver, 3)
    job = make_job(alpha, clock, name="noop", schedule=None)
    with schema_context(alpha.schema_name):
        run, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
    started = time.monotonic()
    assert _hand_off(alpha, run, clock, executor, beats) == states.SUCCEEDED
    assert time.monotonic() - started < 1.5
    assert executor.drain(10)
    beats.stop()


@ALLOW_LOCAL
def test_a_cancel_before_the_tasks_first_step_frees_the_slot(live, redis_client, receiver):
    """The cancel reaches the loop after the task was created but before its first step: the
    coroutine's body never runs. Its outcome must still be recorded, its slot and heartbeat
    given back, and nothing sent."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    executor, beats = _executor(clock, beat_seconds=3600, max_inflight=1)  # beats by hand
    warm = _http_run(alpha, clock, f"{receiver.base}/hold/0")
    _hand_off(alpha, warm, clock, executor, beats)  # starts the executor's loop
    assert executor.drain(10)
    run = _http_run(alpha, clock, f"{receiver.base}/hold/30")
    gate = threading.Event()
    executor._loop.call_soon_threadsafe(gate.wait, 10)  # the loop busy: callbacks queue up
    assert _hand_off(alpha, run, clock, executor, beats) == "handed-off"
    with schema_context(alpha.schema_name):
        run_cancel(tenant=alpha, actor=ACTOR, run_id=run.id, clock=clock)
    assert beats.beat_once() == 1  # queues the cancel behind the call's start
    gate.set()
    assert executor.drain(5)
    assert beats.tracked() == 0
    beats.stop()
    assert _sent_for(receiver, run) == 0
    assert _run(alpha, run.id).status == states.CANCELLED
    assert [a[:2] for a in _attempts(alpha, run.id)] == [(1, "cancelled")]


class _BeatOnTrack(Heartbeats):
    """A heartbeat thread at its worst moment, made certain: it beats as soon as a call is
    tracked, after `before_beat` (cancelling the run), before the call has started."""

    def __init__(self, before_beat: Callable[[str], object]) -> None:
        super().__init__(3600)
        self.before_beat = before_beat
        self.found_stopped = 0

    def track_callback(self, schema, run_id, attempt, on_stop) -> None:
        super().track_callback(schema, run_id, attempt, on_stop)
        self.before_beat(run_id)
        self.found_stopped += self.beat_once()


@ALLOW_LOCAL
def test_a_cancel_before_the_call_starts_sends_nothing(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)

    def cancel(run_id: str) -> None:
        with schema_context(alpha.schema_name):
            run_cancel(tenant=alpha, actor=ACTOR, run_id=run_id, clock=clock)

    executor, beats = _executor(clock, max_inflight=1, heartbeats=_BeatOnTrack(cancel))
    run = _http_run(alpha, clock, f"{receiver.base}/hold/30")
    assert _hand_off(alpha, run, clock, executor, beats) == "handed-off"
    assert beats.found_stopped == 1
    assert executor.drain(5)  # before: the request went out and was held 30 s
    assert beats.tracked() == 0
    beats.stop()
    assert _sent_for(receiver, run) == 0
    assert _run(alpha, run.id).status == states.CANCELLED
    assert [a[:2] for a in _attempts(alpha, run.id)] == [(1, "cancelled")]
