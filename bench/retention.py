"""Run history retention: how fast a real leader prunes `runs` old runs (each with one
attempt), and its fire lag while it does, beside the same leader not pruning.

One tenant (`bench-retention`) gets `jobs` interval jobs firing every second, and `runs`
ended runs of HISTORY_JOBS other jobs that finished 31 to 60 days ago (2% dead, which stay
in the DLQ; 5% skipped, 3% cancelled, the rest succeeded), each with one attempt, loaded
by PostgreSQL itself (`INSERT ... SELECT generate_series`, in chunks, with every index of
the tables in place; ids time-ordered like the uuid7 ids runs get).

Then a real `manage.py runscheduler` (no workers: fair admission with room for every run)
leads twice: first with `RUN_RETENTION_DAYS=0` (nothing pruned) for `seconds`, then with
the default 30 days until the history is pruned. The fire lag is `queued_at -
scheduled_for` of the every-second jobs' runs in each phase; the pruned count is the
leader's own `tickwork_runs_pruned` counter, read from Redis every second. Before the
second phase, a few batches are also timed in this process (rolled back): what one batch
costs without the leader's pacing.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.db import connection, transaction
from psycopg import sql

from core.keys import index_built_key, leader_info_key, metrics_leader_key
from core.redis import get_redis
from core.sql import table
from runs import states
from runs.retention import prune_batch
from tenants.models import Tenant
from tenants.services import tenant_provision

from .processes import start_scheduler, stop, wait_until
from .world import BENCH_QUOTA, copy_jobs, index_jobs, percentile

SLUG = "bench-retention"
RESULTS = Path(__file__).resolve().parent / "results"
HISTORY_JOBS = 100
LOAD_CHUNK = 500_000
WARMUP_SECONDS = 3
SAMPLE_SECONDS = 0.25
PRUNED_FIELD = json.dumps(["tickwork_runs_pruned", [], "total", None])

# Run i of the history: its job is i % HISTORY_JOBS, its status by i % 100.
_LOAD = """
WITH src AS (
    SELECT i, %(first)s::timestamptz + (i * %(step)s) * interval '1 microsecond' AS ended
    FROM generate_series(%(start)s::bigint, %(stop)s::bigint - 1) i
), runs AS (
    INSERT INTO {runs} (id, job_id, trigger, scheduled_for, due_at, status, skip_reason,
                        attempt, worker, error, created_at, queued_at, started_at, finished_at)
    SELECT (lpad(to_hex((extract(epoch FROM ended) * 1000)::bigint), 12, '0')
            || substr(md5(i::text), 1, 20))::uuid,
           %(jobs)s[1 + i %% %(history)s], 'schedule', ended - interval '1 second',
           ended - interval '1 second',
           CASE WHEN i %% 100 < 2 THEN %(dead)s WHEN i %% 100 < 7 THEN %(skipped)s
                WHEN i %% 100 < 10 THEN %(cancelled)s ELSE %(succeeded)s END,
           CASE WHEN i %% 100 BETWEEN 2 AND 6 THEN 'overlap' ELSE '' END,
           1, 'bench', '', ended - interval '1 second', ended - interval '0.9 second',
           ended - interval '0.8 second', ended
    FROM src
    RETURNING id, started_at, finished_at, status
)
INSERT INTO {attempts} (run_id, number, outcome, worker, started_at, finished_at, error, output)
SELECT id, 1, CASE WHEN status = %(dead)s THEN %(failed)s ELSE %(ok)s END, 'bench',
       started_at, finished_at, '', ''
