"""What `scheduler_status` reports: leader, epoch, index state, and due work not yet fired,
counted from PostgreSQL (the truth), not from the index being checked."""

from __future__ import annotations

import json
from datetime import datetime

from django.db import DatabaseError, connection, transaction
from psycopg import sql

from core import index
from core.keys import (
    admission_stats_key,
    faults_key,
    index_built_key,
    index_key,
    leader_info_key,
    partition_count,
    rebuild_state_key,
)
from core.sql import table
from runs.status_sql import STATUS
from runs.usage import usage_of_tenants

from .lease import current_epoch
from .store import HELD_BY_PAUSE, SCHEDULABLE
from .tenant_directory import TenantDirectory

SCHEMAS_PER_STATEMENT = 200  # one UNION ALL statement per this many tenants


def _overdue_query(schema: str) -> sql.Composed:
    return sql.SQL(
        "SELECT (SELECT count(*) FROM {runs} r JOIN {jobs} j ON j.id = r.job_id"
        "  WHERE r.status IN {waiting} AND r.due_at <= %s AND NOT {held}),"
        " (SELECT min(r.due_at) FROM {runs} r JOIN {jobs} j ON j.id = r.job_id"
        "  WHERE r.status IN {waiting} AND r.due_at <= %s AND NOT {held}),"
        f" (SELECT count(*) FROM {{jobs}} WHERE {SCHEDULABLE} AND next_run_at <= %s),"
        f" (SELECT min(next_run_at) FROM {{jobs}} WHERE {SCHEDULABLE})"
    ).format(
        runs=table(schema, "runs_run"),
        jobs=table(schema, "jobs_job"),
        held=sql.SQL(HELD_BY_PAUSE),
        **STATUS,
    )


def _rows(schemas: list[str], now: datetime) -> tuple[list[tuple], list[str]]:
    """The overdue figures of each schema; a schema that cannot be read is listed apart
    (and does not hide the others)."""
    query = sql.SQL(" UNION ALL ").join(_overdue_query(s) for s in schemas)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(query, [now, now, now] * len(schemas))
            return cursor.fetchall(), []
    except DatabaseError:
        if len(schemas) == 1:
            return [], schemas
    rows, broken = [], []
    for schema in schemas:
        more, bad = _rows([schema], now)
        rows += more
        broken += bad
    return rows, broken


def _overdue(now: datetime) -> dict:
    """Runs waiting past their due time and schedulable jobs whose next slot passed without
    being materialised, over every tenant, with the oldest of each."""
    runs = jobs = 0
    oldest_run = oldest_job = None
    unreadable: list[str] = []
    schemas = [schema for _, schema in TenantDirectory().all()]
    for start in range(0, len(schemas), SCHEMAS_PER_STATEMENT):
        rows, broken = _rows(schemas[start : start + SCHEMAS_PER_STATEMENT], now)
        unreadable += broken
        for n_runs, first_run, n_jobs, first_job in rows:
            runs += n_runs
            jobs += n_jobs
            if first_run is not None and (oldest_run is None or first_run < oldest_run):
                oldest_run = first_run
            if n_jobs and (oldest_job is None or first_job < oldest_job):
                oldest_job = first_job
    return {
        "runs": runs,
        "oldest_run": oldest_run,
        "jobs": jobs,
        "oldest_job": oldest_job,
        "unreadable": unreadable,
    }


def overdue_query(schema: str) -> sql.Composed:
    """One schema's due-but-unfired figures (count and oldest of runs, then of jobs), with
    three `now` parameters: for /metrics, which reads them with its other facts."""
    return _overdue_query(schema)


