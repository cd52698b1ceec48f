"""Celery tasks: thin wrappers that call runs.execution with the tenant schema they carry."""

from __future__ import annotations

import os
import socket
import time

from celery import shared_task
from celery.exceptions import Reject
from django.conf import settings
from django.db import connection

from core.clock import SystemClock

from . import worker_registry  # noqa: F401  (connects the worker_ready signal)
from .execution import DatabaseUnavailable, run_execute
from .heartbeat import Heartbeats

CLOCK = SystemClock()
HEARTBEATS = Heartbeats(settings.SCHEDULER_HEARTBEAT_SECONDS)
REQUEUE_PAUSE_SECONDS = 1.0


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
        )
    except DatabaseUnavailable:
        # Nothing was done: the delivery goes back to the broker (after a pause, so that a
        # database outage is not a hot loop) rather than waiting for the reaper.
        time.sleep(REQUEUE_PAUSE_SECONDS)
        raise Reject("database unavailable: delivery requeued", requeue=True) from None
    finally:
        # A reused connection must never carry a tenant's search_path into the next task.
        if connection.schema_name != "public":
            connection.set_schema_to_public()
