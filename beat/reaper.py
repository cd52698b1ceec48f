"""Invariant 5, nothing stuck: the leader reaps runs whose worker went silent and publishes
again runs whose broker message went missing.

Heartbeats and queued_at are written with the database's clock and compared with it here,
so no two hosts' clocks are ever compared.

- A `running` run whose heartbeat is older than the visibility timeout lost its worker
  (killed, host gone): its attempt is marked `lost` and the retry policy decides between
  `retrying` and `dead`, exactly as for a failed attempt. A heartbeat is never judged
  older than the database server's start: while PostgreSQL was down no worker could
  write one, and a run whose worker lives on must not be reaped (and run twice) the
  moment the database is back.
- A `queued` run still unclaimed after the visibility timeout may have lost its message
  (Redis restarted without persistence): it is published again, at most once per timeout.
  A duplicate delivery claims nothing (invariant 4), so this is always safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from psycopg import sql

from runs import states
from runs.outcomes import Outcome, decide
from runs.retry import RetryPolicy
from runs.status_sql import STATUS

from .store import REF_COLUMNS, RunRef, table

BATCH = 1000


@dataclass
class Reaped:
    retrying: list[RunRef] = field(default_factory=list)
    dead: int = 0
    jobs: set[int] = field(default_factory=set)  # jobs that lost an active run


@dataclass(frozen=True)
class _Lost:
    """Just what `runs.outcomes.decide` reads of a lost attempt."""

    attempt: int
    retry: RetryPolicy
    job_deleted: bool


def reap_lost(cursor, schema: str, now: datetime, timeout_seconds: float) -> Reaped:
    query = sql.SQL(
        """
        SELECT r.id, r.job_id, r.attempt, r.scheduled_for, j.max_attempts, j.backoff_seconds,
               j.backoff_multiplier, j.backoff_max_seconds, j.retry_jitter,
               j.deleted_at IS NOT NULL, j.priority, r.trigger, j.timeout_seconds
        FROM {runs} r JOIN {jobs} j ON j.id = r.job_id
        WHERE r.status = {running}
          AND r.heartbeat_at < now() - make_interval(secs => %s)
          AND pg_postmaster_start_time() < now() - make_interval(secs => %s)
        ORDER BY r.heartbeat_at LIMIT %s FOR UPDATE OF r SKIP LOCKED
        """
    ).format(runs=table(schema, "runs_run"), jobs=table(schema, "jobs_job"), **STATUS)
    cursor.execute(query, [timeout_seconds, timeout_seconds, BATCH])
    rows = cursor.fetchall()
    reaped = Reaped()
    error = f"lost: no heartbeat for {timeout_seconds:g}s (worker killed or unreachable)"
    for run_id, job_id, attempt, slot, *policy, deleted, priority, trigger, timeout in rows:
        lost = _Lost(attempt, RetryPolicy(*policy), deleted)
        decision = decide(lost, Outcome(False, error), now)
        reaped.jobs.add(job_id)
        _record_lost(cursor, schema, run_id, attempt, decision, error, now)
        if decision.status == states.RETRYING:
            reaped.retrying.append(
                RunRef(
                    run_id,
                    job_id,
                    slot,
                    decision.due_at,
                    decision.next_attempt,
                    priority,
                    trigger,
                    timeout,
                )
            )
        else:
            reaped.dead += 1
    return reaped


def _record_lost(
    cursor, schema: str, run_id, attempt: int, decision, error: str, now: datetime
) -> None:
    # Attempts are written when they end; the lost one ends here, with what the run knew.
    cursor.execute(
        sql.SQL(
            """
            INSERT INTO {attempts} (run_id, number, outcome, worker, started_at, finished_at,
                                    error, output)
            SELECT id, %s, 'lost', worker, coalesce(started_at, %s), %s, %s, ''
            FROM {runs} WHERE id = %s
            ON CONFLICT (run_id, number) DO UPDATE SET outcome = 'lost',
                finished_at = EXCLUDED.finished_at, error = EXCLUDED.error
            """
        ).format(attempts=table(schema, "runs_attempt"), runs=table(schema, "runs_run")),
        [attempt, now, now, error, run_id],
    )
    cursor.execute(
        sql.SQL(
            "UPDATE {} SET status = %s, attempt = %s, due_at = coalesce(%s, due_at), "
            "finished_at = %s, error = %s, heartbeat_at = NULL "
            "WHERE id = %s AND attempt = %s AND status IN {finishable}"
        ).format(table(schema, "runs_run"), **STATUS),
        [
            decision.status,
            decision.next_attempt,
            decision.due_at,
            None if decision.status == states.RETRYING else now,
            error,
            run_id,
            attempt,
        ],
    )


def stale_queued(cursor, schema: str, timeout_seconds: float) -> list[RunRef]:
    """Queued runs unclaimed for longer than the timeout; their queued_at restarts the clock.
    Both sides of the comparison are the database's clock."""
    query = sql.SQL(
        """
        UPDATE {runs} r SET queued_at = now() FROM {jobs} j
        WHERE j.id = r.job_id AND r.id IN (
            SELECT id FROM {runs} WHERE status = {queued}
              AND queued_at < now() - make_interval(secs => %s)
            ORDER BY queued_at LIMIT %s FOR UPDATE SKIP LOCKED)
        RETURNING {cols}
        """
    ).format(
        cols=sql.SQL(REF_COLUMNS),
        runs=table(schema, "runs_run"),
        jobs=table(schema, "jobs_job"),
        **STATUS,
    )
    cursor.execute(query, [timeout_seconds, BATCH])
    return [RunRef(*row) for row in cursor.fetchall()]
