"""How many HTTP executions one machine holds in flight with the asyncio execution mode
(TICKWORK_HTTP_EXECUTION=async), what each costs in memory, and what their heartbeats
cost PostgreSQL.

Slow local receivers (bench/slow_receiver.py, one process per port: each process, the
receivers as the workers, may hold only as many sockets as its open-files limit) hold
every request `--hold` seconds. A prefork worker of `--processes` pool processes, each
with its own event loop holding up to `--per-process` calls, takes the queued runs."""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import connection
from django_tenants.utils import schema_context
from psycopg import sql

from beat.messages import build_message
from core.clock import SystemClock
from core.redis import get_redis
from core.sql import table
from jobs.services import Actor, job_create

from .concurrency import _running, heartbeat_statement_ms, stop_all
from .processes import ROOT, start_worker, stop, tree_rss_bytes
from .throughput import QUEUE, _publish, _queued_runs, run_messages
from .world import bench_tenants, drop_bench_data

BASE_PORT = 18600
PROBE_QUEUE = "runs.high.0"
RESULTS = Path("bench/results")


def _receivers(count: int) -> list[tuple[subprocess.Popen, Path]]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = []
    for n in range(count):
        report = RESULTS / f"receiver-{n}.json"
        report.unlink(missing_ok=True)
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.slow_receiver", str(BASE_PORT + n), str(report)],
            cwd=ROOT,
            start_new_session=True,
        )
        started.append((proc, report))
    return started


def _settled_rss(pid: int, processes: int, timeout: float = 60) -> int:
    """The idle worker's RSS once its pool processes exist and it stopped growing."""
    deadline, last = time.monotonic() + timeout, -1
    time.sleep(3)
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        rss = tree_rss_bytes(pid)
        if len(children) >= processes and abs(rss - last) < 2**20:
            return rss
        last = rss
        time.sleep(2)
    return tree_rss_bytes(pid)


def _held(receivers) -> int:
    total = 0
    for _, report in receivers:
        with contextlib.suppress(OSError, ValueError, KeyError):
            total += json.loads(report.read_text())["live"]
    return total


