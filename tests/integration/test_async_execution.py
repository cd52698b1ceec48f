"""The I/O-bound execution mode (TICKWORK_HTTP_EXECUTION=async), in-process against real
PostgreSQL and Redis and a real local HTTP receiver that holds requests: the run is
claimed by `run_execute`, handed to the asyncio executor, and finished by its finisher
threads. Cancellation, heartbeats, the visibility timeout and the SSRF guard must hold
exactly as in the threaded mode."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest
from django.db import connection
from django.test import override_settings
from django_tenants.utils import schema_context

from bench.slow_receiver import Counts, serve
from core.clock import FakeClock
from core.ssrf import parse_allow_networks
from runs import states
from runs.execution import complete_run, run_execute
from runs.heartbeat import Heartbeats
from runs.http_executor import HttpExecutor, effective_cap
from runs.models import Attempt, Run
from runs.services import job_trigger, run_cancel

from .helpers import ACTOR, make_job, new_engine, utc

START = utc(2026, 6, 1, 12, 0, 0)
ALLOW_LOCAL = override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"])
LOOPBACK = parse_allow_networks("127.0.0.0/8")


@pytest.fixture
def slow_receiver():
    """The benchmark's slow receiver on its own event loop thread."""
    counts = Counts(keep_heads=True)
    loop = asyncio.new_event_loop()
    started = asyncio.Event()
    port_box: dict[str, int] = {}

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port_box["port"] = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with contextlib.suppress(asyncio.CancelledError):
            await serve("127.0.0.1", port_box["port"], counts, started)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not started.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    counts.base = f"http://127.0.0.1:{port_box['port']}"
    yield counts
    for task in asyncio.all_tasks(loop):
        loop.call_soon_threadsafe(task.cancel)


def _executor(
    clock, *, beat_seconds: float = 0.05, allow=LOOPBACK, max_inflight=100, heartbeats=None
):
    beats = heartbeats if heartbeats is not None else Heartbeats(beat_seconds)

    def finish(prepared, outcome, started):
        try:
            return complete_run(prepared.claimed, outcome, clock, started)
        finally:
            connection.close()

    executor = HttpExecutor(
        max_inflight=max_inflight, heartbeats=beats, finish=finish, allow=lambda: allow
    )
    return executor, beats


def _http_run(alpha, clock, url: str, **extra) -> Run:
    job = make_job(
        alpha,
        clock,
        name=f"http-{time.monotonic_ns()}",
        schedule=None,
        payload={"report": "daily"},
        target={"type": "http", "url": url, "method": "POST"},
        **extra,
    )
    with schema_context(alpha.schema_name):
        run, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
    return run


def _hand_off(alpha, run, clock, executor, beats, attempt: int = 1) -> str:
    with schema_context(alpha.schema_name):
        return run_execute(
            schema=alpha.schema_name,
            run_id=str(run.id),
            attempt=attempt,
            worker="w-async",
            clock=clock,
            heartbeats=beats,
            http_executor=executor,
        )


def _run(alpha, run_id) -> Run:
    with schema_context(alpha.schema_name):
        return Run.objects.get(pk=run_id)


def _attempts(alpha, run_id) -> list[tuple[int, str, str]]:
    with schema_context(alpha.schema_name):
        return list(Attempt.objects.filter(run_id=run_id).values_list("number", "outcome", "error"))


def _until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


@ALLOW_LOCAL
def test_http_run_is_handed_off_and_finished_with_the_scheduler_headers(
    live, redis_client, slow_receiver
):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _http_run(alpha, clock, f"{slow_receiver.base}/hold/0.2")
    executor, beats = _executor(clock)
    assert _hand_off(alpha, run, clock, executor, beats) == "handed-off"
    assert executor.drain(10)
    beats.stop()
    assert _run(alpha, run.id).status == states.SUCCEEDED
    [head] = slow_receiver.heads
    assert head["Idempotency-Key"] == str(run.id)
    assert head["webhook-id"] == str(run.id) and head["webhook-signature"].startswith("v1,")
    assert head[":body"] == b'{"report":"daily"}'
    assert beats.tracked() == 0


@ALLOW_LOCAL
def test_failed_http_call_is_retried_by_the_policy(live, redis_client, slow_receiver):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _http_run(
        alpha,
        clock,
        f"{slow_receiver.base}/status/503",
        retry={"max_attempts": 2, "backoff_seconds": 0},
    )
    executor, beats = _executor(clock)
    assert _hand_off(alpha, run, clock, executor, beats) == "handed-off"
    assert executor.drain(10)
    beats.stop()
    retrying = _run(alpha, run.id)
    assert (retrying.status, retrying.attempt) == (states.RETRYING, 2)
    assert _attempts(alpha, run.id) == [(1, "failed", "HTTP 503")]


@ALLOW_LOCAL
def test_timeout_bounds_a_request_the_receiver_holds(live, redis_client, slow_receiver):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _http_run(
        alpha, clock, f"{slow_receiver.base}/hold/30", timeout_seconds=1, retry={"max_attempts": 1}
    )
    executor, beats = _executor(clock)
    started = time.monotonic()
    _hand_off(alpha, run, clock, executor, beats)
    assert executor.drain(10)
    beats.stop()
    assert time.monotonic() - started < 5
    assert _run(alpha, run.id).status == states.DEAD
    assert _attempts(alpha, run.id) == [(1, "failed", "timed out after 1.0s")]


