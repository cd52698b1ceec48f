"""The web (gunicorn) and a Celery worker behind a transaction-pooling PgBouncer, with
DB_TRANSACTION_POOLING=1, the scheduler on its own session: two tenants' jobs made through
the API fire once a slot, run once, in their own tenant, while about a dozen client
connections share two server connections."""

from __future__ import annotations

from collections import Counter

import httpx
import psycopg
import pytest
from django.db import connection
from django_tenants.utils import schema_context

from devstack import pgbouncer
from runs.models import Attempt

from ..integration.helpers import runs_of
from .procs import free_port, process_env, scheduler, wait_for, web, worker

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(pgbouncer.unavailable() is not None, reason=str(pgbouncer.unavailable())),
]
ENV = {"SCHEDULER_LEASE_SECONDS": "2", "SCHEDULER_LOOKAHEAD_SECONDS": "5"}


def _pool_figures(bouncer, database: str) -> dict[str, int]:
    """PgBouncer's own count of this database's client and server connections."""
    with psycopg.connect(bouncer.url("pgbouncer"), autocommit=True) as admin:
        cursor = admin.execute("SHOW POOLS")
        columns = [c.name for c in cursor.description]
        for row in cursor.fetchall():
            pool = dict(zip(columns, row, strict=True))
            if pool["database"] == database:
                return {
                    "clients": pool["cl_active"] + pool["cl_waiting"],
                    "servers": pool["sv_active"] + pool["sv_idle"] + pool["sv_used"],
                }
    return {"clients": 0, "servers": 0}


def test_web_and_worker_through_a_transaction_pool(live, redis_client, tmp_path, capsys):
    with pgbouncer.running_pgbouncer(2, *pgbouncer.target_of(connection.settings_dict)) as bouncer:
        database = process_env()["DATABASE_URL"].rsplit("/", 1)[1]
        pooled = {
            "DATABASE_URL": bouncer.url(database),
            "DB_TRANSACTION_POOLING": "1",
            "DB_CONN_MAX_AGE": "60",
            "SCHEDULER_TASK_MODULES": "tests.scenarios.tasks",  # test.tenant_jobs
        }
        port = free_port()
        site = web(tmp_path, port, **pooled)
        procs = [
            site,
            scheduler(tmp_path, "sched", **ENV),
            worker(tmp_path, "w1", "--concurrency", "3", **pooled),
        ]
        try:
            base = f"http://127.0.0.1:{port}/api/v1"
            wait_for(lambda: _answers(f"{base}/jobs", live["alpha"]), timeout=30, interval=0.2)
            # beta's job gets another id than alpha's (ids count per tenant schema), so that a
            # run recorded in the wrong tenant would name a job that is not the tenant's.
            spare = httpx.post(
                f"{base}/jobs",
                json={
                    "name": "spare",
                    "schedule": None,
                    "target": {"type": "task", "task": "builtin.noop"},
                },
                headers=_headers(live["beta"]),
                timeout=10,
            )
            assert spare.status_code == 201, spare.text
            jobs = {}
            for slug in ("alpha", "beta"):
                world = live[slug]
                response = httpx.post(
                    f"{base}/jobs",
                    json={
                        "name": f"{slug} every second",
                        "schedule": {"interval_seconds": 1},
                        # reads the tenant's jobs through the ORM: the worker's
                        # search_path through the pool decides what it sees
                        "target": {"type": "task", "task": "test.tenant_jobs"},
                    },
                    headers=_headers(world),
                    timeout=10,
                )
                assert response.status_code == 201, response.text
                jobs[slug] = response.json()["id"]
            for slug in ("alpha", "beta"):
                tenant = live[slug].tenant
                wait_for(
                    lambda t=tenant, j=jobs[slug]: (
                        len(runs_of(t, job_id=j, status="succeeded")) >= 8
                    ),
                    timeout=60,
                    interval=0.2,
                )
            figures = _pool_figures(bouncer, database)
            # Each tenant's API lists its own job only, through the same two server connections.
            assert jobs["alpha"] != jobs["beta"]
            for slug in ("alpha", "beta"):
                listed = httpx.get(f"{base}/jobs", headers=_headers(live[slug]), timeout=10)
                names = {job["name"] for job in listed.json()["results"]}
                assert names == (
                    {"alpha every second"} if slug == "alpha" else {"spare", "beta every second"}
                )
        finally:
            for proc in procs:
                proc.stop()
        seen = {"alpha": ["alpha every second"], "beta": ["beta every second", "spare"]}
        for slug in ("alpha", "beta"):
            runs = runs_of(live[slug].tenant)
            assert {run.job_id for run in runs} == {jobs[slug]}  # nothing of the other's
            slots = Counter(run.scheduled_for for run in runs)
            assert max(slots.values()) == 1  # every slot once
            succeeded = [run for run in runs if run.status == "succeeded"]
            assert all(run.attempt == 1 for run in succeeded)  # each ran once
            with schema_context(live[slug].schema):
                outputs = set(
                    Attempt.objects.filter(run__in=succeeded).values_list("output", flat=True)
                )
            # every run read its own tenant's jobs, never the other's
            assert outputs == {repr(seen[slug])}, outputs
        assert "Traceback" not in procs[2].log()
        with capsys.disabled():
            print(
                f"\n[pgbouncer] client connections {figures['clients']}, "
                f"server connections {figures['servers']} (pool size {bouncer.pool_size})"
            )
        assert figures["servers"] <= bouncer.pool_size < figures["clients"]


def _headers(world) -> dict[str, str]:
    return {"Host": world.domain, "Authorization": f"Bearer {world.token}"}


def _answers(url: str, world) -> bool:
    try:
        return httpx.get(url, headers=_headers(world), timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
