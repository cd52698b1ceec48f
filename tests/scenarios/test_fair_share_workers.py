"""A tenant's quota on real processes: a runscheduler and two Celery workers of two
processes each (four slots) for a tenant with max_concurrency 2. A sampler reads
PostgreSQL every few milliseconds: never more than 2 of its runs queued or running at
once, including after a worker is SIGKILLed mid-run, whose run is reaped and retried:
its slot comes back and every run succeeds."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connection
from django_tenants.utils import schema_context

from core.clock import SystemClock
from runs import states
from runs.models import Run
from runs.services import job_trigger
from tenants.models import Tenant

from ..integration.helpers import ACTOR, make_job
from .procs import scheduler, wait_for, worker

pytestmark = pytest.mark.slow
ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_VISIBILITY_TIMEOUT_SECONDS": "10",
    "SCHEDULER_HEARTBEAT_SECONDS": "1",
    "SCHEDULER_INFLIGHT_RECOUNT_SECONDS": "1",
}
RUNS = 10


def _parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class Sampler(threading.Thread):
    """The most runs of the schema in flight (and running) seen at once."""

    def __init__(self, schema: str) -> None:
        super().__init__(daemon=True)
        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("options", None)
        self.conn = psycopg.connect(**params, autocommit=True)
        self.query = (
            f"SELECT count(*) FILTER (WHERE status IN ('queued', 'running')),"
            f" count(*) FILTER (WHERE status = 'running') FROM \"{schema}\".runs_run"
        )
        self.max_in_flight = self.max_running = self.samples = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            in_flight, running = self.conn.execute(self.query).fetchone()
            self.max_in_flight = max(self.max_in_flight, in_flight)
            self.max_running = max(self.max_running, running)
            self.samples += 1
            time.sleep(0.005)
        self.conn.close()


def test_a_tenant_at_max_concurrency_2_never_runs_more_across_two_workers(live, tmp_path):
    alpha = live["alpha"].tenant
    Tenant.objects.filter(id=alpha.id).update(max_concurrency=2)
    clock = SystemClock()
    job = make_job(
        alpha,
        clock,
        name="sleepy",
        schedule=None,
        target={"type": "task", "task": "builtin.sleep"},
        payload={"seconds": 0.6},
        retry={"max_attempts": 3, "backoff_seconds": 1, "jitter": False},
    )
    sampler = Sampler(alpha.schema_name)
    procs = {
        "sched": scheduler(tmp_path, "sched", **ENV),
        "w1": worker(tmp_path, "w1", "-c", "2", **ENV),
        "w2": worker(tmp_path, "w2", "-c", "2", **ENV),
    }
    sampler.start()

    def runs_by_status() -> dict[str, int]:
        with schema_context(alpha.schema_name):
            counts: dict[str, int] = {}
            for status in Run.objects.values_list("status", flat=True):
                counts[status] = counts.get(status, 0) + 1
            return counts

    try:
        with schema_context(alpha.schema_name):
            for _ in range(RUNS):
                job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)

        def worker_running_a_run() -> str | None:
            """The worker whose pool process is executing one of the tenant's runs."""
            with schema_context(alpha.schema_name):
                running = Run.objects.filter(status=states.RUNNING).values_list("worker", flat=True)
                for identity in running:
                    parent = _parent_pid(int(identity.rsplit(":", 1)[1]))
                    for name in ("w1", "w2"):
                        if procs[name].pid == parent:
                            return name
            return None

        victim = wait_for(worker_running_a_run, timeout=60)
        procs[victim].kill9()  # mid-run: its run stays `running` until the reaper takes it
        wait_for(lambda: runs_by_status().get(states.SUCCEEDED, 0) == RUNS, timeout=120)
    finally:
        sampler.stop.set()
        for proc in procs.values():
            proc.stop()
        Tenant.objects.filter(id=alpha.id).update(max_concurrency=100)
    sampler.join(5)
    assert sampler.samples > 100
    assert sampler.max_in_flight == 2, sampler.max_in_flight  # the quota, reached, never passed
    with schema_context(alpha.schema_name):
        retried = Run.objects.filter(attempt__gt=1).count()
    assert retried >= 1, "the killed worker's run was reaped and run again"