@ALLOW_LOCAL
def test_cancel_mid_request_aborts_it_and_its_late_result_changes_nothing(
    live, redis_client, slow_receiver
):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _http_run(alpha, clock, f"{slow_receiver.base}/hold/30")
    executor, beats = _executor(clock, beat_seconds=0.05)
    _hand_off(alpha, run, clock, executor, beats)
    assert _until(lambda: slow_receiver.live == 1)
    with schema_context(alpha.schema_name):
        run_cancel(tenant=alpha, actor=ACTOR, run_id=run.id, clock=clock)
    started = time.monotonic()
    assert executor.drain(10)  # stopped at the next heartbeat, far before 30 s
    beats.stop()
    assert time.monotonic() - started < 5
    assert _until(lambda: slow_receiver.aborted == 1)  # the connection was dropped
    assert _run(alpha, run.id).status == states.CANCELLED
    assert [a[:2] for a in _attempts(alpha, run.id)] == [(1, "cancelled")]


@ALLOW_LOCAL
def test_heartbeats_keep_a_long_request_from_being_reaped(live, redis_client, slow_receiver):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _http_run(alpha, clock, f"{slow_receiver.base}/hold/3")
    executor, beats = _executor(clock, beat_seconds=0.2)
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=1)
    _hand_off(alpha, run, clock, executor, beats)
    reaped = 0
    while executor.inflight():  # the request outlives the visibility timeout threefold
        reaped += engine.reap(force=True)
        time.sleep(0.25)
    beats.stop()
    assert reaped == 0
    assert _run(alpha, run.id).status == states.SUCCEEDED


@ALLOW_LOCAL
def test_request_whose_heartbeats_stopped_is_reaped_then_aborted(live, redis_client, slow_receiver):
    """The race: the worker still holds the request when the reaper declares it lost; the
    next heartbeat must abort it, and its late result must not overwrite the retry."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _http_run(
        alpha,
        clock,
        f"{slow_receiver.base}/hold/30",
        retry={"max_attempts": 2, "backoff_seconds": 0},
    )
    executor, beats = _executor(clock, beat_seconds=3600)  # a worker whose beats stopped
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=1)
    _hand_off(alpha, run, clock, executor, beats)
    assert _until(lambda: slow_receiver.live == 1)
    time.sleep(1.2)
    assert engine.reap(force=True) == 1
    assert beats.beat_once() == 1  # the attempt moved on: its request is cancelled
    assert executor.drain(5)
    beats.stop()
    assert _until(lambda: slow_receiver.aborted == 1)
    retried = _run(alpha, run.id)
    assert (retried.status, retried.attempt) == (states.RETRYING, 2)
    assert [a[:2] for a in _attempts(alpha, run.id)] == [(1, "lost")]


@ALLOW_LOCAL
def test_ssrf_guard_refuses_a_redirect_to_a_metadata_address(live, redis_client, slow_receiver):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _http_run(
        alpha, clock, f"{slow_receiver.base}/redirect?to=http://169.254.169.254/latest/meta-data"
    )
    executor, beats = _executor(clock)
    _hand_off(alpha, run, clock, executor, beats)
    assert executor.drain(10)
    beats.stop()
    dead = _run(alpha, run.id)
    assert dead.status == states.DEAD  # refused: permanent, never retried
    assert "refused destination" in dead.error and "metadata" in dead.error
    assert len(slow_receiver.heads) == 1  # only the first hop was sent


@ALLOW_LOCAL
def test_ssrf_guard_refuses_what_the_operator_did_not_allow(live, redis_client, slow_receiver):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _http_run(alpha, clock, f"{slow_receiver.base}/hold/0")
    executor, beats = _executor(clock, allow=())  # the allow-list changed since the save
    _hand_off(alpha, run, clock, executor, beats)
    assert executor.drain(10)
    beats.stop()
    dead = _run(alpha, run.id)
    assert dead.status == states.DEAD and "loopback" in dead.error
    assert slow_receiver.heads == []  # nothing was sent


@ALLOW_LOCAL
def test_full_executor_makes_the_worker_wait(live, redis_client, slow_receiver):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    runs = [_http_run(alpha, clock, f"{slow_receiver.base}/hold/1") for _ in range(3)]
    executor, beats = _executor(clock, max_inflight=2)
    started = time.monotonic()
    for run in runs:
        _hand_off(alpha, run, clock, executor, beats)
    waited = time.monotonic() - started
    assert executor.drain(10)
    beats.stop()
    assert waited >= 0.8  # the third waited for a slot
    assert slow_receiver.peak == 2
    assert {_run(alpha, r.id).status for r in runs} == {states.SUCCEEDED}


def test_cap_never_exceeds_the_open_files_limit():
    assert effective_cap(50_000, 20_000) == 19_800
    assert effective_cap(1000, 20_000) == 1000
    assert effective_cap(1000, 100) == 1
