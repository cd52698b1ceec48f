"""Demo jobs for the demo tenant that `make run` creates (development only)."""

from __future__ import annotations

from django_tenants.utils import schema_context

from core.clock import SystemClock
from tenants.models import Tenant

from .models import Job
from .services import Actor, job_create

DEMO_JOBS = [
    {
        "name": "Heartbeat every minute",
        "schedule": {"cron": "* * * * *", "timezone": "UTC"},
        "target": {"type": "task", "task": "builtin.noop"},
    },
    {
        "name": "Nightly report (Berlin)",
        "schedule": {"cron": "30 2 * * *", "timezone": "Europe/Berlin"},
        "target": {"type": "task", "task": "builtin.sleep"},
        "payload": {"seconds": 2},
    },
    {
        "name": "Spread-out hourly sync",
        "schedule": {"cron": "H * * * *", "timezone": "UTC"},
        "target": {"type": "task", "task": "builtin.noop"},
        "priority": "low",
    },
    {
        "name": "Flaky import (fails twice)",
        "schedule": {"cron": "*/5 * * * *"},
        "target": {"type": "task", "task": "builtin.fail"},
        "payload": {"times": 2},
        "retry": {"max_attempts": 3, "backoff_seconds": 5},
    },
]


def ensure_demo_jobs(tenant: Tenant) -> None:
    with schema_context(tenant.schema_name):
        existing = set(Job.objects.values_list("name", flat=True))
        for data in DEMO_JOBS:
            if data["name"] not in existing:
                job_create(tenant=tenant, actor=Actor("system"), data=data, clock=SystemClock())
