"""A real runscheduler with no worker running: the job's runs are fired but nobody runs
them, so the missed-run alert reaches a local receiver, signed, once; a worker started
afterwards runs them, and the resolved message follows, once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django_tenants.utils import schema_context
from standardwebhooks import Webhook

from alerts import states as alert_states
from alerts.channels import channel_create
from alerts.models import Incident, Notification
from core.clock import SystemClock
from tenants.signing import signing_secret_rotate

from ..integration.helpers import make_job
from ..integration.receiver import Receiver
from .procs import scheduler, wait_for, worker

pytestmark = pytest.mark.slow
ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_HTTP_ALLOW_NETWORKS": "127.0.0.0/8",
    "ALERTS_EVALUATE_SECONDS": "0.5",
}


def _bodies(receiver: Receiver, secret: str) -> list[dict]:
    return [
        Webhook(secret).verify(r.body, {k.lower(): v for k, v in r.headers.items()})
        for r in list(receiver.requests)
    ]


def _of(bodies: list[dict], event: str) -> list[dict]:
    return [b for b in bodies if b["type"] == f"alert.{event}"]


@override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"])
def test_the_missed_run_alert_fires_while_no_worker_runs_and_resolves_when_one_does(
    live, redis_client, tmp_path
):
    alpha = live["alpha"].tenant
    clock = SystemClock()
    secret = signing_secret_rotate(tenant=alpha, now=clock.now(), overlap=timedelta(0)).secret
    with Receiver() as receiver:
        job = make_job(alpha, clock, name="heartbeat", schedule={"interval_seconds": 2})
        with schema_context(alpha.schema_name):
            channel_create(
                data={
                    "name": "on-call",
                    "kind": "webhook",
                    "url": receiver.url("/alerts"),
                    "missed_grace_seconds": 2,
                },
                clock=clock,
            )
        procs = [scheduler(tmp_path, "sched", **ENV)]
        try:
            wait_for(lambda: _of(_bodies(receiver, secret), "opened"), timeout=60, interval=0.2)
            procs.append(worker(tmp_path, "w1", "-c", "2", **ENV))
            wait_for(lambda: _of(_bodies(receiver, secret), "resolved"), timeout=90, interval=0.2)
        finally:
            for proc in procs:
                proc.stop()
        bodies = _bodies(receiver, secret)
    [opened] = _of(bodies, "opened")
    assert opened["incident"]["kind"] == alert_states.MISSED
    assert opened["job"] == {"id": job.id, "name": "heartbeat"}
    [resolved] = _of(bodies, "resolved")
    assert resolved["incident"]["id"] == opened["incident"]["id"]
    assert len({b["id"] for b in bodies}) == len(bodies)  # one message per notification
    with schema_context(alpha.schema_name):
        assert Incident.objects.filter(kind=alert_states.MISSED).count() == 1
        assert set(Notification.objects.values_list("state", flat=True)) == {alert_states.SENT}
    log = procs[0].log()
    assert "alert.opened" in log and "alert.delivered" in log