def tenant_usage_rows(now: datetime) -> list[dict]:
    """Per tenant: its quota and weight, runs in flight and waiting, the oldest wait, and
    fire and start lag over the last five minutes (PostgreSQL's figures)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, slug, schema_name, max_concurrency, weight, suspended_at IS NOT NULL"
            " FROM public.tenants_tenant WHERE schema_name <> 'public' ORDER BY slug"
        )
        tenants = cursor.fetchall()
    usage = usage_of_tenants([(t[0], t[2]) for t in tenants], now)
    rows = []
    for tenant_id, slug, _schema, max_concurrency, weight, suspended in tenants:
        row = {
            "tenant": slug,
            "max_concurrency": max_concurrency,
            "weight": weight,
            "suspended": suspended,
        }
        found = usage.get(tenant_id)
        if found is None:
            row["unreadable"] = True
        else:
            row.update(
                in_flight=found.in_flight,
                waiting=found.waiting,
                oldest_wait_seconds=found.oldest_wait_seconds,
                fire_lag_p50=found.fire_lag.p50,
                fire_lag_p99=found.fire_lag.p99,
                start_lag_p50=found.start_lag.p50,
                start_lag_p99=found.start_lag.p99,
            )
        rows.append(row)
    return rows


def partition_views(client) -> list[dict]:
    """Each partition's lease holder and indexes as Redis has them, all partitions in one
    pipeline (the only one, with SCHEDULER_PARTITIONS = 1)."""
    count = partition_count()
    pipe = client.pipeline(transaction=False)
    for partition in range(count):
        pipe.get(leader_info_key(partition))
        pipe.get(faults_key(partition))
        pipe.hgetall(rebuild_state_key(partition))
        pipe.get(admission_stats_key(partition))
        pipe.exists(index_built_key(partition))
        pipe.zcard(index_key(partition))
        pipe.zcard(index.runs_index_key(partition))
    results = pipe.execute()
    views = []
    for partition in range(count):
        raw_leader, faults, rebuild, admission, built, size, runs_size = results[
            7 * partition : 7 * partition + 7
        ]
        views.append(
            {
                "partition": partition,
                "leader": raw_leader.decode() if raw_leader else None,
                "index_built": bool(built),
                "index_rebuilding": bool(rebuild),
                "index_rebuild_phases": (
                    json.loads(rebuild[b"phases"]) if b"phases" in rebuild else []
                ),
                "index_size": size,
                "runs_index_size": runs_size,
                "failing_tenants": json.loads(faults) if faults else [],
                "admission": json.loads(admission) if admission else None,
            }
        )
    return views


def partition_status(client) -> list[dict]:
    """`partition_views` with each partition's epoch and last holder (PostgreSQL)."""
    out = []
    for view in partition_views(client):
        lease = current_epoch(view["partition"])
        out.append(
            {
                **view,
                "epoch": lease[0] if lease else None,
                "last_holder": lease[1] if lease else None,
            }
        )
    return out


def merged_admission(parts: list[dict]) -> dict | None:
    """The partitions' admission views as one: broker room summed, tenants together (each
    tenant is in one partition)."""
    views = [p["admission"] for p in parts if p["admission"] is not None]
    if not views:
        return None
    rooms = [v["room"] for v in views if v.get("room") is not None]
    return {
        "at": min(v.get("at", 0) for v in views),
        "room": sum(rooms) if rooms else None,
        "tenants": {t: row for v in views for t, row in v["tenants"].items()},
        "partitions_reporting": len(views),
    }


def scheduler_status(client, now: datetime) -> dict:
    """The fleet's state. With one partition the top-level fields are its lease and
    indexes; with more, `leader` and `epoch` name partition 0's and the index fields are
    totals, each partition's own under `partitions`."""
    parts = partition_status(client)
    overdue = _overdue(now)
    oldest = [overdue["oldest_run"], overdue["oldest_job"]]
    lags = [now.timestamp() - t.timestamp() for t in oldest if t is not None]
    first = parts[0]
    return {
        "leader": first["leader"],
        "epoch": first["epoch"],
        "last_holder": first["last_holder"],
        "partition_count": len(parts),
        "partitions_led": sum(1 for p in parts if p["leader"]),
        "index_built": all(p["index_built"] for p in parts),
        "index_rebuilding": any(p["index_rebuilding"] for p in parts),
        "index_rebuild_phases": (
            first["index_rebuild_phases"]
            if len(parts) == 1
            else sorted({ph for p in parts for ph in p["index_rebuild_phases"]})
        ),
        "index_size": sum(p["index_size"] for p in parts),
        "runs_index_size": sum(p["runs_index_size"] for p in parts),
        "due_unfired_runs": overdue["runs"],
        "due_unmaterialised_jobs": overdue["jobs"],
        "oldest_unfired_lag_seconds": round(max(lags), 3) if lags else None,
        "failing_tenants": [f for p in parts for f in p["failing_tenants"]],
        "unreadable_schemas": overdue["unreadable"],
        # The leaders' own view of admission: broker room, and per tenant id what it
        # counts in flight and holds waiting (null when no leader published one lately).
        "admission": first["admission"] if len(parts) == 1 else merged_admission(parts),
        "partitions": [
            {k: v for k, v in p.items() if k not in ("admission", "failing_tenants")} for p in parts
        ],
        "tenants": tenant_usage_rows(now),
    }
