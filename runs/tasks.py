"""Celery tasks: thin wrappers that call runs.execution with the tenant schema they carry."""

from __future__ import annotations

import socket

from celery import shared_task
from django.conf import settings
from django.db import connection

from core.clock import SystemClock

from .execution import run_execute
from .heartbeat import Heartbeats

WORKER = socket.gethostname()
CLOCK = SystemClock()
HEARTBEATS = Heartbeats(settings.SCHEDULER_HEARTBEAT_SECONDS)


@shared_task(
    name="runs.execute_run", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def execute_run(schema: str, run_id: str, attempt: int) -> str:
    try:
        return run_execute(
            schema=schema,
            run_id=run_id,
            attempt=attempt,
            worker=WORKER,
            clock=CLOCK,
            heartbeats=HEARTBEATS,
        )
    finally:
        # A reused connection must never carry a tenant's search_path into the next task.
        if connection.schema_name != "public":
            connection.set_schema_to_public()
