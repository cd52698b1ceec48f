"""Provisioning time per tenant: `tenant_provision` end to end (schema cloned from the
template, domain, first admin user, API token, webhook signing secret), one at a time and
from several threads at once; and, in transactions rolled back, what building a schema
costs by each path: cloned from the template, or migrated as before (django-tenants'
`migrate_schemas` for one schema, what `tenant_provision` did until the template).

Tenants it creates are named `bench-p-*` and dropped after, unless `--keep`.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

from django.core.management import call_command
from django.db import connection, connections, transaction
from psycopg import sql

from tenants.models import Tenant
from tenants.schema_template import schema_create_from_template, template_build, template_ensure
from tenants.services import tenant_provision

from .world import percentile


def provision_bulk(slugs: list[str], threads: int) -> tuple[list[Tenant], list[float], float]:
    """Provision `slugs` from `threads` threads (each its own connection); returns the
    tenants, each provisioning's seconds, and the wall time."""
    template_ensure()
    tenants: list[Tenant] = []
    latencies: list[float] = []
    failures: list[BaseException] = []

    def work(part: list[str]) -> None:
        try:
            for slug in part:
                started = time.perf_counter()
                tenants.append(tenant_provision(slug=slug).tenant)
                latencies.append(time.perf_counter() - started)
        except BaseException as exc:  # reported by the caller
            failures.append(exc)
        finally:
            connections.close_all()

    started = time.perf_counter()
    workers = [threading.Thread(target=work, args=(slugs[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return tenants, latencies, time.perf_counter() - started


def _figures(latencies: list[float], wall: float) -> dict:
    return {
        "tenants": len(latencies),
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "mean_ms": round(statistics.mean(latencies) * 1000, 1),
        "wall_s": round(wall, 1),
        "tenants_per_s": round(len(latencies) / wall, 1),
    }


def _schema_paths(samples: int) -> dict:
    """Build a schema both ways, `samples` times each, in transactions rolled back."""
    cloned, migrated = [], []
    for n in range(samples):
        with transaction.atomic():
            started = time.perf_counter()
            assert schema_create_from_template(f"t_bench_path_c{n}")
            cloned.append(time.perf_counter() - started)
            transaction.set_rollback(True)
        with transaction.atomic():
            started = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier("t_bench_m")))
            call_command(
                "migrate_schemas",
                schema_name="t_bench_m",
                tenant=True,
                executor="standard",
                interactive=False,
                verbosity=0,
            )
            migrated.append(time.perf_counter() - started)
            transaction.set_rollback(True)
    started = time.perf_counter()
    template_build(force=True)
    return {
        "clone_ms_median": round(statistics.median(cloned) * 1000, 1),
        "migrate_ms_median": round(statistics.median(migrated) * 1000, 1),
        "template_build_ms": round((time.perf_counter() - started) * 1000, 1),
    }


def drop_tenants(prefix: str) -> int:
    dropped = 0
    for tenant in Tenant.objects.filter(slug__startswith=prefix):
        tenant.delete(force_drop=True)
        dropped += 1
    return dropped


def run(
    count: int = 100, threads: tuple[int, ...] = (1, 4), samples: int = 5, keep: bool = False
) -> dict:
    drop_tenants("bench-p-")
    results: dict = {"load_average": os.getloadavg()[0]}
    results["schema_paths"] = _schema_paths(samples)
    print("schema paths", results["schema_paths"], flush=True)
    for n in threads:
        slugs = [f"bench-p-{n}t-{i:05d}" for i in range(count)]
        _, latencies, wall = provision_bulk(slugs, n)
        results[f"threads_{n}"] = _figures(latencies, wall)
        print(f"{n} thread(s)", results[f"threads_{n}"], flush=True)
    if not keep:
        drop_tenants("bench-p-")
    return results
