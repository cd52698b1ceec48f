"""The leader with thousands of tenants: iteration length and lease renewal gaps.

Relay, reap, index sync and reconciliation each query every tenant schema once per pass.
With the passes sliced by a time budget (and the lease renewed between tenants), a leader
with 2,000 tenants keeps its iterations short; with unbounded passes and no renewal in
between (the engine before issue 8), one iteration holds the lease for the whole pass.

Tenants are cloned from one provisioned template (its tables, by CREATE TABLE ... LIKE):
provisioning 2,000 through migrations would take half an hour. They stay in the benchmark
database only with `--keep`. Each has one job firing every 10 s; a real leader
(`SchedulerProcess`, system clock, default settings) runs for `seconds` in each mode, and
every lease renewal is timed.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from django.db import connection
from psycopg import sql

from beat.engine import EngineConfig
from beat.lease import Lease, LeaseLost
from beat.loop import SchedulerProcess
from core.clock import SystemClock
from core.keys import index_built_key
from core.redis import get_redis
from core.sql import table
from tenants.models import Tenant
from tenants.services import tenant_provision

from .world import UNBOUNDED_ADMISSION, copy_jobs, index_jobs, percentile

SLUG = "bench-m-{:05d}"


def clone_tenants(count: int) -> list[Tenant]:
    """`count` tenants cloned from an empty provisioned template: every table of its schema
    (CREATE TABLE ... LIKE, about 50 ms a tenant; django-tenants' clone_schema takes over a
    second), with its migration records, so that `migrate` sees them up to date."""
    template = Tenant.objects.filter(slug="bench-template").first()
    if template is None:
        template = tenant_provision(slug="bench-template", admin_password="bench").tenant
    tenants = list(Tenant.objects.filter(slug__startswith="bench-m-").order_by("slug")[:count])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", [template.schema_name]
        )
        tables = [row[0] for row in cursor.fetchall()]
        for n in range(len(tenants), count):
            schema = f"t_bench_m_{n:05d}"
            cursor.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            for name in tables:
                cursor.execute(
                    sql.SQL("CREATE TABLE IF NOT EXISTS {} (LIKE {} INCLUDING ALL)").format(
                        table(schema, name), table(template.schema_name, name)
                    )
                )
            for name in ("django_migrations", "django_content_type"):
                cursor.execute(
                    sql.SQL("INSERT INTO {} SELECT * FROM {}").format(
                        table(schema, name), table(template.schema_name, name)
                    )
                )
            cursor.execute(
                "INSERT INTO public.tenants_tenant (schema_name, slug, name, weight, "
                "max_concurrency, created_at, suspended_reason) "
                "VALUES (%s, %s, %s, 1, 100, now(), '') RETURNING id",
                [schema, SLUG.format(n), schema],
            )
            tenants.append(Tenant.objects.get(id=cursor.fetchone()[0]))
    return tenants


def _run_leader(config: EngineConfig, seconds: float, checkpoints: bool) -> dict:
    client = get_redis()
    process = SchedulerProcess(client=client, clock=SystemClock(), config=config, holder="bench")
    renewals: list[float] = []
    original = Lease.renew

    def timed_renew(lease: Lease) -> None:
        renewals.append(time.monotonic())
        original(lease)

    Lease.renew = timed_renew  # type: ignore[method-assign]
    iterations: list[float] = []
    lost = 0
    try:
        assert process.try_lead()
        if not checkpoints:
            process.engine.checkpoint = lambda: None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                pause = process.lead_once()
            except LeaseLost:
                lost += 1
                process.step_down("bench: lease lost")
                assert process.try_lead()
                if not checkpoints:
                    process.engine.checkpoint = lambda: None
                continue
            iterations.append(time.monotonic() - started)
            process.wait(min(pause, 0.05))
    finally:
        Lease.renew = original  # type: ignore[method-assign]
        process.lease.release()
    gaps = [b - a for a, b in itertools.pairwise(renewals)]
    return {
        "iterations": len(iterations),
        "iteration_ms_p50": round(statistics.median(iterations) * 1000, 1),
        "iteration_ms_p99": round(percentile(iterations, 99) * 1000, 1),
        "iteration_ms_max": round(max(iterations) * 1000, 1),
        "renewal_gap_ms_max": round(max(gaps) * 1000, 1) if gaps else None,
        "lease_ms": process.lease.expire_seconds * 1000,
        "leases_lost": lost,
    }


def _fire_lag(tenants: list[Tenant], since: datetime) -> dict:
    lags = []
    with connection.cursor() as cursor:
        for tenant in tenants:
            cursor.execute(
                sql.SQL(
                    "SELECT extract(epoch FROM queued_at - scheduled_for) FROM {} "
                    "WHERE queued_at IS NOT NULL AND scheduled_for >= %s"
                ).format(table(tenant.schema_name, "runs_run")),
                [since],
            )
            lags += [float(row[0]) for row in cursor.fetchall()]
    return {
        "runs_fired": len(lags),
        "fire_lag_ms_p50": round(percentile(lags, 50) * 1000, 1) if lags else None,
        "fire_lag_ms_p99": round(percentile(lags, 99) * 1000, 1) if lags else None,
    }


def _reset(client, tenants: list[Tenant]) -> datetime:
    """Clear runs and Redis; every tenant's job fires every 10 s from 35 s from now (the
    leader takes over with all of it ahead of it, as in steady state)."""
    client.flushdb()
    with connection.cursor() as cursor:
        for tenant in tenants:
            for name in ("runs_attempt", "runs_run"):
                cursor.execute(sql.SQL("DELETE FROM {}").format(table(tenant.schema_name, name)))
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=35)
    with connection.cursor() as cursor:
        for tenant in tenants:
            cursor.execute(
                sql.SQL(
                    "UPDATE {} SET schedule_kind = 'interval', interval_seconds = 10, "
                    "cron_expression = '', cron_resolved = '', anchor_at = %s, next_run_at = %s"
                ).format(table(tenant.schema_name, "jobs_job")),
                [first, first],
            )
    for tenant in tenants:
        index_jobs(client, tenant)
    client.set(index_built_key(), "bench")
    return first


def drop_clones() -> None:
    """Drop the cloned tenants (every other benchmark, and `migrate`, would walk them)."""
    with connection.cursor() as cursor:
        for tenant in Tenant.objects.filter(slug__startswith="bench-m-"):
            cursor.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(tenant.schema_name)
                )
            )
            cursor.execute("DELETE FROM public.tenants_tenant WHERE id = %s", [tenant.id])


def run(tenant_count: int = 2000, seconds: float = 60.0, keep: bool = False) -> dict:
    client = get_redis()
    started = time.perf_counter()
    tenants = clone_tenants(tenant_count)
    for tenant in tenants:
        with connection.cursor() as cursor:
            cursor.execute(
                sql.SQL("SELECT count(*) FROM {}").format(table(tenant.schema_name, "jobs_job"))
            )
            if cursor.fetchone()[0] == 0:
                copy_jobs(tenant, 1, datetime.now(UTC), name="every-10s")
    setup = time.perf_counter() - started
    base = replace(
        EngineConfig.from_settings(),
        visibility_timeout_seconds=60,
        admission=UNBOUNDED_ADMISSION,
    )
    results = {"tenants": tenant_count, "setup_seconds": round(setup, 1), "modes": {}}
    for mode, config, checkpoints in (
        ("bounded", base, True),
        ("unbounded", replace(base, sweep_budget_seconds=1e9, rebuild_budget_seconds=1e9), False),
    ):
        since = _reset(client, tenants)
        figures = _run_leader(config, seconds, checkpoints)
        figures.update(_fire_lag(tenants, since))
        results["modes"][mode] = figures
        print(mode, figures, flush=True)
    client.flushdb()
    if not keep:
        drop_clones()
    return results
