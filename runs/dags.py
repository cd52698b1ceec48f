"""DAG runs: start one when a run of a job with downstreams is first claimed, and settle
it (create, skip or revive its downstream runs, set its status) whenever one of its runs
ends.

Who settles: the worker right after it records an attempt's end (the common path), the
run services after a cancel or a replay, and the leader's sweep for any DAG run whose
ended runs no longer match its last settle (a worker killed between its finish and its
settle, a run reaped or cancelled at admission). Settling is safe from anywhere, at any
time, any number of times:

- a downstream run is created at most once: `run_once_per_dag_run`, a unique index on
  (dag_run, job) for dependency runs, refuses the second insert, so two upstreams
  finishing at the same instant on two workers create one run between them: the
  database decides;
- each settle reads the committed state after the end it reacts to has committed, so of
  two upstreams finishing together at least the later one's settle sees both succeeded
  (READ COMMITTED takes a fresh snapshot per statement);
- settles of one DAG run are ordered by its row lock (`FOR UPDATE`, bounded by the
  session's lock_timeout), so that a skip or a revive is decided on the latest state
  rather than on one a concurrent settle is changing; `runs/dag_progress.py` re-derives
  everything from the runs, so a late settle repeats nothing and undoes nothing.

Raw SQL on schema-qualified tables: workers and the leader serve every tenant without
switching the connection's schema.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from psycopg import sql
from psycopg.types.json import Jsonb

from core.sql import per_schema, pg_array, table

from . import states
from .dag_progress import NodeRun, Step, settle
from .ids import uuid7
from .notify import enqueue_runs_on_commit, tenant_id_for
from .status_sql import STATUS

log = logging.getLogger("runs.dags")

_DESCENDANTS_SQL = """
WITH RECURSIVE down(id) AS (
    SELECT %(job)s::bigint
    UNION
    SELECT d.downstream_id FROM {deps} d
    JOIN down ON d.upstream_id = down.id
    JOIN {jobs} j ON j.id = d.downstream_id AND j.deleted_at IS NULL
)
SELECT d.upstream_id, d.downstream_id FROM {deps} d
WHERE d.upstream_id IN (SELECT id FROM down) AND d.downstream_id IN (SELECT id FROM down)
ORDER BY d.upstream_id, d.downstream_id
"""


def _json(value: Any) -> Any:
    # Django registers no jsonb loader on its connections: raw queries return the text.
    return json.loads(value) if isinstance(value, str | bytes) else value


def _ordered_nodes(root: int, edges: list[tuple[int, int]]) -> list[int]:
    """The root, then the others in a topological order (upstreams before downstreams)."""
    import graphlib

    graph: dict[int, set[int]] = {root: set()}
    for upstream, downstream in edges:
        graph.setdefault(downstream, set()).add(upstream)
        graph.setdefault(upstream, set())
    return [root, *(n for n in graphlib.TopologicalSorter(graph).static_order() if n != root)]


def dag_start(
    *, schema: str, run_id: Any, job_id: int, trigger: str, started_at: datetime
) -> Any | None:
    """Start the DAG run of a run of a job with downstreams (its first claim): snapshot
    the job and everything downstream of it, and mark the run as its root. Returns the
    DAG run id, or None when the job has no live downstream any more."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            sql.SQL(_DESCENDANTS_SQL).format(
                deps=table(schema, "jobs_dependency"), jobs=table(schema, "jobs_job")
            ),
            {"job": job_id},
        )
        edges = [(u, d) for u, d in cursor.fetchall()]
        if not edges:
            return None
        dag_run_id = uuid7()
        cursor.execute(
            sql.SQL("UPDATE {} SET dag_run = %s WHERE id = %s AND dag_run IS NULL").format(
                table(schema, "runs_run")
            ),
            [dag_run_id, run_id],
        )
        if cursor.rowcount != 1:
            return None  # another claim of this run started it (never: claims are exclusive)
        cursor.execute(
            sql.SQL(
                "INSERT INTO {} (id, root_job_id, root_run, trigger, status, nodes, edges,"
                " started_at, settled_terminal, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 0, now())"
            ).format(table(schema, "runs_dagrun")),
            [
                dag_run_id,
                job_id,
                run_id,
                trigger,
                states.DAG_RUNNING,
                Jsonb(_ordered_nodes(job_id, edges)),
                Jsonb([list(e) for e in edges]),
                started_at,
            ],
        )
    return dag_run_id


@dataclass(frozen=True)
class Settled:
    step: Step
    created: int  # dependency runs inserted now (scheduled or, for a deleted job, cancelled)
    # (the `step` is the last one: a settle that created a deleted job's run as cancelled
    # settles again at once, so that its downstreams are skipped in the same transaction)


