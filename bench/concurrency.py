"""How many long runs (`builtin.sleep` 60 s) one machine holds in flight with a thread
worker, what each costs in memory, and what their heartbeats cost PostgreSQL.

The worker runs `-P threads` with a connection pool (DB_POOL_MAX_SIZE): a run holds a
pooled connection only to claim and to finish, never while its target runs."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from django.db import connection
from django_tenants.utils import schema_context
from psycopg import sql

from core.clock import SystemClock
from core.redis import get_redis
from core.sql import pg_array, table
from jobs.services import Actor, job_create

from .processes import start_worker, stop, tree_rss_bytes, wait_until
from .throughput import QUEUE, _publish, _queued_runs, run_messages
from .world import bench_tenants, drop_bench_data


def _running(schema: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE status = 'running'").format(
        table(schema, "runs_run")
    )
    with connection.cursor() as cursor:
        cursor.execute(query)
        return cursor.fetchone()[0]


def heartbeat_statement_ms(schema: str, ids: list[str], repeats: int = 5) -> float:
    """The batched heartbeat UPDATE of `ids`, as one worker process issues it."""
    query = sql.SQL(
        "UPDATE {} SET heartbeat_at = now() WHERE id = ANY(%s::uuid[]) AND status = 'running' "
        "RETURNING id"
    ).format(table(schema, "runs_run"))
    literal, times = pg_array(ids), []
    with connection.cursor() as cursor:
        for _ in range(repeats):
            started = time.perf_counter()
            cursor.execute(query, [literal])
            cursor.fetchall()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def run(inflight: int = 2000, db_pool: int = 10, sleep_seconds: int = 60, workers: int = 1) -> dict:
    client = get_redis()
    [tenant] = bench_tenants(1)
    schema = tenant.schema_name
    drop_bench_data(client, [tenant])
    with schema_context(schema):
        job = job_create(
            tenant=tenant,
            actor=Actor("bench"),
            clock=SystemClock(),
            data={
                "name": "sleep",
                "schedule": None,
                "payload": {"seconds": sleep_seconds},
                "target": {"type": "task", "task": "builtin.sleep"},
            },
        )
    client.flushdb()
    per_worker = -(-inflight // workers)
    procs = [
        start_worker(
            "-P",
            "threads",
            "-c",
            str(per_worker),
            "-Q",
            QUEUE,
            "-n",
            f"t{n}@%h",
            log=Path(f"bench/results/worker-threads-{n}.log"),
            DB_POOL_MAX_SIZE=str(db_pool),
            SCHEDULER_HEARTBEAT_SECONDS="10",
        )
        for n in range(workers)
    ]
    try:
        time.sleep(5)  # the worker is up and idle
        idle_rss = sum(tree_rss_bytes(p.pid) for p in procs)
        ids = _queued_runs(schema, job.id, inflight)
        messages = run_messages(schema, ids)
        started = time.perf_counter()
        _publish(client, QUEUE, messages)
        peak = 0
        deadline = time.monotonic() + sleep_seconds * 0.75
        while time.monotonic() < deadline:
            peak = max(peak, _running(schema))
            if peak >= inflight:
                break
            time.sleep(1)
        ramp_seconds = time.perf_counter() - started
        time.sleep(2)
        busy_rss = sum(tree_rss_bytes(p.pid) for p in procs)
        beat_ms = heartbeat_statement_ms(schema, ids)
    finally:
        stop_all(procs, schema)
    result = {
        "asked": inflight,
        "in_flight": peak,
        "ramp_seconds": round(ramp_seconds, 1),
        "db_pool": db_pool,
        "idle_rss_mib": round(idle_rss / 2**20, 1),
        "busy_rss_mib": round(busy_rss / 2**20, 1),
        "kib_per_run": round((busy_rss - idle_rss) / max(peak, 1) / 1024, 1),
        "heartbeat_update_ms": round(beat_ms, 1),
    }
    print(
        f"{workers} threads worker process(es): {peak:,} of {inflight:,} runs in flight after "
        f"{ramp_seconds:.1f}s "
        f"({db_pool} pooled connections); RSS {result['idle_rss_mib']} -> "
        f"{result['busy_rss_mib']} MiB = {result['kib_per_run']} KiB per run; one heartbeat "
        f"UPDATE of all of them {beat_ms:.1f} ms every 10 s",
        flush=True,
    )
    return result


def stop_all(procs, schema: str) -> None:
    """Cancel the sleepers (they stop at their next heartbeat), then stop the worker."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL(
                "UPDATE {} SET status = 'cancelled' WHERE status IN ('running', 'queued')"
            ).format(table(schema, "runs_run"))
        )
    wait_until(lambda: _running(schema) == 0, 15)
    for proc in procs:
        stop(proc)
