"""What one leader statement over a chunk of tenant schemas costs: the grouped job lock of a
materialise (`store.lock_jobs_of_schemas`), the same lock as it was before ADR 0024 (the
jobs' exclusion calendars read in it by a correlated subquery), the relay sweep's
check of a chunk (`sweeps.any_waiting_query`), and the fire's statements for small
tenants' first attempts (the read and the write of a publication first, ADR 0021, against
the one write of ADR 0031). Each is timed through Django as the leader
runs it, cold (the first statement of a fresh session over schemas it has not touched:
their catalog entries are loaded) and warm (the median of `repeats` more); the lock is
explained (PostgreSQL's planning and execution time), and the Python that composes it is
timed on its own.

It reads the `bench-m-*` tenants (`make bench ARGS="many-tenants --keep"` leaves 10,000;
the missing ones are provisioned), one slice of `schemas` tenants per statement, so that
each cold figure is of schemas the session has never read. The locks are rolled back.
"""

from __future__ import annotations

import re
import statistics
import time
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection, transaction
from psycopg import sql

from beat import store, sweeps
from core.sql import pg_array, table, tagged_ctes

from .tenant_upgrade import bench_m_tenants


def _lock_with_calendars_joined(wanted: list[tuple[str, list[int]]]) -> tuple[sql.Composed, list]:
    """The grouped lock as it was before ADR 0024: each job's calendars read by a
    correlated subquery in the lock statement itself, so every schema's two calendar
    tables are planned and opened whether a job has a calendar or not."""
    cols = sql.SQL(", ").join(sql.SQL("j.{}").format(sql.Identifier(c)) for c in store.JOB_COLUMNS)
    ctes = sql.SQL(", ").join(
        sql.SQL(
            "l{n} AS (SELECT {cols}, (SELECT json_agg(json_build_array(c.name, c.dates, c.ranges))"
            " FROM {links} jc JOIN {calendars} c ON c.id = jc.exclusioncalendar_id"
            " WHERE jc.job_id = j.id) AS calendars"
            " FROM {jobs} j WHERE j.id = ANY(%s::bigint[]) FOR UPDATE OF j SKIP LOCKED)"
        ).format(
            n=sql.SQL(str(n)),
            cols=cols,
            jobs=table(schema, "jobs_job"),
            links=table(schema, "jobs_job_calendars"),
            calendars=table(schema, "jobs_exclusioncalendar"),
        )
        for n, (schema, _ids) in enumerate(wanted)
    )
    reads = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {n}, l{n}.* FROM l{n}").format(n=sql.SQL(str(n)))
        for n in range(len(wanted))
    )
    return sql.SQL("WITH {} {}").format(ctes, reads), [pg_array(ids) for _s, ids in wanted]


def _job_ids(schemas: list[str]) -> list[tuple[str, list[int]]]:
    query = sql.SQL(" UNION ALL ").join(
        sql.SQL("(SELECT {s}, min(id) FROM {jobs})").format(
            s=sql.Literal(s), jobs=table(s, "jobs_job")
        )
        for s in schemas
    )
    with connection.cursor() as cursor:
        cursor.execute(query)
        return [(s, [i] if i is not None else []) for s, i in cursor.fetchall()]


def _run_ids(schemas: list[str]) -> list[tuple[str, list, list[int]]]:
    """A run of each schema (its latest) and its job: what the fire's statements are given."""
    query = sql.SQL(" UNION ALL ").join(
        sql.SQL("(SELECT {s}, id, job_id FROM {runs} ORDER BY scheduled_for DESC LIMIT 1)").format(
            s=sql.Literal(s), runs=table(s, "runs_run")
        )
        for s in schemas
    )
    with connection.cursor() as cursor:
        cursor.execute(query)
        found = {s: ([i], [j]) for s, i, j in cursor.fetchall()}
    return [(s, *found.get(s, ([], []))) for s in schemas]


def _read_then_mark(wanted: list[tuple[str, list, list[int]]]) -> None:
    """The fire's two statements for first attempts published first (ADR 0021, 0023): the
    read before the push, and the write after it (one transaction each in the leader)."""
    cursor = connection.cursor()
    store.publishable_runs_of_schemas(cursor, [(s, runs) for s, runs, _jobs in wanted])
    store.mark_published_queued_of_schemas(cursor, [(s, runs) for s, runs, _jobs in wanted])


