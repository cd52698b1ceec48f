"""A runscheduler and a Celery worker process deliver to a local receiver: the requests
verify against the tenant's signing secret, the secret header arrives, and neither process
logs it (DEBUG logging, their own logging set-up)."""

from __future__ import annotations

import secrets

import pytest
from django.test import override_settings
from django_tenants.utils import schema_context
from standardwebhooks import Webhook

from core.clock import SystemClock
from runs import states
from runs.services import job_trigger
from tenants.signing import signing_secret_rotate

from ..integration.helpers import ACTOR, make_job, runs_of
from ..integration.receiver import Receiver
from .procs import scheduler, wait_for, worker

pytestmark = pytest.mark.slow
ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_HTTP_ALLOW_NETWORKS": "127.0.0.0/8",
    "LOG_LEVEL": "DEBUG",
}


@override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"])  # the local receiver
def test_worker_processes_sign_deliveries_and_never_log_the_secret_header(
    live, redis_client, tmp_path
):
    from datetime import timedelta

    alpha = live["alpha"].tenant
    clock = SystemClock()
    signing = signing_secret_rotate(tenant=alpha, now=clock.now(), overlap=timedelta(0)).secret
    value = "Bearer scenario-" + secrets.token_hex(12)
    with Receiver() as receiver:
        receiver.echo = True
        job = make_job(
            alpha,
            clock,
            name="hook",
            schedule=None,
            target={
                "type": "http",
                "url": receiver.url("/hook"),
                "headers": {"Authorization": {"value": value, "secret": True}},
            },
        )
        procs = [
            scheduler(tmp_path, "sched", **ENV),
            worker(tmp_path, "w1", "-c", "2", "--loglevel", "DEBUG", **ENV),
        ]
        try:
            with schema_context(alpha.schema_name):
                for _ in range(3):
                    job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
            wait_for(lambda: len(runs_of(alpha, status=states.SUCCEEDED)) == 3, timeout=60)
        finally:
            for proc in procs:
                proc.stop()
        requests = list(receiver.requests)
    assert len(requests) == 3
    for request in requests:
        assert request.headers["Authorization"] == value
        Webhook(signing).verify(request.body, {k.lower(): v for k, v in request.headers.items()})
    logs = "".join(proc.log() for proc in procs)
    assert "runs.execute_run" in logs  # the worker's log was written and read
    assert value not in logs and value.split(" ")[1] not in logs
    # The receiver echoed it in a response header, which httpcore logs at DEBUG: masked.
    assert "(b'X-Echo-Authorization', b'[redacted]')" in logs
