"""GET /usage: the tenant's quota use and lag, its own figures only."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from django_tenants.utils import schema_context

from runs import states
from runs.models import Run
from tenants.models import Tenant

from .conftest import Api


def _runs(job_id: int, **fields) -> None:
    Run.objects.create(job_id=job_id, trigger="manual", **fields)


def test_usage_counts_runs_in_flight_waiting_and_lag(live, alpha_api: Api, beta_api: Api):
    alpha = live["alpha"].tenant
    Tenant.objects.filter(id=alpha.id).update(max_concurrency=7, weight=3)
    job = alpha_api.create_job(name="usage")
    now = timezone.now()
    with schema_context(alpha.schema_name):
        for seconds, status in ((40, states.RUNNING), (30, states.QUEUED)):
            due = now - timedelta(seconds=seconds)
            _runs(
                job["id"],
                status=status,
                scheduled_for=due,
                due_at=due,
                queued_at=due + timedelta(seconds=1),
                started_at=due + timedelta(seconds=2) if status == states.RUNNING else None,
            )
        for seconds in (20, 10):  # due, not admitted: waiting
            due = now - timedelta(seconds=seconds)
            _runs(job["id"], status=states.SCHEDULED, scheduled_for=due, due_at=due)
        future = now + timedelta(minutes=5)  # not due yet: not waiting
        _runs(job["id"], status=states.SCHEDULED, scheduled_for=future, due_at=future)
    try:
        body = alpha_api.get("usage").json()
    finally:
        Tenant.objects.filter(id=alpha.id).update(max_concurrency=100, weight=1)
    assert (body["max_concurrency"], body["weight"]) == (7, 3)
    assert body["run_retention_days"] == settings.RUN_RETENTION_DAYS
    assert (body["in_flight"], body["waiting"]) == (2, 2)
    assert 19 <= body["oldest_wait_seconds"] <= 60
    assert body["runs_in_window"] == 2
    assert body["fire_lag"] == {"p50": 1.0, "p99": 1.0}
    assert body["start_lag"] == {"p50": 2.0, "p99": 2.0}
    other = beta_api.get("usage").json()  # another tenant sees its own figures only
    assert (other["in_flight"], other["waiting"], other["runs_in_window"]) == (0, 0, 0)
    assert other["fire_lag"] == {"p50": None, "p99": None}