def _retries_statement_grouped(wanted: list[tuple[str, list, list[int]]]) -> None:
    """The first form tried for ADR 0031, not kept: the retries' one-statement path
    (`store.queue_unconstrained_sql`) for each schema, grouped as data-modifying CTEs."""
    query = tagged_ctes([store.queue_unconstrained_sql(s) for s, _runs, _jobs in wanted])
    now = datetime.now(UTC)
    params = [
        p
        for _s, runs, _jobs in wanted
        for p in store.queue_unconstrained_params(runs, [1] * len(runs), [], now)
    ]
    connection.cursor().execute(query, params)


def _timed(run, repeats: int) -> dict:
    """Cold: the first call in a fresh session; warm: the median of `repeats` more."""
    connection.close()
    times = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        with transaction.atomic():
            run()
            transaction.set_rollback(True)
        times.append(time.perf_counter() - started)
    return {
        "cold_ms": round(times[0] * 1000, 1),
        "warm_ms_p50": round(statistics.median(times[1:]) * 1000, 2),
    }


def _explained(wanted: list[tuple[str, list[int]]]) -> dict:
    """Planning and execution of the grouped lock, warm (the schemas read just before)."""
    query, params = store.lock_jobs_of_schemas_sql(wanted)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(query, params)
        cursor.execute(sql.SQL("EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON) ") + query, params)
        text = "\n".join(row[0] for row in cursor.fetchall())
        transaction.set_rollback(True)
    found = dict(re.findall(r"(Planning|Execution) Time: ([\d.]+) ms", text))
    return {"planning_ms": float(found["Planning"]), "execution_ms": float(found["Execution"])}


def _composed(wanted: list[tuple[str, list[int]]], repeats: int) -> float:
    """The leader's Python part: composing the grouped lock and rendering it to bytes."""
    cursor = connection.cursor().cursor
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        query, _params = store.lock_jobs_of_schemas_sql(wanted)
        query.as_bytes(cursor)
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 2)


def run(schemas: int = 25, repeats: int = 5, tenants: int = 100) -> dict:
    # As in production: Django's debug cursor formats every statement it runs (`make
    # bench` sets DEBUG), a large part of the time of one this big.
    debug, settings.DEBUG = settings.DEBUG, False
    try:
        return _run(schemas, repeats, tenants)
    finally:
        settings.DEBUG = debug


def _run(schemas: int, repeats: int, tenants: int) -> dict:
    count = max(tenants, 6 * schemas)
    all_tenants, made = bench_m_tenants(count)
    names = [t.schema_name for t in all_tenants]
    slices = [names[n * schemas : (n + 1) * schemas] for n in range(6)]
    published, written, tried = (_run_ids(s) for s in slices[3:6])
    locks, bare = (_job_ids(s) for s in slices[:2])
    now = datetime.now(UTC)
    chunk = [(n, s) for n, s in enumerate(slices[2])]
    result = {
        "schemas_per_statement": schemas,
        "tenants_read": len(names),
        "provisioning": made,
        "lock": _timed(lambda: store.lock_jobs_of_schemas(connection.cursor(), locks), repeats),
        "lock_with_calendars_joined": _timed(
            lambda: connection.cursor().execute(*_lock_with_calendars_joined(bare)), repeats
        ),
        "relay_check": _timed(
            lambda: sweeps.rows_by_tenant(chunk, sweeps.any_waiting_query, [now]), repeats
        ),
        # The fire's statements for small tenants' first attempts: published first (a read,
        # then a write), or written first (ADR 0031). Rolled back, as the rest.
        "fire_read_then_mark": _timed(lambda: _read_then_mark(published), repeats),
        "fire_write_first": _timed(
            lambda: store.queue_first_attempts_of_schemas(connection.cursor(), written), repeats
        ),
        "fire_write_first_as_first_tried": _timed(
            lambda: _retries_statement_grouped(tried), repeats
        ),
    }
    result["lock_explained"] = _explained(locks)
    result["lock_composed_ms_p50"] = _composed(locks, repeats)
    print(result, flush=True)
    return result
