"""A tenant's use of the service right now, from PostgreSQL (the truth, whoever leads):
runs in flight against its quota, runs waiting for admission and the oldest wait, and
fire lag (due to published) and start lag (due to started) over a recent window."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError, connection, transaction
from psycopg import sql

from core.sql import table

from . import states
from .status_sql import HELD_BY_PAUSE, STATUS

WINDOW_SECONDS = 300

_USAGE_SQL = """
SELECT
  (SELECT count(*) FROM {runs} WHERE status IN {active}),
  (SELECT count(*) FROM {runs} r JOIN {jobs} j ON j.id = r.job_id
    WHERE r.status IN {waiting} AND r.due_at <= %(now)s AND NOT {held}),
  (SELECT min(r.due_at) FROM {runs} r JOIN {jobs} j ON j.id = r.job_id
    WHERE r.status IN {waiting} AND r.due_at <= %(now)s AND NOT {held}),
  l.runs, l.fire[1], l.fire[2], l.start[1], l.start[2]
FROM (
  SELECT count(*) AS runs,
    percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (
      ORDER BY extract(epoch FROM queued_at - due_at)) AS fire,
    percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (
      ORDER BY extract(epoch FROM started_at - due_at)) AS start
  FROM {runs}
  WHERE status = ANY(%(statuses)s) AND scheduled_for >= %(since)s AND scheduled_for <= %(now)s
    AND queued_at IS NOT NULL
) l
"""


@dataclass(frozen=True)
class Lag:
    p50: float | None
    p99: float | None


@dataclass(frozen=True)
class Usage:
    in_flight: int
    waiting: int
    oldest_wait_seconds: float | None
    window_seconds: int
    runs_in_window: int
    fire_lag: Lag
    start_lag: Lag


def _query(schema: str) -> sql.Composed:
    return sql.SQL(_USAGE_SQL).format(
        runs=table(schema, "runs_run"),
        jobs=table(schema, "jobs_job"),
        held=sql.SQL(HELD_BY_PAUSE),
        **STATUS,
    )


def _rounded(value) -> float | None:
    return None if value is None else round(float(value), 3)


def _params(now: datetime) -> dict:
    return {
        "now": now,
        "since": now - timedelta(seconds=WINDOW_SECONDS),
        "statuses": list(states.ALL),
    }


def _usage(row: tuple, now: datetime) -> Usage:
    in_flight, waiting, oldest, runs, fire50, fire99, start50, start99 = row
    return Usage(
        in_flight=in_flight,
        waiting=waiting,
        oldest_wait_seconds=_rounded((now - oldest).total_seconds()) if oldest else None,
        window_seconds=WINDOW_SECONDS,
        runs_in_window=runs,
        fire_lag=Lag(_rounded(fire50), _rounded(fire99)),
        start_lag=Lag(_rounded(start50), _rounded(start99)),
    )


def tenant_usage(schema: str, now: datetime) -> Usage:
    """`schema`'s usage at `now`. (Every status is named so that the window is read
    through the (status, scheduled_for) index: a range per status, not a full scan.)"""
    with connection.cursor() as cursor:
        cursor.execute(_query(schema), _params(now))
        return _usage(cursor.fetchone(), now)


SCHEMAS_PER_STATEMENT = 25  # about 18 locks per schema: far below the shared lock table


def usage_of_tenants(tenants: list[tuple[int, str]], now: datetime) -> dict[int, Usage | None]:
    """Each tenant's usage, 25 tenants per statement; None for one whose schema
    cannot be read (it hides no other)."""
    out: dict[int, Usage | None] = {}
    for start in range(0, len(tenants), SCHEMAS_PER_STATEMENT):
        chunk = tenants[start : start + SCHEMAS_PER_STATEMENT]
        query = sql.SQL(" UNION ALL ").join(
            sql.SQL("(SELECT {tenant}::bigint, q.* FROM ({q}) q)").format(
                tenant=sql.Literal(tenant_id), q=_query(schema)
            )
            for tenant_id, schema in chunk
        )
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(query, _params(now))
                for tenant_id, *row in cursor.fetchall():
                    out[tenant_id] = _usage(tuple(row), now)
        except DatabaseError:
            for tenant_id, schema in chunk:
                try:
                    with transaction.atomic():
                        out[tenant_id] = tenant_usage(schema, now)
                except DatabaseError:
                    out[tenant_id] = None
    return out
