"""Bulk-load a benchmark world: tenants, millions of jobs by COPY, and their index entries."""

from __future__ import annotations

import json
import random
import time
from datetime import datetime, timedelta

from django.db import connection
from psycopg import sql

from beat.admission_control import AdmissionConfig
from core import index
from core.sql import table
from tenants.models import Tenant
from tenants.services import tenant_provision

JOB_COLUMNS = (
    "name",
    "description",
    "schedule_kind",
    "cron_expression",
    "cron_resolved",
    "timezone",
    "interval_seconds",
    "anchor_at",
    "hash_seed",
    "jitter_seconds",
    "dst_gap",
    "dst_repeat",
    "target_type",
    "target",
    "payload",
    "max_attempts",
    "backoff_seconds",
    "backoff_multiplier",
    "backoff_max_seconds",
    "retry_jitter",
    "timeout_seconds",
    "priority",
    "concurrency_policy",
    "max_concurrent_runs",
    "misfire_policy",
    "misfire_grace_seconds",
    "paused",
    "paused_reason",
    "paused_at",
    "resumed_at",
    "deleted_at",
    "next_run_at",
    "version",
    "created_by",
    "created_at",
    "updated_at",
    "index_dirty",
)
TARGET = json.dumps({"task": "builtin.noop"})
BENCH_QUOTA = 10_000_000
# Benchmarks of the leader alone run without workers: fair admission stays on (its cost is
# in the figures) with room for every due run in the broker and quotas that never bind.
UNBOUNDED_ADMISSION = AdmissionConfig(backlog_min=10**9)


def bench_tenants(count: int) -> list[Tenant]:
    tenants = []
    for n in range(count):
        slug = f"bench-{n:03d}"
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            tenant = tenant_provision(slug=slug, admin_password="bench").tenant
        tenants.append(tenant)
    # The quota must not be what a benchmark of the leader measures (see UNBOUNDED_ADMISSION).
    Tenant.objects.filter(id__in=[t.id for t in tenants]).update(max_concurrency=BENCH_QUOTA)
    return tenants


def job_count(tenant: Tenant) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("SELECT count(*) FROM {}").format(table(tenant.schema_name, "jobs_job"))
        )
        return cursor.fetchone()[0]


def copy_jobs(
    tenant: Tenant,
    count: int,
    next_run_at: datetime,
    cron: str = "* * * * *",
    spread_seconds: float = 0.0,
    name: str = "bench",
) -> float:
    """Insert `count` jobs whose next run is `next_run_at`: minutely cron jobs, or, when
    `spread_seconds` is given, hourly interval jobs anchored at a random whole second in
    [next_run_at, next_run_at + spread), so that their slots really spread. Returns the
    seconds taken."""
    started = time.perf_counter()
    rng = random.Random(count)
    now = datetime.now(next_run_at.tzinfo)
    query = sql.SQL("COPY {} ({}) FROM STDIN").format(
        table(tenant.schema_name, "jobs_job"),
        sql.SQL(", ").join(map(sql.Identifier, JOB_COLUMNS)),
    )
    with connection.cursor() as cursor, cursor.cursor.copy(query) as copy:
        for n in range(count):
            copy.write_row(_job_row(n, name, cron, next_run_at, spread_seconds, rng, now))
    return time.perf_counter() - started


def _job_row(n, name, cron, next_run_at, spread_seconds, rng, now) -> tuple:
    kind, expr, interval, when = "cron", cron, None, next_run_at
    if spread_seconds:
        offset = int(rng.random() * spread_seconds)
        kind, expr, interval = "interval", "", 3600
        when = next_run_at + timedelta(seconds=offset)
    anchor = when if interval else None
    return (
        f"{name}-{n}",
        "",
        kind,
        expr,
        expr,
        "UTC",
        interval,
        anchor,
        f"{n:016x}",
        0,
        "shift",
        "first",
        "task",
        TARGET,
        "{}",
        3,
        10.0,
        2.0,
        3600.0,
        True,
        300,
        "normal",
        "allow",
        1,
        "run_once",
        3600,
        False,
        "",
        None,
        None,
        None,
        when,
        1,
        "bench",
        now,
        now,
        False,  # index_dirty: the benchmark writes the index itself
    )


def index_jobs(client, tenant: Tenant, *, where: str = "TRUE", chunk: int = 50_000) -> int:
    """ZADD every schedulable job of the tenant matching `where` into the time index."""
    total, last = 0, 0
    while True:
        query = sql.SQL(
            "SELECT id, next_run_at FROM {} WHERE id > %s AND ({}) ORDER BY id LIMIT %s"
        ).format(table(tenant.schema_name, "jobs_job"), sql.SQL(where))
        with connection.cursor() as cursor:
            cursor.execute(query, [last, chunk])
            rows = cursor.fetchall()
        if not rows:
            return total
        pipe = client.pipeline(transaction=False)
        index.lower_jobs(pipe, [(tenant.id, job_id, at) for job_id, at in rows])
        pipe.execute()
        total += len(rows)
        last = rows[-1][0]


def clear_runs(tenants: list[Tenant]) -> None:
    with connection.cursor() as cursor:
        for tenant in tenants:
            cursor.execute(
                sql.SQL("TRUNCATE {}, {}").format(
                    table(tenant.schema_name, "runs_attempt"), table(tenant.schema_name, "runs_run")
                )
            )


def drop_bench_data(client, tenants: list[Tenant]) -> None:
    with connection.cursor() as cursor:
        for tenant in tenants:
            cursor.execute(
                sql.SQL("TRUNCATE {}, {}, {}, {} CASCADE").format(
                    table(tenant.schema_name, "runs_attempt"),
                    table(tenant.schema_name, "runs_run"),
                    table(tenant.schema_name, "jobs_auditevent"),
                    table(tenant.schema_name, "jobs_job"),
                )
            )
    client.flushdb()


def drop_all_bench_data(client, keep_prefix: str | None = None) -> None:
    """Every bench tenant's jobs and runs gone, not only the ones about to be used: a run
    another benchmark left queued (fire-lag has no workers) would otherwise be published
    again by the next leader's index rebuild, ahead of what is measured. `keep_prefix`:
    tenants whose slug starts with it keep theirs (the caller clears or pauses them)."""
    tenants = Tenant.objects.filter(slug__startswith="bench-")
    if keep_prefix:
        tenants = tenants.exclude(slug__startswith=keep_prefix)
    drop_bench_data(client, list(tenants))


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[rank]