# created_at is the insert's own time (clock_timestamp), not the transaction's start
# (now()): a settle's later statements see ends committed after it began, and a run
# created from them must not read as created before the end it follows.
_INSERT_SQL = """
INSERT INTO {runs} (id, job_id, trigger, scheduled_for, due_at, status, skip_reason, attempt,
                    worker, error, created_at, finished_at, dag_run)
SELECT u.id, u.job_id, 'dependency', %(now)s, %(now)s, u.status, u.reason, 1, '', u.error,
       clock_timestamp(), CASE WHEN u.status <> {scheduled} THEN %(now)s END, %(dag)s
FROM unnest(%(ids)s::uuid[], %(jobs)s::bigint[], %(statuses)s::text[], %(reasons)s::text[],
            %(errors)s::text[]) AS u(id, job_id, status, reason, error)
ON CONFLICT (dag_run, job_id) WHERE trigger = 'dependency' DO NOTHING
RETURNING id, job_id, status, due_at
"""


_ALL_ENDED_SQL = """
SELECT (SELECT count(*) FROM {runs} r WHERE r.dag_run = g.id AND r.status IN {terminal})
       >= jsonb_array_length(g.nodes)
FROM {dags} g WHERE g.id = %s AND g.status = {dag_running}
"""


def dag_settle(*, schema: str, dag_run_id: Any, now: datetime) -> Settled | None:
    """Bring the DAG run up to date with its runs (see the module docstring). None if it
    does not exist.

    A settle that leaves the DAG run running looks once more, on a fresh snapshot, whether
    every job has ended meanwhile: a leaf that ended while this settle held the row may
    have counted before this settle's own records (an upstream_failed skip) committed,
    and skipped its settle as not the last (`dag_settle_after_end`); then this one is."""
    settled = _settle_once(schema=schema, dag_run_id=dag_run_id, now=now)
    if settled is not None and settled.step.status == states.DAG_RUNNING:
        with connection.cursor() as cursor:
            cursor.execute(
                sql.SQL(_ALL_ENDED_SQL).format(
                    dags=table(schema, "runs_dagrun"),
                    runs=table(schema, "runs_run"),
                    dag_running=sql.Literal(states.DAG_RUNNING),
                    **STATUS,
                ),
                [dag_run_id],
            )
            row = cursor.fetchone()
        if row is not None and row[0]:
            settled = _settle_once(schema=schema, dag_run_id=dag_run_id, now=now)
    return settled


def _settle_once(*, schema: str, dag_run_id: Any, now: datetime) -> Settled | None:
    runs_table, dag_table = table(schema, "runs_run"), table(schema, "runs_dagrun")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("SELECT nodes, edges, status FROM {} WHERE id = %s FOR UPDATE").format(
                dag_table
            ),
            [dag_run_id],
        )
        row = cursor.fetchone()
        if row is None:
            return None
        nodes, edges = _json(row[0]), [tuple(e) for e in _json(row[1])]
        cursor.execute(
            sql.SQL("SELECT job_id, status, skip_reason FROM {} WHERE dag_run = %s").format(
                runs_table
            ),
            [dag_run_id],
        )
        runs = {job_id: NodeRun(status, reason) for job_id, status, reason in cursor.fetchall()}
        created = 0
        while True:  # again when a run was created ended (a deleted job's: cancelled)
            step = settle(nodes, edges, runs)
            _revive(cursor, runs_table, dag_run_id, step.revive, runs)
            inserted = _insert_runs(cursor, schema, dag_run_id, step, now)
            created += sum(1 for status in inserted.values() if status != states.SKIPPED)
            for job_id, status in inserted.items():
                runs[job_id] = NodeRun(status)
            for job_id in step.skip:
                runs.setdefault(job_id, NodeRun(states.SKIPPED, states.SKIP_UPSTREAM_FAILED))
            if states.CANCELLED not in inserted.values():
                break
        ended = sum(1 for r in runs.values() if r.status in states.TERMINAL)
        running = step.status == states.DAG_RUNNING
        cursor.execute(
            sql.SQL(
                "UPDATE {} SET status = %s, settled_terminal = %s, finished_at = "
                + ("NULL" if running else "coalesce(finished_at, %s)")
                + " WHERE id = %s"
            ).format(dag_table),
            [step.status, ended, *([] if running else [now]), dag_run_id],
        )
    return Settled(step, created)


_ENDED_LEAF_SQL = """
SELECT NOT EXISTS (
           SELECT 1 FROM jsonb_array_elements(g.edges) e WHERE (e->>0)::bigint = %(job)s)
       AND (SELECT count(*) FROM {runs} r WHERE r.dag_run = g.id AND r.status IN {terminal})
           < jsonb_array_length(g.nodes)
FROM {dags} g WHERE g.id = %(dag_run)s AND g.status = {dag_running}
"""


