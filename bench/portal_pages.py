"""Server time and weight of the portal's heaviest pages in one big tenant: the jobs list
(first page, a deep keyset page, a name search, a last-result filter) and a job's page with
its run history (first page, a deep cursor, a status filter), with `jobs` jobs and `runs`
runs bulk-loaded by COPY. Requests go through Django's test client in this process, so the
time is the server's (routing, middleware, queries, templates), without a network."""

from __future__ import annotations

import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.test import Client
from django_tenants.utils import schema_context
from psycopg import sql

from core.sql import table
from tenants.models import Tenant
from tenants.services import tenant_provision

from .world import copy_jobs, job_count, percentile

SLUG = "bench-portal"  # bench- tenants are dropped after the CI run (tests/bench)
PASSWORD = "bench-password"
NOW = datetime.now(UTC).replace(microsecond=0)
RUN_COLUMNS = (
    "id",
    "job_id",
    "trigger",
    "scheduled_for",
    "due_at",
    "status",
    "skip_reason",
    "attempt",
    "queued_at",
    "started_at",
    "finished_at",
    "worker",
    "error",
    "created_at",
)


def _tenant() -> Tenant:
    tenant = Tenant.objects.filter(slug=SLUG).first()
    if tenant is None:
        tenant = tenant_provision(slug=SLUG, admin_user="bench", admin_password=PASSWORD).tenant
    return tenant


def _run_count(tenant: Tenant) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("SELECT count(*) FROM {}").format(table(tenant.schema_name, "runs_run"))
        )
        return cursor.fetchone()[0]


def _copy_runs(tenant: Tenant, count: int, job_ids: list[int], history_job: int) -> float:
    """`count` runs, one a minute back from now: every 20th of the history job (so it has
    count / 20), the others spread over all jobs; 1% dead, 1% skipped, the rest succeeded."""
    started = time.perf_counter()
    query = sql.SQL("COPY {} ({}) FROM STDIN").format(
        table(tenant.schema_name, "runs_run"), sql.SQL(", ").join(map(sql.Identifier, RUN_COLUMNS))
    )
    with connection.cursor() as cursor, cursor.cursor.copy(query) as copy:
        for n in range(count):
            job = history_job if n % 20 == 0 else job_ids[n % len(job_ids)]
            at = NOW - timedelta(minutes=n + 1)
            status, reason, error = "succeeded", "", ""
            if n % 100 in (7, 40):
                status, error = "dead", "HTTP 500 from the target"
            elif n % 100 == 13:
                status, reason = "skipped", "overlap"
            begun = at + timedelta(seconds=0.2)
            copy.write_row(
                (
                    uuid.uuid4(),
                    job,
                    "schedule",
                    at,
                    at,
                    status,
                    reason,
                    1,
                    at + timedelta(seconds=0.05),
                    None if status == "skipped" else begun,
                    at + timedelta(seconds=1.5),
                    "bench",
                    error,
                    at,
                )
            )
    with connection.cursor() as cursor:
        cursor.execute(sql.SQL("ANALYZE {}").format(table(tenant.schema_name, "runs_run")))
        cursor.execute(sql.SQL("ANALYZE {}").format(table(tenant.schema_name, "jobs_job")))
    return time.perf_counter() - started


def _ensure_world(tenant: Tenant, jobs: int, runs: int) -> dict:
    load = {}
    have = job_count(tenant)
    if have < jobs:
        load["jobs_seconds"] = round(copy_jobs(tenant, jobs - have, NOW + timedelta(days=1)), 1)
    with schema_context(tenant.schema_name):
        from jobs.models import Job

        ids = list(Job.objects.order_by("id").values_list("id", flat=True)[:jobs])
    if _run_count(tenant) < runs:
        with connection.cursor() as cursor:
            cursor.execute(
                sql.SQL("TRUNCATE {} CASCADE").format(table(tenant.schema_name, "runs_run"))
            )
        load["runs_seconds"] = round(_copy_runs(tenant, runs, ids, ids[0]), 1)
    return {"job_ids": ids, **load}


def _time(client: Client, host: str, url: str, repeats: int) -> dict:
    client.get(url, HTTP_HOST=host)  # warm
    times, size = [], 0
    for _ in range(repeats):
        started = time.perf_counter()
        response = client.get(url, HTTP_HOST=host)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
        size = len(response.content)
    return {
        "p50_ms": round(statistics.median(times), 1),
        "p99_ms": round(percentile(times, 99), 1),
        "kib": round(size / 1024, 1),
    }


def run(jobs: int = 100_000, runs: int = 1_000_000, repeats: int = 30) -> dict:
    tenant = _tenant()
    world = _ensure_world(tenant, jobs, runs)
    ids = world.pop("job_ids")
    host = tenant.domains.first().domain
    client = Client()
    client.post("/login/", {"username": "bench", "password": PASSWORD}, HTTP_HOST=host)
    history = ids[0]
    with schema_context(tenant.schema_name):
        from runs.models import Run

        deep = Run.objects.filter(job_id=history).order_by("-scheduled_for", "-id")[
            min(runs // 40, 20_000)
        ]
    from portal.common import encode_cursor

    cursor = encode_cursor([deep.scheduled_for, str(deep.id)])
    pages = {
        "jobs list, page 1": "/jobs/",
        "jobs list, deep page": f"/jobs/?after={ids[len(ids) // 2]}",
        "jobs list, name search": f"/jobs/?q=bench-{len(ids) - 7}",
        "jobs list, last result dead": "/jobs/?last=dead",
        "job page with history, page 1": f"/jobs/{history}/",
        "job history, deep cursor": f"/jobs/{history}/?cursor={cursor}",
        "job history, status dead": f"/jobs/{history}/?status=dead",
    }
    results = {name: _time(client, host, url, repeats) for name, url in pages.items()}
    connection.set_schema_to_public()
    figures = {
        "jobs": len(ids),
        "runs": runs,
        "history_job_runs": runs // 20,
        "repeats": repeats,
        **world,
        "pages": results,
    }
    print(f"portal pages: {len(ids):,} jobs, {runs:,} runs ({runs // 20:,} of the history job)")
    for name, r in results.items():
        print(
            f"  {name:32} p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  {r['kib']:6.1f} KiB"
        )
    return figures
