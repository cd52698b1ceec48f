"""Leader iteration cost against the number of registered jobs, with the same number due.

For each size the world grows (bulk COPY, never through the API), then `repeats` times:
the same `due` jobs are made due at X, a fresh leader materialises them (the clock at
X - 10 s) and fires them (the clock at X). Only the due work should cost anything.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

from django.db import connection
from psycopg import sql

from beat import materialise as materialise_step
from beat.engine import Engine, EngineConfig
from beat.lease import bump_epoch
from core import index as core_index
from core.clock import FakeClock
from core.keys import index_key
from core.redis import get_redis
from core.sql import table

from .breakdown import Breakdown
from .world import (
    UNBOUNDED_ADMISSION,
    bench_tenants,
    clear_runs,
    copy_jobs,
    drop_bench_data,
    index_jobs,
    job_count,
)

X = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def _reset_due(client, tenants, per_tenant_due: int) -> None:
    clear_runs(tenants)
    for tenant in tenants:
        with connection.cursor() as cursor:
            cursor.execute(
                sql.SQL("UPDATE {} SET next_run_at = %s WHERE name LIKE 'due-%%'").format(
                    table(tenant.schema_name, "jobs_job")
                ),
                [X],
            )
        index_jobs(client, tenant, where="name LIKE 'due-%%'")
    for key in client.scan_iter("runs.*"):
        client.delete(key)


def _grow(client, tenants, size: int) -> float:
    started = time.perf_counter()
    per_tenant = size // len(tenants)
    for tenant in tenants:
        missing = per_tenant - job_count(tenant)
        if missing > 0:
            far = X + timedelta(days=30)
            copy_jobs(tenant, missing, far, spread_seconds=86400 * 300, name="idle")
            index_jobs(client, tenant, where="name LIKE 'idle-%%' AND next_run_at > '2030-01-02'")
    return time.perf_counter() - started


def _instrumented(engine: Engine, breakdown: Breakdown) -> None:
    """Time the leaf calls of materialise (its SQL is timed by `Breakdown.measuring`)."""
    breakdown.wrap(materialise_step, "_plan_one", "Python plan slots (plan_job)")
    breakdown.wrap(engine.runs, "_message", "Python build messages")
    breakdown.wrap(engine.runs, "remember", "Python heap push")
    breakdown.wrap(materialise_step, "uuid7", "Python run ids (uuid7)")
    for name in ("cas_jobs", "lower_jobs"):
        breakdown.wrap(engine.writes, name, f"Redis {name} (fenced Lua)")
    breakdown.wrap(core_index, "due", "Redis ZRANGEBYSCORE due head")


def measure(
    size: int,
    tenants,
    due: int,
    repeats: int,
    profile: bool = False,
    breakdown: bool = False,
    partition: int = 0,
) -> dict:
    """`due` jobs of `tenants` (all in `partition`) materialised and fired by a fresh
    leader of that partition, `repeats` times."""
    client = get_redis()
    materialise_ms, fire_ms = [], []
    profiler = cProfile.Profile() if profile else None
    for repeat in range(repeats):
        # the last repeat's materialise and fire only (not the benchmark's own reset)
        profiling = profiler if profiler and repeat == repeats - 1 else None
        _reset_due(client, tenants, due // len(tenants))
        clock = FakeClock(X - timedelta(seconds=10))
        engine = Engine(
            client=client,
            clock=clock,
            epoch=bump_epoch("bench", partition=partition),
            config=EngineConfig(
                lookahead_seconds=30,
                admission=UNBOUNDED_ADMISSION,
                materialise_batch=max(due, 5000),
            ),
            origin="bench",
            partition=partition,
        )
        parts = Breakdown() if breakdown and repeat == repeats - 1 else None
        with ExitStack() as stack:
            if parts is not None:
                originals = (materialise_step._plan_one, materialise_step.uuid7, core_index.due)
                _instrumented(engine, parts)
                stack.enter_context(parts.measuring())
            if profiling:
                profiling.enable()
            started = time.perf_counter()
            processed = engine.materialise()
            elapsed = time.perf_counter() - started
            if profiling:
                profiling.disable()
            if parts is not None:
                (materialise_step._plan_one, materialise_step.uuid7, core_index.due) = originals
        materialise_ms.append(elapsed * 1000)
        if parts is not None:
            print(parts.report(elapsed, f"materialise {due:,} runs (instrumented)"), flush=True)
        clock.set(X)
        fire_parts = Breakdown() if parts is not None else None
        with ExitStack() as stack:
            if fire_parts is not None:
                fire_parts.wrap(engine.writes, "push_messages", "Redis push messages (fenced)")
                if engine.admission is not None:
                    fire_parts.wrap(engine.admission, "choose", "fair admission (choose)")
                stack.enter_context(fire_parts.measuring())
            if profiling:
                profiling.enable()
            started = time.perf_counter()
            published = engine.fire().published
            while engine.fire_is_due() or engine.fire_limited:  # a few chunks a call
                published += engine.fire().published
            elapsed = time.perf_counter() - started
            if profiling:
                profiling.disable()
        fire_ms.append(elapsed * 1000)
        if fire_parts is not None:
            print(fire_parts.report(elapsed, f"fire {due:,} runs (instrumented)"), flush=True)
        assert processed == due and published == due, (processed, published)
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    return {
        "registered": size,
        "due": due,
        "materialise_ms": statistics.median(materialise_ms),
        "fire_ms": statistics.median(fire_ms),
        "materialise_runs_per_s": due / statistics.median(materialise_ms) * 1000,
        "iteration_ms": statistics.median(
            m + f for m, f in zip(materialise_ms, fire_ms, strict=True)
        ),
    }


def storage_figures(client, tenants, partitions: int = 1) -> dict:
    """Redis bytes per indexed job and PostgreSQL bytes per job (table + indexes), over
    the `partitions` partitions' indexes (each one's members listed)."""
    per_partition = [
        {
            "partition": n,
            "members": client.zcard(index_key(n)),
            "bytes": client.memory_usage(index_key(n), samples=0) or 0,
        }
        for n in range(partitions)
    ]
    members = sum(p["members"] for p in per_partition)
    index_bytes = sum(p["bytes"] for p in per_partition)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(pg_total_relation_size(format('%%I.jobs_job', schema_name)::regclass)) "
            "FROM public.tenants_tenant WHERE schema_name = ANY(%s)",
            [[t.schema_name for t in tenants]],
        )
        jobs_bytes = int(cursor.fetchone()[0] or 0)
        cursor.execute("SELECT pg_database_size(current_database())")
        database_bytes = cursor.fetchone()[0]
    return {
        "index_members": members,
        "redis_index_bytes_per_job": round(index_bytes / members, 1) if members else None,
        "redis_used_memory_bytes": client.info("memory")["used_memory"],
        "pg_jobs_bytes_per_job": round(jobs_bytes / members, 1) if members else None,
        "pg_database_bytes": database_bytes,
        "per_partition": per_partition,
    }


def run(
    sizes: list[int],
    due: int = 1000,
    tenant_count: int = 10,
    repeats: int = 5,
    profile: bool = False,
    breakdown: bool = False,
) -> list[dict]:
    client = get_redis()
    tenants = bench_tenants(tenant_count)
    drop_bench_data(client, tenants)
    for tenant in tenants:
        copy_jobs(tenant, due // tenant_count, X, name="due")
    results = []
    for size in sizes:
        grow_seconds = _grow(client, tenants, size)
        row = measure(size, tenants, due, repeats, profile, breakdown)
        row["load_seconds"] = round(grow_seconds, 1)
        row.update(storage_figures(client, tenants))
        results.append(row)
        print(
            f"registered {size:>10,}  due {due:,}  materialise {row['materialise_ms']:8.1f} ms"
            f" ({row['materialise_runs_per_s']:,.0f} runs/s)  fire {row['fire_ms']:7.1f} ms"
            f"  iteration {row['iteration_ms']:8.1f} ms"
            f"  (load {grow_seconds:.1f}s)",
            flush=True,
        )
        print(
            f"    Redis index {row['redis_index_bytes_per_job']} B/job "
            f"(used_memory {row['redis_used_memory_bytes'] / 2**20:,.0f} MiB); PostgreSQL jobs "
            f"{row['pg_jobs_bytes_per_job']} B/job, database "
            f"{row['pg_database_bytes'] / 2**30:.2f} GiB",
            flush=True,
        )
    if len(results) > 1:
        ratio = results[-1]["iteration_ms"] / results[0]["iteration_ms"]
        print(f"cost ratio {sizes[-1]:,}/{sizes[0]:,} registered: {ratio:.2f}")
    return results
