"""An upgrade across many tenant schemas with migrate_schemas' parallel executor.

The code gains one migration (bench/probe_migration.py: a column, a partial index, an index
and a constraint dropped by name), and django-tenants' multiprocessing executor applies it
to `schemas` tenant schemas (TENANT_MULTIPROCESSING_MAX_PROCESSES processes), then
unapplies it (the benchmark leaves the schemas as it found them). The executor is given the
schemas the way `migrate_schemas --executor=multiprocessing` gives it every tenant's, with
the command's own parsed options, so that a subset of a larger database can be measured.
It is the executor `migrate_schemas` uses (tenants/migrate_executor.py), so the time
includes its reading of which schemas are behind. Last, the same run again with the
schemas current: what a release without migrations costs them.

Tenants are `bench-m-*` (shared with the many-tenants benchmark), provisioned when missing.
"""

from __future__ import annotations

import os
import time

from django.conf import settings
from django.db import connection

from tenants.migrate_executor import command_options, get_executor, schemas_behind
from tenants.models import Tenant
from tenants.schema_template import code_migrations

from .probe_migration import probe_migration
from .provisioning import provision_bulk
from .world import percentile

SLUG = "bench-m-{:05d}"


def bench_m_tenants(count: int, threads: int = 4) -> tuple[list[Tenant], dict]:
    """The first `count` bench-m tenants, provisioning the missing ones from `threads`."""
    have = {t.slug: t for t in Tenant.objects.filter(slug__startswith="bench-m-")}
    missing = [SLUG.format(n) for n in range(count) if SLUG.format(n) not in have]
    made: dict = {}
    if missing:
        tenants, latencies, wall = provision_bulk(missing, threads)
        have.update({t.slug: t for t in tenants})
        made = {"provisioned": len(tenants), "wall_s": round(wall, 1), "threads": threads}
        made["tenants_per_s"] = round(len(tenants) / wall, 1)
        made["p50_ms"] = round(percentile(latencies, 50) * 1000, 1)
    return [have[SLUG.format(n)] for n in range(count)], made


def _migrate(schemas: list[str], options: dict, processes: int) -> float:
    settings.TENANT_MULTIPROCESSING_MAX_PROCESSES = processes
    executor = get_executor("multiprocessing")([], options)
    connection.close()
    started = time.perf_counter()
    executor.run_migrations(tenants=list(schemas))
    return time.perf_counter() - started


def run(schemas: int = 200, processes: int = 2, skip_checks: bool = False) -> dict:
    tenants, made = bench_m_tenants(schemas)
    names = [t.schema_name for t in tenants]
    total_schemas = Tenant.objects.count()
    flags = ["--executor=multiprocessing", "--noinput", "-v", "0"]
    if skip_checks:
        flags.append("--skip-checks")
    results = {
        "schemas": schemas,
        "schemas_in_database": total_schemas,
        "processes": processes,
        "chunk": settings.TENANT_MULTIPROCESSING_CHUNKS,
        "skip_checks": skip_checks,
        "load_average": os.getloadavg()[0],
        "setup": made,
    }
    with probe_migration() as leaf:
        with connection.cursor() as cursor:
            behind = len(schemas_behind(cursor, names, code_migrations()))
        if behind != schemas:
            print(f"only {behind} of {schemas} schemas lack the probe migration", flush=True)
        up = _migrate(names, command_options(*flags), processes)
        down = _migrate(names, command_options(*flags, leaf[0], leaf[1]), processes)
    # The schemas are current again: what a release without migrations costs them.
    noop = _migrate(names, command_options(*flags), processes)
    results.update(
        {
            "schemas_upgraded": behind,
            "upgrade_s": round(up, 1),
            "upgrade_ms_per_schema": round(up / max(behind, 1) * 1000, 1),
            "downgrade_s": round(down, 1),
            "extrapolated_10000_upgrade_min": round(up / max(behind, 1) * 10_000 / 60, 1),
            "nothing_to_apply_s": round(noop, 2),
        }
    )
    print(results, flush=True)
    return results