def _probe_latency_ms(client, schema: str, job_id: int) -> float | None:
    """The broker consumer while the HTTP load is held: a `builtin.noop` run published now
    to a high-priority queue (polled before the HTTP runs' queue, so that it does not wait
    behind their backlog) is taken and finished how fast?"""
    [run_id] = _queued_runs(schema, job_id, 1)
    started = time.perf_counter()
    message = build_message(
        task_name="runs.execute_run",
        task_id=run_id,
        args=[schema, run_id, 1],
        queue=PROBE_QUEUE,
        origin="bench",
    )
    _publish(client, PROBE_QUEUE, [message])
    query = sql.SQL("SELECT status FROM {} WHERE id = %s").format(table(schema, "runs_run"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(query, [run_id])
            if cursor.fetchone()[0] == "succeeded":
                return round((time.perf_counter() - started) * 1000, 1)
        time.sleep(0.005)
    return None


def run(
    inflight: int = 2000,
    processes: int = 2,
    per_process: int = 0,
    hold: int = 120,
    receivers: int = 0,
    beat_seconds: int = 10,
    prefetch: int = 1,
    workers: int = 1,
) -> dict:
    """`workers` worker processes (Celery parents), each with `processes` pool processes:
    the parent's intake (taking a message, handing it to a pool process) was the limit with
    one."""
    per_process = per_process or -(-inflight // (processes * workers)) + 100
    receivers = receivers or max(1, -(-inflight // 15_000))
    client = get_redis()
    [tenant] = bench_tenants(1)
    schema = tenant.schema_name
    drop_bench_data(client, [tenant])
    settings.SCHEDULER_HTTP_ALLOW_NETWORKS = ["127.0.0.0/8"]
    jobs = []
    with schema_context(schema):
        for n in range(receivers):
            jobs.append(
                job_create(
                    tenant=tenant,
                    actor=Actor("bench"),
                    clock=SystemClock(),
                    data={
                        "name": f"slow-http-{n}",
                        "schedule": None,
                        "timeout_seconds": hold * 3,
                        "target": {
                            "type": "http",
                            "method": "POST",
                            "url": f"http://127.0.0.1:{BASE_PORT + n}/hold/{hold}",
                        },
                    },
                )
            )
        noop = job_create(
            tenant=tenant,
            actor=Actor("bench"),
            clock=SystemClock(),
            data={
                "name": "noop-probe",
                "schedule": None,
                "target": {"type": "task", "task": "builtin.noop"},
            },
        )
    client.flushdb()
    servers = _receivers(receivers)
    pool = [
        start_worker(
            "-P",
            "prefork",
            "-c",
            str(processes),
            "-Q",
            f"{PROBE_QUEUE},{QUEUE}",
            "-n",
            f"async{n}@%h",
            "--prefetch-multiplier",
            str(prefetch),
            log=RESULTS / f"worker-async{n or ''}.log",
            TICKWORK_HTTP_EXECUTION="async",
            TICKWORK_HTTP_MAX_INFLIGHT=str(per_process),
            SCHEDULER_HTTP_ALLOW_NETWORKS="127.0.0.0/8",
            SCHEDULER_HEARTBEAT_SECONDS=str(beat_seconds),
        )
        for n in range(workers)
    ]
    try:
        idle_rss = sum(_settled_rss(worker.pid, processes) for worker in pool)
        ids: list[str] = []
        share = -(-inflight // receivers)
        for job in jobs:
            ids += _queued_runs(schema, job.id, min(share, inflight - len(ids)))
        messages = run_messages(schema, ids)
        started = time.perf_counter()
        _publish(client, QUEUE, messages)
        peak, held, peak_at = 0, 0, 0.0
        deadline = time.monotonic() + hold * 0.8
        while time.monotonic() < deadline:
            held = _held(servers)
            if held > peak:
                peak, peak_at = held, time.perf_counter() - started
            if peak >= inflight:
                break
            if int(time.perf_counter() - started) % 10 == 0:
                print(f"  {time.perf_counter() - started:5.0f}s: {held:,} held", flush=True)
            time.sleep(1)
        time.sleep(2)
        running = _running(schema)
        busy_rss = sum(tree_rss_bytes(worker.pid) for worker in pool)
        probe_ms = _probe_latency_ms(client, schema, noop.id)
        held = max(peak, _held(servers))
        beat_ms = heartbeat_statement_ms(schema, ids[: -(-len(ids) // (processes * workers))])
    finally:
        stop_all(pool, schema)
        for proc, _ in servers:
            stop(proc)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    result = {
        "asked": inflight,
        "held_at_receivers": held,
        "running_in_db": running,
        "reached_after_seconds": round(peak_at, 1),
        "workers": workers,
        "processes": processes,
        "per_process_cap": per_process,
        "receivers": receivers,
        "open_files_limit": hard,
        "idle_rss_mib": round(idle_rss / 2**20, 1),
        "busy_rss_mib": round(busy_rss / 2**20, 1),
        "kib_per_run": round((busy_rss - idle_rss) / max(held, 1) / 1024, 1),
        "heartbeat_update_ms_per_process": round(beat_ms, 1),
        "heartbeat_seconds": beat_seconds,
        "noop_run_while_held_ms": probe_ms,
        "prefetch_multiplier": prefetch,
    }
    print(
        f"async HTTP workers: {workers} x {processes} pool processes: {held:,} of {inflight:,}"
        " requests held "
        f"at the receivers ({running:,} runs running) after {peak_at:.1f}s; RSS "
        f"{result['idle_rss_mib']} -> {result['busy_rss_mib']} MiB = {result['kib_per_run']} "
        f"KiB per run; a no-op run published meanwhile finished in {probe_ms} ms; "
        f"one process's heartbeat UPDATE ({len(ids) // (processes * workers):,} runs) "
        f"{beat_ms:.1f} ms every {beat_seconds} s; open files limit {hard:,} per process",
        flush=True,
    )
    return result
