"""End-to-end throughput of `builtin.noop` runs (published to finished) on one worker of
two prefork processes (`concurrency`), side by side with plain Celery running a no-op
task on the same worker: the ratio is what our bookkeeping (claim, attempt row, outcome)
costs. Each round also reports the CPU per run of each kind of process (`bench/cpu.py`).

`--broker amqp` runs both sides on RabbitMQ (ADR 0019): the messages are published the way
the leader publishes them there (`beat/amqp_writes.py`: confirmed chunks), to a vhost of
the benchmark's own."""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path

from django.conf import settings
from django.db import connection
from django_tenants.utils import schema_context
from psycopg import sql

from beat.amqp_writes import AmqpWrites
from beat.messages import build_message
from core.broker import amqp_connection
from core.clock import SystemClock
from core.redis import get_redis
from core.sql import pg_array, table
from jobs.services import Actor, job_create
from runs.ids import uuid7

from . import cpu
from .celery_tasks import PLAIN_COUNTER
from .processes import start_worker, stop, wait_until
from .world import bench_tenants, drop_bench_data

QUEUE, PLAIN_QUEUE = "runs.normal.0", "bench.plain"
# The extra workers' own queues: behind PgBouncer (--pgbouncer), and with the pooling
# backend connected directly (--pooled-direct), each measured beside the plain worker.
POOLED_QUEUE, POOLED_DIRECT_QUEUE = "runs.normal.1", "runs.normal.2"
Meter = Callable[[], AbstractContextManager]  # around a round's timed part (bench/cpu.py)


def run_messages(schema: str, ids: list[str], queue: str = QUEUE) -> list[bytes]:
    """The messages the leader would publish for these queued runs (attempt 1)."""
    return [
        build_message(
            task_name="runs.execute_run",
            task_id=run_id,
            args=[schema, run_id, 1],
            queue=queue,
            origin="bench",
        )
        for run_id in ids
    ]


AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/tickwork_bench")