FROM runs
"""


def _status(i: int) -> str:
    rest = i % 100
    if rest < 2:
        return states.DEAD
    if rest < 7:
        return states.SKIPPED
    if rest < 10:
        return states.CANCELLED
    return states.SUCCEEDED


def expected_pruned(count: int) -> int:
    """Every prunable run, but for each job's newest ended run (the last HISTORY_JOBS)."""
    prunable = count - (count // 100) * 2 - min(count % 100, 2)  # all but the dead
    newest = range(max(0, count - HISTORY_JOBS), count)
    return prunable - sum(1 for i in newest if _status(i) in states.PRUNABLE)


def _tenant() -> Tenant:
    tenant = Tenant.objects.filter(slug=SLUG).first()
    if tenant is None:
        tenant = tenant_provision(slug=SLUG, admin_password="bench").tenant
    Tenant.objects.filter(id=tenant.id).update(max_concurrency=BENCH_QUOTA, run_retention_days=None)
    return tenant


def _exec(query, params=None) -> list:
    with connection.cursor() as cursor:
        cursor.execute(query, params or [])
        return cursor.fetchall() if cursor.description else []


def _reset(client, tenant: Tenant, jobs: int) -> tuple[list[int], datetime]:
    schema = tenant.schema_name
    names = ("runs_attempt", "runs_run", "runs_dagrun", "jobs_auditevent", "jobs_job")
    _exec(
        sql.SQL("TRUNCATE {} CASCADE").format(
            sql.SQL(", ").join(table(schema, name) for name in names)
        )
    )
    client.flushdb()
    # History jobs never fire (their next run is a year away); the others every second.
    copy_jobs(tenant, HISTORY_JOBS, datetime.now(UTC) + timedelta(days=365), name="history")
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=5)
    copy_jobs(tenant, jobs, first, spread_seconds=1, name="every-second")
    _exec(
        sql.SQL(
            "UPDATE {} SET interval_seconds = 1, anchor_at = %s, next_run_at = %s"
            " WHERE name LIKE 'every-second-%%'"
        ).format(table(schema, "jobs_job")),
        [first, first],
    )
    history = [
        row[0]
        for row in _exec(
            sql.SQL("SELECT id FROM {} WHERE name LIKE 'history-%%' ORDER BY id").format(
                table(schema, "jobs_job")
            )
        )
    ]
    index_jobs(client, tenant, where="name LIKE 'every-second-%%'")
    client.set(index_built_key(), "bench")
    return history, first


def _load(tenant: Tenant, count: int, history: list[int]) -> float:
    schema = tenant.schema_name
    started = time.perf_counter()
    first = datetime.now(UTC) - timedelta(days=60)
    step = int((29 * 86400 * 1e6) / max(count, 1))  # ends spread over 29 days
    params = {
        "first": first,
        "step": step,
        "jobs": history,
        "history": HISTORY_JOBS,
        "dead": states.DEAD,
        "skipped": states.SKIPPED,
        "cancelled": states.CANCELLED,
        "succeeded": states.SUCCEEDED,
        "failed": states.ATTEMPT_FAILED,
        "ok": states.ATTEMPT_SUCCEEDED,
    }
    query = sql.SQL(_LOAD).format(
        runs=table(schema, "runs_run"), attempts=table(schema, "runs_attempt")
    )
    _exec("SET statement_timeout = 0")
    for start in range(0, count, LOAD_CHUNK):
        _exec(query, {**params, "start": start, "stop": min(start + LOAD_CHUNK, count)})
    for name in ("runs_run", "runs_attempt"):
        _exec(sql.SQL("VACUUM ANALYZE {}").format(table(schema, name)))
    return time.perf_counter() - started


def _raw_batches(tenant: Tenant, batches: int = 3, limit: int = 5000) -> list[tuple]:
    """A few batches as the leader runs them, each rolled back: the cost of one batch."""
    took = []
    cutoff = datetime.now(UTC) - timedelta(days=30)
    for _ in range(batches):
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                started = time.perf_counter()
                done = prune_batch(cursor, tenant.schema_name, cutoff=cutoff, limit=limit)
                took.append((time.perf_counter() - started, done.runs))
                raise _Rollback
        except _Rollback:
            pass
    return took


class _Rollback(Exception):
    pass


def _pruned(client) -> float:
    return float(client.hget(metrics_leader_key(), PRUNED_FIELD) or 0)


def _lags(tenant: Tenant, since: datetime, until: datetime) -> list[float]:
    rows = _exec(
        sql.SQL(
            "SELECT extract(epoch FROM queued_at - scheduled_for) FROM {} r"
            " WHERE scheduled_for >= %s AND scheduled_for < %s AND trigger = 'schedule'"
            " AND job_id IN (SELECT id FROM {} WHERE name LIKE 'every-second-%%')"
        ).format(table(tenant.schema_name, "runs_run"), table(tenant.schema_name, "jobs_job")),
        [since, until],
    )
    return [float("inf") if r[0] is None else float(r[0]) for r in rows]


