"""/metrics with many tenants: what one refresh of the facts costs (every tenant schema
read, what one web process does in the background every METRICS_CACHE_SECONDS), the first
one and once its statements are prepared and planned (PostgreSQL keeps a generic plan
after five executions), what a scrape costs (served from the shared facts), and how many
series it shows.

Tenants are cloned from one provisioned template (as `many-tenants` does), each with one
job; every tenth has a dead run, so that the DLQ gauge has series. The facts are read with
a few UNION ALL statements per 200 tenants (`scheduler_site/metrics/facts.py`).
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime

from django.db import connection
from psycopg import sql

from core.sql import table
from runs import states

from .provisioning import drop_tenants
from .tenant_upgrade import bench_m_tenants
from .world import copy_jobs


def _seed(tenants) -> None:
    for n, tenant in enumerate(tenants):
        with connection.cursor() as cursor:
            cursor.execute(
                sql.SQL("SELECT count(*) FROM {}").format(table(tenant.schema_name, "jobs_job"))
            )
            if cursor.fetchone()[0]:
                continue
        copy_jobs(tenant, 1, datetime.now(UTC), name="scraped")
        if n % 10 == 0:
            with connection.cursor() as cursor:
                cursor.execute(
                    sql.SQL(
                        "INSERT INTO {runs} (id, job_id, trigger, scheduled_for, due_at, status,"
                        " attempt, created_at, error, worker, skip_reason)"
                        " SELECT gen_random_uuid(), id, 'manual', now(), now(), %s, 1, now(),"
                        " '', '', '' FROM {jobs} LIMIT 1"
                    ).format(
                        runs=table(tenant.schema_name, "runs_run"),
                        jobs=table(tenant.schema_name, "jobs_job"),
                    ),
                    [states.DEAD],
                )


def run(tenant_count: int = 2000, repeats: int = 10, keep: bool = False) -> dict:
    from scheduler_site.metrics.exposition import FACTS, render, web_registry
    from scheduler_site.metrics.facts import compute

    started = time.perf_counter()
    tenants, _made = bench_m_tenants(tenant_count)  # provisioned from the template
    _seed(tenants)
    setup = time.perf_counter() - started
    registry = web_registry()
    statements: list[str] = []

    def count(execute, query, params, many, context):
        statements.append(query)
        return execute(query, params, many, context)

    cold, warm = [], []
    FACTS.clear()
    render(registry)  # the shared facts exist from here on
    for _ in range(repeats):  # as the refresher does: prepared, on one connection
        statements.clear()
        with connection.execute_wrapper(count):
            begin = time.perf_counter()
            facts = compute(prepared=True)
            cold.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        body = render(registry)
        warm.append(time.perf_counter() - begin)
    up = {
        s.labels["source"]: s.value
        for f in facts
        if f.name == "tickwork_metrics_source_up"
        for s in f.samples
    }
    series = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
    result = {
        "tenants": len(tenants),
        "setup_seconds": round(setup, 1),
        "refresh_ms_first": round(cold[0] * 1000, 1),
        "refresh_ms_steady": round(statistics.median(cold[-3:]) * 1000, 1),
        "refresh_sources_up": up,
        "scrape_ms_median": round(statistics.median(warm) * 1000, 2),
        "statements_per_refresh": len(statements),
        "series": len(series),
        "bytes": len(body),
    }
    print(result, flush=True)
    if not keep:
        drop_tenants("bench-m-")
    return result
