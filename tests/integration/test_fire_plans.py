"""The fire's main statement does work in proportion to the runs it is given, whatever the
planner believes about the tables (defect: a tenant's freshly filled tables, with no
statistics yet, made the plain-join form walk every job of the tenant and probe the runs
for each; 10,000 runs of one tenant fired at about 1,000 a second). Asserted on the rows
the plan really visited (EXPLAIN ANALYZE), never on a time."""

from __future__ import annotations

import json
from datetime import timedelta

from django.db import connection, transaction
from django_tenants.utils import schema_context

from beat import store
from bench.world import copy_jobs, index_jobs
from core.clock import FakeClock
from runs import states

from .helpers import new_engine, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)
JOBS = 3000


def _forget_statistics(schema: str) -> None:
    """As if the tables had just been filled: no row count and no column statistics."""
    with connection.cursor() as cursor:
        for name in ("runs_run", "jobs_job"):
            cursor.execute(
                "UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = %s::regclass",
                [f"{schema}.{name}"],
            )
            cursor.execute(
                "DELETE FROM pg_statistic WHERE starelid = %s::regclass", [f"{schema}.{name}"]
            )


def _rows_visited(plan: dict) -> int:
    """Rows every node produced, times its loops, over the whole plan."""
    own = plan.get("Actual Rows", 0) * plan.get("Actual Loops", 1)
    return own + sum(_rows_visited(child) for child in plan.get("Plans", []))


def _most_loops(plan: dict) -> int:
    """How many times the most repeated node ran."""
    return max([plan.get("Actual Loops", 1), *(_most_loops(c) for c in plan.get("Plans", []))])


def test_queueing_a_tenants_due_runs_is_linear_without_statistics(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    with schema_context(alpha.schema_name):
        copy_jobs(alpha, JOBS, START + timedelta(minutes=1), cron="* * * * *")
    engine = new_engine(redis_client, clock)
    index_jobs(redis_client, alpha)
    clock.set(START + timedelta(seconds=45))
    engine.materialise()
    due = runs_of(alpha, status=states.SCHEDULED)
    assert len(due) == JOBS
    chunk = [r.id for r in due[:2000]]
    schema = alpha.schema_name
    with transaction.atomic():
        _forget_statistics(schema)
        with connection.cursor() as cursor:
            cursor.execute(
                sql_text(cursor, schema),
                store.queue_unconstrained_params(
                    chunk, [1] * len(chunk), chunk, START + timedelta(minutes=1)
                ),
            )
            [[raw]] = cursor.fetchall()
        transaction.set_rollback(True)  # the statistics and the runs as they were
    plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    visited = _rows_visited(plan)
    # Linear: no node runs more often than once per given run (the plain-join form probed
    # the runs once per job of the tenant, each probe testing the whole array), and each
    # given run's row is read a few times (the CTE, its row, its job).
    assert _most_loops(plan) <= len(chunk), json.dumps(plan)[:2000]
    assert visited < 20 * len(chunk), visited


def sql_text(cursor, schema: str) -> str:
    query = store.queue_unconstrained_sql(schema).as_string(cursor.cursor)
    return "EXPLAIN (ANALYZE, FORMAT JSON) " + query
