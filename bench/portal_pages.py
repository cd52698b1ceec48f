"""Server time and weight of the portal's heaviest pages in one big tenant: the jobs list
(first page, a deep keyset page, a name search, a last-result filter), a job's page with
its run history (first page, a deep cursor, a status filter), the upstream picker (a name
matching a few jobs, a name matching none, an id) and a diamond DAG's pages (a job's page
and DAG page with its recent DAG runs, a DAG run's page), with `jobs` jobs and `runs` runs
bulk-loaded by COPY and DAG_RUNS DAG runs of the diamond. Requests go through Django's
test client in this process, so the time is the server's (routing, middleware, queries,
templates), without a network."""

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


DAG_RUNS = 50


def _ensure_dag(tenant: Tenant) -> dict[str, object]:
    """The diamond bench-dag-a -> (b, c) -> d and DAG_RUNS finished DAG runs of it, made
    through the services as a worker would settle them (tests/integration/test_dags.py)."""
    from core.clock import SystemClock
    from jobs.models import Job
    from jobs.services import Actor, job_create
    from runs import states
    from runs.dags import dag_settle, dag_start
    from runs.models import DagRun, Run
    from runs.services import job_trigger

    clock, actor = SystemClock(), Actor("bench")
    with schema_context(tenant.schema_name):
        jobs = {j.name: j for j in Job.objects.filter(name__startswith="bench-dag-")}
        if len(jobs) < 4:
            noop = {"type": "task", "task": "builtin.noop"}
            for name, ups in (("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"])):
                data = {"name": f"bench-dag-{name}", "schedule": None, "target": noop}
                data["depends_on"] = [jobs[f"bench-dag-{u}"].id for u in ups]
                jobs[data["name"]] = job_create(tenant=tenant, actor=actor, data=data, clock=clock)
        root = jobs["bench-dag-a"]
        if not Run.objects.filter(job=root, dag_run__isnull=False).exists():
            DagRun.objects.all().delete()  # their runs went with a reload of the runs
        while DagRun.objects.count() < DAG_RUNS:
            run, _ = job_trigger(tenant=tenant, actor=actor, job_id=root.id, clock=clock)
            now = clock.now()
            dag_run = dag_start(
                schema=tenant.schema_name,
                run_id=run.id,
                job_id=root.id,
                trigger="manual",
                started_at=now,
            )
            for _ in range(3):  # a, then b and c, then d
                Run.objects.filter(dag_run=dag_run).exclude(status=states.SUCCEEDED).update(
                    status=states.SUCCEEDED, started_at=now, finished_at=now
                )
                dag_settle(schema=tenant.schema_name, dag_run_id=dag_run, now=now)
        latest = DagRun.objects.order_by("-started_at").first()
        return {"d": jobs["bench-dag-d"].id, "dag_run": latest.id}


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
    dag = _ensure_dag(tenant)
    connection.set_schema_to_public()
    pages = {
        "jobs list, page 1": "/jobs/",
        "jobs list, deep page": f"/jobs/?after={ids[len(ids) // 2]}",
        "jobs list, name search": f"/jobs/?q=bench-{len(ids) - 7}",
        "jobs list, last result dead": "/jobs/?last=dead",
        "job page with history, page 1": f"/jobs/{history}/",
        "job history, deep cursor": f"/jobs/{history}/?cursor={cursor}",
        "job history, status dead": f"/jobs/{history}/?status=dead",
        "upstream picker, a few match": f"/jobs/pick?mode=edge&for={dag['d']}&add=bench-9999",
        "upstream picker, none match": "/jobs/pick?mode=form&upstream_add=no-such-job",
        "upstream picker, an id": f"/jobs/pick?mode=form&q=%23{ids[len(ids) // 3]}",
        "diamond: a job's page": f"/jobs/{dag['d']}/",
        "diamond: its DAG page": f"/jobs/{dag['d']}/dag",
        "diamond: a DAG run's page": f"/dag-runs/{dag['dag_run']}/",
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
            f"  {name:34} p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  {r['kib']:6.1f} KiB"
        )
    return figures
