"""Workers as real processes: killed mid-run, duplicate deliveries, priorities; each on Redis
and on RabbitMQ (`broker_env`)."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from django.conf import settings
from django_tenants.utils import schema_context

from core.clock import SystemClock
from runs.models import Attempt
from runs.services import job_trigger

from ..integration.helpers import ACTOR, make_job, runs_of
from .procs import scheduler, wait_for, worker
from .tasks import EXECUTIONS_KEY

pytestmark = pytest.mark.slow
ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_VISIBILITY_TIMEOUT_SECONDS": "10",
    "SCHEDULER_HEARTBEAT_SECONDS": "0.5",
    "SCHEDULER_TASK_MODULES": "tests.scenarios.tasks",
}


def _trigger(tenant, job, n: int = 1):
    with schema_context(tenant.schema_name):
        return [
            job_trigger(tenant=tenant, actor=ACTOR, job_id=job.id, clock=SystemClock())[0]
            for _ in range(n)
        ]


def test_worker_killed_mid_run_is_reaped_retried_and_finishes(
    live, redis_client, tmp_path, broker_env
):
    """On RabbitMQ the killed worker's connection drops and its unacked message goes at
    once to the other worker: that delivery finds the run `running` and claims nothing."""
    from core.registry import get_task

    assert settings.SCHEDULER_VISIBILITY_TIMEOUT_SECONDS  # the test worker's value is in ENV
    import tests.scenarios.tasks  # noqa: F401  (registers test.record for job validation)

    assert get_task("test.record")
    alpha = live["alpha"].tenant
    job = make_job(
        alpha,
        SystemClock(),
        schedule=None,
        target={"type": "task", "task": "test.record"},
        payload={"seconds": 4},
        retry={"max_attempts": 3, "backoff_seconds": 0},
    )
    env = {**ENV, **broker_env}
    procs = [scheduler(tmp_path, "sched", **env), worker(tmp_path, "w1", "-c", "1", **env)]
    try:
        [run] = _trigger(alpha, job)
        wait_for(lambda: runs_of(alpha, id=run.id, status="running"), timeout=30)
        wait_for(lambda: redis_client.llen(EXECUTIONS_KEY) == 1, timeout=30)  # task started
        procs[1].kill9()  # mid-run: the attempt never reports
        procs.append(worker(tmp_path, "w2", "-c", "1", **env))
        wait_for(lambda: runs_of(alpha, id=run.id, status="succeeded"), timeout=60)
    finally:
        for proc in procs:
            proc.stop()
    with schema_context(alpha.schema_name):
        attempts = list(
            Attempt.objects.filter(run_id=run.id).values_list("number", "outcome", "worker")
        )
    assert [(n, o) for n, o, _ in attempts] == [(1, "lost"), (2, "succeeded")]
    executions = Counter(x.decode() for x in redis_client.lrange(EXECUTIONS_KEY, 0, -1))
    assert executions == {f"{run.id}:1": 1, f"{run.id}:2": 1}  # no attempt ran twice


def test_duplicate_messages_execute_once(live, redis_client, tmp_path, broker_env):
    import tests.scenarios.tasks  # noqa: F401
    from beat.amqp_writes import leader_writes
    from core.broker import queue_depths

    alpha = live["alpha"].tenant
    job = make_job(
        alpha, SystemClock(), schedule=None, target={"type": "task", "task": "test.record"}
    )
    procs = [worker(tmp_path, "w1", "-c", "2", **ENV, **broker_env)]
    try:
        runs = _trigger(alpha, job, 5)
        from beat.messages import build_message

        publish = leader_writes(redis_client, "", None)  # Redis lists or RabbitMQ
        for run in runs:  # every message delivered three times
            message = build_message(
                task_name="runs.execute_run",
                task_id=str(run.id),
                args=[alpha.schema_name, str(run.id), 1],
                queue="runs.normal.0",
                origin="test",
            )
            publish.push_messages([("runs.normal.0", message)] * 3)
        wait_for(lambda: len(runs_of(alpha, status="succeeded")) == 5, timeout=60)
        wait_for(lambda: sum(queue_depths(redis_client).values()) == 0, timeout=10)
        time.sleep(1)  # let every duplicate be consumed
    finally:
        for proc in procs:
            proc.stop()
    executions = Counter(x.decode() for x in redis_client.lrange(EXECUTIONS_KEY, 0, -1))
    assert executions == {f"{r.id}:1": 1 for r in runs}
    assert sum(queue_depths(redis_client).values()) == 0


def test_worker_without_queues_takes_high_before_low(live, redis_client, tmp_path, broker_env):
    """On RabbitMQ priority holds within a shard's priority queue (ADR 0019): the two jobs
    share a shard here."""
    import tests.scenarios.tasks  # noqa: F401
    from beat.messages import queue_for

    alpha = live["alpha"].tenant
    clock = SystemClock()
    low = make_job(
        alpha,
        clock,
        name="low",
        schedule=None,
        priority="low",
        target={"type": "task", "task": "test.record"},
    )

    def shard(job) -> str:
        return queue_for("x", f"{alpha.id}:{job.id}", settings.SCHEDULER_SHARD_COUNT)[-1]

    for i in range(32):
        high = make_job(
            alpha,
            clock,
            name=f"high{i}",
            schedule=None,
            priority="high",
            target={"type": "task", "task": "test.record"},
        )
        if shard(high) == shard(low):
            break
    assert shard(high) == shard(low)
    env = {**ENV, **broker_env}
    sched = scheduler(tmp_path, "sched", **env)
    try:
        low_runs = _trigger(alpha, low, 4)
        high_runs = _trigger(alpha, high, 4)
        wait_for(lambda: len(runs_of(alpha, status="queued")) == 8, timeout=30)
    finally:
        sched.stop()
    procs = [worker(tmp_path, "w1", "-c", "1", **env)]
    try:
        wait_for(lambda: len(runs_of(alpha, status="succeeded")) == 8, timeout=60)
    finally:
        for proc in procs:
            proc.stop()
    order = [x.decode().split(":")[0] for x in redis_client.lrange(EXECUTIONS_KEY, 0, -1)]
    assert set(order[:4]) == {str(r.id) for r in high_runs}
    assert set(order[4:]) == {str(r.id) for r in low_runs}


def test_task_over_its_timeout_is_stopped_and_follows_the_retry_policy(
    live, redis_client, tmp_path
):
    """The per-job timeout reaches a prefork worker as Celery's soft time limit."""
    alpha = live["alpha"].tenant
    job = make_job(
        alpha,
        SystemClock(),
        schedule=None,
        timeout_seconds=1,
        target={"type": "task", "task": "builtin.sleep"},
        payload={"seconds": 30},
        retry={"max_attempts": 1},
    )
    procs = [scheduler(tmp_path, "sched", **ENV), worker(tmp_path, "w1", "-c", "1", **ENV)]
    try:
        [run] = _trigger(alpha, job)
        wait_for(lambda: runs_of(alpha, id=run.id, status="dead"), timeout=40)
    finally:
        for proc in procs:
            proc.stop()
    [dead] = runs_of(alpha, id=run.id)
    assert "SoftTimeLimitExceeded" in dead.error
    assert (dead.finished_at - dead.started_at).total_seconds() < 10  # not the 30 s asked