def _lag_figures(lags: list[float]) -> dict:
    return {
        "runs": len(lags),
        "lag_p50_ms": round(percentile(lags, 50) * 1000, 1),
        "lag_p99_ms": round(percentile(lags, 99) * 1000, 1),
        "lag_max_ms": round(max(lags) * 1000, 1) if lags else None,
    }


def _phase(client, name: str, env: dict, until) -> tuple[datetime, datetime, dict]:
    """A real leader with `env`, from when it leads until `until(progress, elapsed)` says
    stop; the fire lag counts from WARMUP_SECONDS after it took the lease (the takeover)."""
    client.delete(leader_info_key())
    process = start_scheduler(log=RESULTS / f"retention-{name}.log", **env)
    progress: dict = {"samples": []}
    try:
        assert wait_until(lambda: client.get(leader_info_key()), timeout=60), "no leader"
        since = datetime.now(UTC) + timedelta(seconds=WARMUP_SECONDS)
        started = time.monotonic()
        while True:
            progress["samples"].append((time.monotonic(), _pruned(client), datetime.now(UTC)))
            if until(progress, time.monotonic() - started):
                break
            time.sleep(SAMPLE_SECONDS)
        ended = datetime.now(UTC) - timedelta(seconds=2)  # what is due later may be unfired
    finally:
        stop(process)
    return since, ended, progress


def run(runs: int, jobs: int = 50, seconds: float = 60.0, max_prune_seconds: float = 3600.0):
    client = get_redis()
    tenant = _tenant()
    history, _first = _reset(client, tenant, jobs)
    load_seconds = _load(tenant, runs, history)
    expected = expected_pruned(runs)
    raw = _raw_batches(tenant)
    env = {
        "SCHEDULER_ADMISSION_BACKLOG_MIN": str(10**9),  # no workers: room for every run
        "SCHEDULER_MIN_INTERVAL_SECONDS": "1",
    }

    def for_seconds(_progress, elapsed):
        return elapsed >= seconds

    a_since, a_until, _ = _phase(client, "off", {**env, "RUN_RETENTION_DAYS": "0"}, for_seconds)
    base = _pruned(client)

    def pruned_all(progress, elapsed):
        done = progress["samples"][-1][1] - base
        samples = [s[:2] for s in progress["samples"]]
        stalled = len(samples) > 120 and samples[-120][1] == samples[-1][1]  # 30 s
        ended = done >= expected or elapsed >= max_prune_seconds or (stalled and done > 0)
        return ended

    b_since, b_until, progress = _phase(
        client, "on", {**env, "RUN_RETENTION_DAYS": "30"}, pruned_all
    )
    pruned = _pruned(client) - base
    samples = progress["samples"]
    end = next((s for s in samples if s[1] >= base + pruned), None)  # the first at the end
    span = (end[0] - samples[0][0]) if samples and end is not None else 0.0
    b_until = min(b_until, end[2]) if end is not None else b_until  # while it pruned
    left = _exec(
        sql.SQL("SELECT count(*) FROM {} WHERE finished_at < now() - interval '30 days'").format(
            table(tenant.schema_name, "runs_run")
        )
    )[0][0]
    return {
        "runs": runs,
        "load_seconds": round(load_seconds, 1),
        "load_rows_per_s": round(2 * runs / load_seconds) if load_seconds else None,
        "expected": expected,
        "pruned": int(pruned),
        "old_runs_left": left,  # dead runs and each job's newest
        "prune_seconds": round(span, 1),
        "pruned_rows_per_s": round(pruned / span) if span else None,
        "raw_batch_ms": [round(t * 1000, 1) for t, _n in raw],
        "raw_runs_per_s": round(sum(n for _t, n in raw) / sum(t for t, _n in raw)) if raw else None,
        "fire_lag_without_pruning": _lag_figures(_lags(tenant, a_since, a_until)),
        "fire_lag_while_pruning": _lag_figures(_lags(tenant, b_since, b_until)),
        "jobs_every_second": jobs,
    }