def _amqp_setup(url: str) -> None:
    """The benchmark's vhost (made with rabbitmqctl when it is at hand) with its queues
    empty; `bench.plain` declared as the worker declares it."""
    vhost = url.rsplit("/", 1)[1]
    if shutil.which("rabbitmqctl") and vhost:
        subprocess.run(["rabbitmqctl", "-q", "add_vhost", vhost], capture_output=True, timeout=60)
        subprocess.run(
            ["rabbitmqctl", "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
            capture_output=True,
            timeout=60,
        )
    conn = amqp_connection(url)
    try:
        channel = conn.channel()
        for name in ["runs.0", "runs.1", "runs.2", "runs.3", PLAIN_QUEUE]:
            channel.queue_delete(name)
        channel.queue_declare(PLAIN_QUEUE, durable=True, auto_delete=False)
    finally:
        conn.collect()


_amqp_writes: AmqpWrites | None = None
PUBLISH_SECONDS: list[float] = []  # how long each round's publish took (the leader's path)


def _publish(client, queue: str, messages: list[bytes]) -> None:
    global _amqp_writes
    if settings.CELERY_BROKER_URL.startswith("amqp"):
        if _amqp_writes is None:
            _amqp_writes = AmqpWrites(client, "", None)
        _amqp_writes.push_messages([(queue, m) for m in messages])
        return
    pipe = client.pipeline(transaction=False)
    for start in range(0, len(messages), 1000):
        pipe.lpush(queue, *messages[start : start + 1000])
    pipe.execute()


def _plain_round(client, count: int, meter: Meter = contextlib.nullcontext) -> float:
    client.delete(PLAIN_COUNTER)
    messages = [
        build_message(
            task_name="bench.plain_noop",
            task_id=str(uuid.uuid4()),
            args=[],
            queue=PLAIN_QUEUE,
            origin="bench",
        )
        for _ in range(count)
    ]
    with meter():
        started = time.perf_counter()
        _publish(client, PLAIN_QUEUE, messages)
        assert wait_until(lambda: int(client.get(PLAIN_COUNTER) or 0) >= count, 600, 0.02)
        return count / (time.perf_counter() - started)


def _queued_runs(schema: str, job_id: int, count: int) -> list[str]:
    ids = [str(uuid7()) for _ in range(count)]
    query = sql.SQL(
        "INSERT INTO {} (id, job_id, trigger, scheduled_for, due_at, status, skip_reason, "
        "attempt, worker, error, created_at, queued_at) SELECT u, %s, 'manual', now(), now(), "
        "'queued', '', 1, '', '', now(), now() FROM unnest(%s::uuid[]) u"
    ).format(table(schema, "runs_run"))
    with connection.cursor() as cursor:
        cursor.execute(query, [job_id, ids])
    return ids


def _succeeded(schema: str, ids: str) -> int:
    query = sql.SQL(
        "SELECT count(*) FROM {} WHERE status = 'succeeded' AND id = ANY(%s::uuid[])"
    ).format(table(schema, "runs_run"))
    with connection.cursor() as cursor:
        cursor.execute(query, [ids])
        return cursor.fetchone()[0]


def _unfinished(schema: str) -> int:
    """Runs still queued or running, read through the status index, so a poll costs the
    remaining rows, not the round's (a poll by the round's ids cost PostgreSQL more CPU
    than the worker's own statements at 20,000 a round, on the same two cores)."""
    query = sql.SQL("SELECT count(*) FROM {} WHERE status IN ('queued', 'running')").format(
        table(schema, "runs_run")
    )
    with connection.cursor() as cursor:
        cursor.execute(query)
        return cursor.fetchone()[0]


def _last_finish(schema: str, ids: str) -> float:
    query = sql.SQL("SELECT max(finished_at) FROM {} WHERE id = ANY(%s::uuid[])").format(
        table(schema, "runs_run")
    )
    with connection.cursor() as cursor:
        cursor.execute(query, [ids])
        return cursor.fetchone()[0].timestamp()


def _ours_round(
    client,
    schema: str,
    job_id: int,
    count: int,
    queue: str = QUEUE,
    meter: Meter = contextlib.nullcontext,
) -> float:
    ids = _queued_runs(schema, job_id, count)
    messages = run_messages(schema, ids, queue)
    literal = pg_array(ids)
    # Metered from here on: not the rows' INSERT above, which is the leader's work.
    with meter():
        started = time.time()
        _publish(client, queue, messages)
        if queue == QUEUE:
            PUBLISH_SECONDS.append(time.time() - started)
        # Poll gently (the poll must not compete with the worker for the database), then
        # time the batch by its last finish as recorded by the worker.
        assert wait_until(lambda: _unfinished(schema) == 0, 600, 0.5)
    assert _succeeded(schema, literal) == count
    return count / (_last_finish(schema, literal) - started)


def _database_url(host: str, port: int) -> str:
    s = connection.settings_dict
    return f"postgresql://{s.get('USER') or 'postgres'}@{host}:{port}/{s['NAME']}"


def run(
    count: int = 5000,
    repeats: int = 3,
    concurrency: int = 2,
    broker: str = "redis",
    pgbouncer_pool: int = 0,
    pooled_direct: bool = False,
) -> dict:
    """`pgbouncer_pool`: also run a worker whose database is behind a transaction-pooling
    PgBouncer with this many server connections (DB_TRANSACTION_POOLING=1); `pooled_direct`:
    also one with DB_TRANSACTION_POOLING=1 connected to PostgreSQL directly (the backend's
    own cost, without PgBouncer's hop). Each is measured side by side with the plain one."""
    if (pgbouncer_pool or pooled_direct) and broker != "redis":
        raise SystemExit("--pgbouncer and --pooled-direct run on the Redis broker only")
    with contextlib.ExitStack() as stack:
        extras: list[tuple[str, str, dict[str, str]]] = []
        if pgbouncer_pool:
            from devstack.pgbouncer import running_pgbouncer, target_of

            pg_host, pg_port = target_of(connection.settings_dict)
            bouncer = stack.enter_context(
                running_pgbouncer(pool_size=pgbouncer_pool, pg_host=pg_host, pg_port=pg_port)
            )
            url = _database_url("127.0.0.1", bouncer.port)
            extras.append(("pgbouncer", POOLED_QUEUE, {"DATABASE_URL": url}))
        if pooled_direct:
            extras.append(("pooled_direct", POOLED_DIRECT_QUEUE, {}))
        result = _run(count, repeats, concurrency, broker, extras)
        if pgbouncer_pool:
            result["pgbouncer_pool"] = pgbouncer_pool
        return result


def _run(count: int, repeats: int, concurrency: int, broker: str, extras) -> dict:
    """`extras`: (label, queue, environment) of each worker with DB_TRANSACTION_POOLING=1."""
    client = get_redis()
    worker_env: dict[str, str] = {}
    queues = f"{QUEUE},{PLAIN_QUEUE}"
    if broker == "amqp":
        settings.CELERY_BROKER_URL = AMQP_URL
        worker_env["CELERY_BROKER_URL"] = AMQP_URL
        queues = f"runs.0,{PLAIN_QUEUE}"  # runs.normal.0 is shard 0's priority queue there
        _amqp_setup(AMQP_URL)
    [tenant] = bench_tenants(1)
    drop_bench_data(client, [tenant])
    with schema_context(tenant.schema_name):
        job = job_create(
            tenant=tenant,
            actor=Actor("bench"),
            clock=SystemClock(),
            data={
                "name": "noop",
                "schedule": None,
                "target": {"type": "task", "task": "builtin.noop"},
            },
        )
    client.flushdb()  # no leader runs here: the bench publishes as the leader would
    worker = start_worker(
        "-c",
        str(concurrency),
        "-Q",
        queues,
        "-I",
        "bench.celery_tasks",
        log=Path("bench/results/worker.log"),
        **worker_env,
    )
    others = [
        start_worker(
            "-c",
            str(concurrency),
            "-Q",
            queue,
            log=Path(f"bench/results/worker-{label}.log"),
            DB_TRANSACTION_POOLING="1",
            **env,
        )
        for label, queue, env in extras
    ]
    try:
        _plain_round(client, 50)  # warm-up: the worker is up and connected
        for _label, queue, _env in extras:
            _ours_round(client, tenant.schema_name, job.id, 50, queue)
        plain, ours = [], []
        # CPU per run of each kind of process, per round: where Tickwork's extra time goes
        # (docs/benchmarks.md, "Where the time goes").
        cpu_split: dict[str, list[dict[str, float]]] = {"plain": [], "tickwork": []}
        extra_rates: dict[str, list[float]] = {label: [] for label, _q, _e in extras}
        for _ in range(repeats):
            plain_meter = partial(cpu.per_item, worker.pid, count, cpu_split["plain"])
            ours_meter = partial(cpu.per_item, worker.pid, count, cpu_split["tickwork"])
            plain.append(_plain_round(client, count, plain_meter))
            ours.append(_ours_round(client, tenant.schema_name, job.id, count, meter=ours_meter))
            for label, queue, _env in extras:
                extra_rates[label].append(
                    _ours_round(client, tenant.schema_name, job.id, count, queue)
                )
    finally:
        for process in [worker, *others]:
            stop(process)
    result = {
        "broker": broker,
        "runs": count,
        "repeats": repeats,
        "worker_processes": concurrency,
        "plain_celery_per_s": statistics.median(plain),
        "tickwork_per_s": statistics.median(ours),
        "ratio": statistics.median(o / p for o, p in zip(ours, plain, strict=True)),
        "publish_per_s": count / statistics.median(PUBLISH_SECONDS),
        "cpu_us_per_run": {
            kind: {group: statistics.median(r[group] for r in rounds) for group in cpu.GROUPS}
            for kind, rounds in cpu_split.items()
        },
    }
    print(
        f"noop throughput on {broker}, {count:,} each, {concurrency} worker processes, median of "
        f"{repeats}: plain Celery {result['plain_celery_per_s']:,.0f}/s, Tickwork "
        f"{result['tickwork_per_s']:,.0f}/s, ratio {result['ratio']:.2f}; published at "
        f"{result['publish_per_s']:,.0f} messages/s",
        flush=True,
    )
    for kind, label in (("plain", "plain Celery"), ("tickwork", "Tickwork")):
        split = cpu.describe(result["cpu_us_per_run"][kind])
        print(f"CPU per run, {label}: {split}", flush=True)
    described = {
        "pgbouncer": "behind PgBouncer (transaction pooling, DB_TRANSACTION_POOLING=1)",
        "pooled_direct": "with DB_TRANSACTION_POOLING=1 connected directly (no PgBouncer)",
    }
    for label, rates in extra_rates.items():
        result[f"tickwork_{label}_per_s"] = statistics.median(rates)
        result[f"{label}_ratio"] = statistics.median(
            r / o for r, o in zip(rates, ours, strict=True)
        )
        print(
            f"the same worker {described[label]}: {result[f'tickwork_{label}_per_s']:,.0f}/s,"
            f" {result[f'{label}_ratio']:.2f} of direct",
            flush=True,
        )
    return result
