"""A real scheduler and a prefork Celery worker with two pool children, in multiprocess
mode: the worker host's /metrics (WORKER_METRICS_BIND) adds up both children, and the
worker's JSON log lines carry each run's event and ids."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest
from django_tenants.utils import schema_context
from prometheus_client.parser import text_string_to_metric_families

from core.clock import SystemClock
from runs.models import Attempt
from runs.services import job_trigger

from ..integration.helpers import ACTOR, make_job, runs_of
from .procs import scheduler, wait_for, worker

pytestmark = pytest.mark.slow
RUNS = 8


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _scrape(url: str, token: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_prefork_children_add_up_on_the_worker_hosts_metrics(live, redis_client, tmp_path):
    alpha = live["alpha"].tenant
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    port = _free_port()
    env = {
        "SCHEDULER_LEASE_SECONDS": "2",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "METRICS_TOKEN": "worker-host-token",
        "LOG_FORMAT": "json",
    }
    job = make_job(
        alpha,
        SystemClock(),
        schedule=None,
        target={"type": "task", "task": "builtin.sleep"},
        payload={"seconds": 0.4},
    )
    procs = [
        scheduler(tmp_path, "sched", **env),
        worker(tmp_path, "w1", "-c", "2", WORKER_METRICS_BIND=f"127.0.0.1:{port}", **env),
    ]
    try:
        with schema_context(alpha.schema_name):
            runs = [
                job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=SystemClock())[0]
                for _ in range(RUNS)
            ]
        wait_for(lambda: len(runs_of(alpha, status="succeeded")) == RUNS, timeout=60)
        with pytest.raises(urllib.error.HTTPError) as refused:
            _scrape(f"http://127.0.0.1:{port}/metrics", "wrong")
        assert refused.value.code == 401
        samples = _scrape(f"http://127.0.0.1:{port}/metrics", "worker-host-token")
    finally:
        for proc in procs:
            proc.stop()
    with schema_context(alpha.schema_name):
        workers = set(Attempt.objects.filter(run__in=runs).values_list("worker", flat=True))
    assert len(workers) == 2  # both pool children ran some of the runs
    key = (
        "tickwork_runs_finished_total",
        frozenset({("tenant", "alpha"), ("status", "succeeded")}),
    )
    assert samples[key] == RUNS  # the two children's counts, added up
    assert samples[
        ("tickwork_attempt_duration_seconds_count", frozenset({("target", "task")}))
    ] == (RUNS)
    pids = {p.stem.rsplit("_", 1)[1] for p in metrics_dir.glob("counter_*.db")}
    assert {w.rsplit(":", 1)[1] for w in workers} <= pids

    events = [json.loads(line) for line in procs[1].log().splitlines() if line.startswith("{")]
    succeeded = [e for e in events if e.get("event") == "run.succeeded"]
    assert {e["run_id"] for e in succeeded} == {str(r.id) for r in runs}
    assert all(e["tenant"] == "alpha" and e["attempt"] == 1 for e in succeeded)
    assert all(e["job_id"] == job.id and e["level"] == "INFO" for e in succeeded)
    leader = [json.loads(line) for line in procs[0].log().splitlines() if line.startswith("{")]
    assert "leader.lease_taken" in {e.get("event") for e in leader}
