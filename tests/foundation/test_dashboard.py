from __future__ import annotations

from django.test import Client
from django_tenants.utils import schema_context

from core.clock import FakeClock
from runs.models import Run

from ..integration.helpers import make_job, utc


def test_dashboard_lists_the_tenants_jobs_and_runs_only(live):
    alpha, beta = live["alpha"], live["beta"]
    clock = FakeClock(utc(2026, 6, 1, 12))
    job = make_job(
        alpha.tenant,
        clock,
        name="nightly-report",
        schedule={"cron": "30 2 * * *", "timezone": "Europe/Berlin"},
    )
    make_job(beta.tenant, clock, name="beta-secret-job", schedule={"cron": "* * * * *"})
    with schema_context(alpha.schema):
        Run.objects.create(
            job=job,
            trigger="manual",
            scheduled_for=utc(2026, 6, 1, 11),
            due_at=utc(2026, 6, 1, 11),
            status="dead",
            error="HTTP 500",
        )
    client = Client(HTTP_HOST=alpha.domain)
    assert (
        client.post(
            "/login/", {"username": alpha.admin_user, "password": alpha.admin_password}
        ).status_code
        == 302
    )
    page = client.get("/").content.decode()
    assert "nightly-report" in page
    assert "At 02:30 (Europe/Berlin)" in page
    assert "HTTP 500" in page and "dead" in page
    assert "beta-secret-job" not in page
