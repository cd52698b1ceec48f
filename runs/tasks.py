"""Celery tasks: thin wrappers that call runs.execution with the tenant schema they carry."""

from __future__ import annotations

import contextlib
import os
import socket
import time

from celery import shared_task
from celery.exceptions import Reject, SoftTimeLimitExceeded
from celery.signals import worker_process_shutdown, worker_shutdown
from django.conf import settings
from django.db import connection

from core.clock import SystemClock

from . import worker_registry  # noqa: F401  (connects the worker_ready signal)
from .execution import DatabaseUnavailable, complete_run, run_execute
from .heartbeat import Heartbeats
from .http_executor import HttpExecutor
from .targets.http_target import allow_networks

CLOCK = SystemClock()
HEARTBEATS = Heartbeats(settings.SCHEDULER_HEARTBEAT_SECONDS)
REQUEUE_PAUSE_SECONDS = 1.0
DRAIN_SECONDS = 30.0  # at shutdown, calls still in flight after this are reaped later


def http_executor_from_settings() -> HttpExecutor | None:
    if settings.TICKWORK_HTTP_EXECUTION != "async":
        return None
    return HttpExecutor(
        max_inflight=settings.TICKWORK_HTTP_MAX_INFLIGHT,
        heartbeats=HEARTBEATS,
        finish=lambda prepared, outcome, started: complete_run(
            prepared.claimed, outcome, CLOCK, started
        ),
        allow=allow_networks,
    )


HTTP_EXECUTOR = http_executor_from_settings()


@worker_process_shutdown.connect
@worker_shutdown.connect
def _drain_http_executor(**_: object) -> None:
    """A warm shutdown waits for the calls in flight (bounded), as for running tasks."""
    if HTTP_EXECUTOR is not None and HTTP_EXECUTOR.inflight():
        HTTP_EXECUTOR.drain(DRAIN_SECONDS)


def worker_identity() -> str:
    """`host:pid` of the process executing (a prefork pool child, not the parent that
    imported this module): what an attempt's `worker` says."""
    return f"{socket.gethostname()}:{os.getpid()}"


@shared_task(
    name="runs.execute_run", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def execute_run(schema: str, run_id: str, attempt: int) -> str:
    try:
        return run_execute(
            schema=schema,
            run_id=run_id,
            attempt=attempt,
            worker=worker_identity(),
            clock=CLOCK,
            heartbeats=HEARTBEATS,
            http_executor=HTTP_EXECUTOR,
        )
    except DatabaseUnavailable:
        # Nothing was done: the delivery goes back to the broker (after a pause, so that a
        # database outage is not a hot loop) rather than waiting for the reaper. A soft time
        # limit during the pause must not turn it into a failure (acknowledged: lost).
        with contextlib.suppress(SoftTimeLimitExceeded):
            time.sleep(REQUEUE_PAUSE_SECONDS)
        raise Reject("database unavailable: delivery requeued", requeue=True) from None
    except SoftTimeLimitExceeded:
        # Out of time while waiting, unclaimed, for a slot of the full HTTP executor: the
        # delivery goes back to the broker rather than being acknowledged for a run nobody
        # executes. Past a claim, the copy would claim nothing (the claim names the
        # attempt), so requeuing can never execute a run twice.
        raise Reject("time limit before the claim: delivery requeued", requeue=True) from None
    finally:
        # A reused connection must never carry a tenant's search_path into the next task.
        if connection.schema_name != "public":
            connection.set_schema_to_public()