def dag_settle_after_end(
    *, schema: str, dag_run_id: Any, job_id: int, now: datetime
) -> Settled | None:
    """Settle after the run of `job_id` ended, the worker's path. The end of a job with
    no downstream in the DAG run can change nothing but the DAG run's final status, so
    while other runs are still to end it takes no lock and reads no graph (without this,
    a fan-out of 1,000 serialises 1,000 full settles on the DAG run's row). Of two such
    ends at once, the later one's count (a fresh snapshot, after its own end committed)
    sees both, so the last end always settles; the leader's sweep catches up the
    settled-terminal count of the ones skipped here. (A full settle in progress may
    commit records this count cannot see yet: `dag_settle` then looks again itself.)"""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL(_ENDED_LEAF_SQL).format(
                dags=table(schema, "runs_dagrun"),
                runs=table(schema, "runs_run"),
                dag_running=sql.Literal(states.DAG_RUNNING),
                **STATUS,
            ),
            {"job": job_id, "dag_run": dag_run_id},
        )
        row = cursor.fetchone()
    if row is not None and row[0]:
        return None
    return dag_settle(schema=schema, dag_run_id=dag_run_id, now=now)


def _revive(cursor, runs_table, dag_run_id: Any, job_ids: list[int], runs: dict) -> None:
    """Withdraw upstream_failed records whose upstreams no longer failed."""
    if not job_ids:
        return
    cursor.execute(
        sql.SQL(
            "DELETE FROM {runs} WHERE dag_run = %s AND job_id = ANY(%s::bigint[])"
            " AND trigger = 'dependency' AND status = {skipped} AND skip_reason = %s"
        ).format(runs=runs_table, **STATUS),
        [dag_run_id, pg_array(job_ids), states.SKIP_UPSTREAM_FAILED],
    )
    for job_id in job_ids:
        runs.pop(job_id, None)


def _insert_runs(cursor, schema: str, dag_run_id: Any, step: Step, now: datetime) -> dict:
    """Insert the created runs (cancelled at once for a job deleted since the DAG run
    began) and the upstream_failed records; queue the created ones for admission."""
    todo = step.create + step.skip
    if not todo:
        return {}
    deleted: set[int] = set()
    if step.create:
        cursor.execute(
            sql.SQL(
                "SELECT id FROM {} WHERE id = ANY(%s::bigint[]) AND deleted_at IS NOT NULL"
            ).format(table(schema, "jobs_job")),
            [pg_array(step.create)],
        )
        deleted = {r[0] for r in cursor.fetchall()}
    rows = []
    for job_id in step.create:
        if job_id in deleted:
            rows.append((job_id, states.CANCELLED, "", "job deleted"))
        else:
            rows.append((job_id, states.SCHEDULED, "", ""))
    rows += [(job_id, states.SKIPPED, states.SKIP_UPSTREAM_FAILED, "") for job_id in step.skip]
    cursor.execute(
        sql.SQL(_INSERT_SQL).format(runs=table(schema, "runs_run"), **STATUS),
        {
            "now": now,
            "dag": dag_run_id,
            "ids": pg_array([uuid7() for _ in rows]),
            "jobs": pg_array([r[0] for r in rows]),
            "statuses": pg_array([r[1] for r in rows]),
            "reasons": pg_array([r[2] for r in rows]),
            "errors": pg_array([r[3] for r in rows]),
        },
    )
    inserted = cursor.fetchall()
    waiting = [_Queued(i, due) for i, _job, status, due in inserted if status == states.SCHEDULED]
    if waiting:
        enqueue_runs_on_commit(tenant_id_for(schema), waiting)
    return {job_id: status for _id, job_id, status, _due in inserted}


@dataclass(frozen=True)
class _Queued:
    """What `enqueue_runs_on_commit` reads of a run."""

    id: Any
    due_at: datetime


def dag_reopen(*, schema: str, dag_run_id: Any) -> None:
    """A run inside the DAG run was replayed: the DAG run goes on (the settle after the
    replay's commit, or the leader's sweep, withdraws the skips it caused)."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("UPDATE {} SET status = %s, finished_at = NULL WHERE id = %s").format(
                table(schema, "runs_dagrun")
            ),
            [states.DAG_RUNNING, dag_run_id],
        )


def settle_after_commit(schema: str, dag_run_id: Any, clock_now) -> None:
    """Settle once the current transaction commits (a cancel, a replay); a failure here
    is left to the leader's sweep."""

    def run() -> None:
        try:
            dag_settle(schema=schema, dag_run_id=dag_run_id, now=clock_now())
        except Exception:  # the sweep settles it; the action itself has committed
            log.exception("settling DAG run %s of %s failed", dag_run_id, schema)

    transaction.on_commit(run)


@per_schema
def to_settle_query(schema: str) -> sql.Composable:
    """Running DAG runs whose ended runs no longer match their last settle, oldest first;
    parameters: [limit]. The leader's sweep unions it over a chunk of tenants."""
    return sql.SQL(
        """
        SELECT g.id FROM {dags} g
        WHERE g.status = {dag_running}
          AND (SELECT count(*) FROM {runs} r WHERE r.dag_run = g.id AND r.status IN {terminal})
              <> g.settled_terminal
        ORDER BY g.started_at LIMIT %s
        """
    ).format(
        dags=table(schema, "runs_dagrun"),
        runs=table(schema, "runs_run"),
        dag_running=sql.Literal(states.DAG_RUNNING),
        **STATUS,
    )
