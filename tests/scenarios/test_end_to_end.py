"""A scheduler and a Celery worker process: jobs fire on time and runs reach an end, with
Redis or RabbitMQ as the broker."""

from __future__ import annotations

import time

import pytest
from django_tenants.utils import schema_context

from core.clock import SystemClock
from runs.services import job_trigger

from ..integration.helpers import ACTOR, make_job, runs_of
from .procs import scheduler, wait_for, worker

pytestmark = pytest.mark.slow
ENV = {"SCHEDULER_LEASE_SECONDS": "2", "SCHEDULER_LOOKAHEAD_SECONDS": "5"}


def test_scheduled_retried_and_manual_runs_complete(live, redis_client, tmp_path, broker_env):
    alpha = live["alpha"].tenant
    clock = SystemClock()
    every = make_job(alpha, clock, name="every second", schedule={"interval_seconds": 1})
    flaky = make_job(
        alpha,
        clock,
        name="flaky",
        schedule=None,
        target={"type": "task", "task": "builtin.fail"},
        payload={"times": 1},
        retry={"max_attempts": 3, "backoff_seconds": 1, "jitter": False},
    )
    procs = [
        scheduler(tmp_path, "sched", **ENV, **broker_env),
        worker(tmp_path, "w1", "--concurrency", "2", **broker_env),
    ]
    try:
        with schema_context(alpha.schema_name):
            run, created = job_trigger(tenant=alpha, actor=ACTOR, job_id=flaky.id, clock=clock)
        assert created
        wait_for(lambda: runs_of(alpha, id=run.id, status="succeeded"), timeout=40)
        wait_for(lambda: len(runs_of(alpha, job_id=every.id, status="succeeded")) >= 3, timeout=40)
    finally:
        for proc in procs:
            proc.stop()
    [done] = runs_of(alpha, id=run.id)
    assert done.attempt == 2  # failed once, retried by the leader, then succeeded
    with schema_context(alpha.schema_name):
        outcomes = list(done.attempts.values_list("number", "outcome"))
    assert outcomes == [(1, "failed"), (2, "succeeded")]
    succeeded = runs_of(alpha, job_id=every.id, status="succeeded")
    lags = [(r.started_at - r.scheduled_for).total_seconds() for r in succeeded]
    assert all(lag >= 0 for lag in lags)  # never early
    time.sleep(0)
