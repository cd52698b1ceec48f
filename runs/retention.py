"""Deleting old run history, one bounded batch at a time (the leader's retention calls it,
`beat/retention.py`).

What a batch deletes: runs whose status is `PRUNABLE` (succeeded, skipped, cancelled: dead
runs stay in the DLQ until replayed or discarded) that finished before the cutoff, with
their attempts, except

- each job's newest ended run (by `scheduled_for`): the jobs list and the API show it as
  the job's last run however long ago it was;
- runs of a DAG run that is still running, or that holds a dead run (a replay of it
  reopens the DAG run, which then counts its runs again).

Runs are taken oldest end first on `run_finished_idx`, `FOR UPDATE SKIP LOCKED`: a row
another transaction holds is left for a later batch, so a batch never waits for a row lock
and locks only the rows it deletes (ended runs, which nothing else writes). A run and its
attempts go in the same statement. DAG runs that ended before the cutoff and have no run
left go in batches the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import sql

from core.sql import table

from . import states
from .status_sql import STATUS

_PRUNE_RUNS = """
WITH doomed AS (
    SELECT r.id FROM {runs} r
    WHERE r.status IN {prunable} AND r.finished_at < %(cutoff)s
      AND EXISTS (
          SELECT 1 FROM {runs} n
          WHERE n.job_id = r.job_id AND n.scheduled_for > r.scheduled_for
            AND n.status IN {terminal})
      AND (r.dag_run IS NULL OR (
          NOT EXISTS (SELECT 1 FROM {dags} d WHERE d.id = r.dag_run AND d.status = %(dag_running)s)
          AND NOT EXISTS (
              SELECT 1 FROM {runs} x WHERE x.dag_run = r.dag_run AND x.status = {dead})))
    ORDER BY r.finished_at
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
), gone_attempts AS (
    DELETE FROM {attempts} a USING doomed WHERE a.run_id = doomed.id RETURNING 1
), gone_runs AS (
    DELETE FROM {runs} r USING doomed WHERE r.id = doomed.id RETURNING 1
)
SELECT (SELECT count(*) FROM gone_runs), (SELECT count(*) FROM gone_attempts)
"""

_PRUNE_DAG_RUNS = """
DELETE FROM {dags} WHERE id IN (
    SELECT d.id FROM {dags} d
    WHERE d.status <> %(dag_running)s AND d.started_at < %(cutoff)s AND d.finished_at < %(cutoff)s
      AND NOT EXISTS (SELECT 1 FROM {runs} r WHERE r.dag_run = d.id)
    ORDER BY d.started_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
"""


@dataclass(frozen=True)
class Pruned:
    runs: int = 0
    attempts: int = 0
    dag_runs: int = 0


def prune_batch(cursor, schema: str, *, cutoff: datetime, limit: int) -> Pruned:
    """Delete up to `limit` old runs of the schema (with their attempts), and, once no
    more runs are old enough, up to `limit` DAG runs left empty. In the caller's
    transaction."""
    tables = {
        "runs": table(schema, "runs_run"),
        "attempts": table(schema, "runs_attempt"),
        "dags": table(schema, "runs_dagrun"),
    }
    params = {"cutoff": cutoff, "limit": limit, "dag_running": states.DAG_RUNNING}
    # The planner's cost for a batch over millions of runs crosses jit_above_cost, and
    # compiling it took longer than running it (60 of 150 ms for 5,000 runs).
    cursor.execute("SELECT set_config('jit', 'off', true)")
    cursor.execute(sql.SQL(_PRUNE_RUNS).format(**tables, **STATUS), params)
    runs, attempts = cursor.fetchone()
    dag_runs = 0
    if runs < limit:
        cursor.execute(sql.SQL(_PRUNE_DAG_RUNS).format(**tables), params)
        dag_runs = cursor.rowcount
    return Pruned(runs=runs, attempts=attempts, dag_runs=dag_runs)
