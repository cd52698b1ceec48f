"""The portal's alerts page: the tenant's channels (never a header value), open incidents
and the latest notifications; another tenant's are not on it."""

from __future__ import annotations

from django_tenants.utils import schema_context

from alerts import states
from alerts.channels import channel_create
from alerts.models import Incident, Notification
from core.clock import SystemClock

from ..integration.helpers import make_job
from .test_views import login

CLOCK = SystemClock()


def test_the_alerts_page_lists_channels_incidents_and_notifications(live):
    alpha, beta = live["alpha"], live["beta"]
    job = make_job(alpha.tenant, CLOCK, name="nightly-report", schedule=None)
    now = CLOCK.now()
    with schema_context(alpha.schema):
        channel = channel_create(
            data={
                "name": "on-call hook",
                "kind": "webhook",
                "url": "https://hooks.example.com/tw",
                "headers": {"Authorization": "Bearer never-shown-value"},
                "failure_threshold": 3,
            },
            clock=CLOCK,
        )
        incident = Incident.objects.create(
            channel=channel,
            job=job,
            kind=states.FAILURES,
            trigger_at=now,
            opened_at=now,
            detail="the job's last 3 attempts failed",
        )
        Notification.objects.create(
            incident=incident,
            channel=channel,
            event=states.OPENED,
            payload={},
            state=states.PENDING,
            attempts=1,
            next_attempt_at=now,
            created_at=now,
            last_error="HTTP 503",
        )
    page = login(alpha).get("/alerts/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "on-call hook" in html and "https://hooks.example.com/tw" in html
    assert "Authorization" in html and "never-shown-value" not in html
    assert "the job&#x27;s last 3 attempts failed" in html
    assert "HTTP 503" in html and "nightly-report" in html
    other = login(beta).get("/alerts/").content.decode()
    assert "on-call hook" not in other and "No alert channels yet." in other
