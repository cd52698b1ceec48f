"""A runscheduler and a Celery worker in the asyncio execution mode
(TICKWORK_HTTP_EXECUTION=async): signed deliveries arrive with the secret header and
nobody logs it; a request held by a slow receiver is aborted when its run is cancelled."""

from __future__ import annotations

import secrets

import pytest
from django.test import override_settings
from django_tenants.utils import schema_context
from standardwebhooks import Webhook

from core.clock import SystemClock
from runs import states
from runs.services import job_trigger, run_cancel
from tenants.signing import signing_secret_rotate

from ..integration.helpers import ACTOR, make_job, runs_of
from ..integration.receiver import Receiver
from ..integration.test_async_execution import slow_receiver  # noqa: F401  (fixture)
from .procs import scheduler, wait_for, worker

pytestmark = pytest.mark.slow
ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_HTTP_ALLOW_NETWORKS": "127.0.0.0/8",
    "SCHEDULER_HEARTBEAT_SECONDS": "0.5",
    "TICKWORK_HTTP_EXECUTION": "async",
    "TICKWORK_HTTP_MAX_INFLIGHT": "100",
    "LOG_LEVEL": "DEBUG",
}


@override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"])  # the local receivers
def test_async_worker_delivers_signed_and_aborts_a_cancelled_request(
    live,
    redis_client,
    tmp_path,
    slow_receiver,  # noqa: F811
):
    from datetime import timedelta

    alpha = live["alpha"].tenant
    clock = SystemClock()
    signing = signing_secret_rotate(tenant=alpha, now=clock.now(), overlap=timedelta(0)).secret
    value = "Bearer async-" + secrets.token_hex(12)
    with Receiver() as receiver:
        hook = make_job(
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
        held = make_job(
            alpha,
            clock,
            name="held",
            schedule=None,
            target={"type": "http", "url": f"{slow_receiver.base}/hold/120"},
        )
        procs = [
            scheduler(tmp_path, "sched", **ENV),
            worker(tmp_path, "w1", "-c", "2", "--loglevel", "DEBUG", **ENV),
        ]
        try:
            with schema_context(alpha.schema_name):
                for _ in range(3):
                    job_trigger(tenant=alpha, actor=ACTOR, job_id=hook.id, clock=clock)
                long_run, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=held.id, clock=clock)
            wait_for(lambda: len(runs_of(alpha, status=states.SUCCEEDED)) == 3, timeout=60)
            wait_for(lambda: slow_receiver.live == 1, timeout=30)
            with schema_context(alpha.schema_name):
                run_cancel(tenant=alpha, actor=ACTOR, run_id=long_run.id, clock=clock)
            wait_for(lambda: slow_receiver.aborted == 1, timeout=15)  # within heartbeats
        finally:
            for proc in procs:
                proc.stop()
        requests = list(receiver.requests)
    assert len(requests) == 3
    for request in requests:
        assert request.headers["Authorization"] == value
        Webhook(signing).verify(request.body, {k.lower(): v for k, v in request.headers.items()})
    [cancelled] = runs_of(alpha, job_id=held.id)
    assert cancelled.status == states.CANCELLED
    logs = "".join(proc.log() for proc in procs)
    assert "runs.execute_run" in logs
    assert value not in logs and value.split(" ")[1] not in logs
