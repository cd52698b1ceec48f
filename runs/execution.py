"""What a worker does with one run message: claim, execute, record. Called by the thin
Celery task in runs.tasks; takes the schema, ids and clock as arguments.

Claim and finish are conditional UPDATEs (status and attempt must match), so a duplicate
delivery claims nothing and a late finish cannot overwrite a run that moved on
(cancelled, reaped): invariant 4.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django_tenants.utils import schema_context
from psycopg import sql
from psycopg_pool import PoolTimeout

from core.clock import Clock, SystemClock
from core.logs import log_event
from core.redaction import redact, redacting
from core.registry import RunContext, get_task, needs_tenant_schema
from core.sql import per_schema, table

from . import states
from .dags import dag_settle_after_end, dag_start
from .heartbeat import Heartbeats
from .notify import enqueue_retry_on_commit, notify_finished
from .observe import http_call_ended, ids, run_claimed, run_finished, run_not_claimed
from .outcomes import Decision, Outcome, decide
from .retry import RetryPolicy
from .status_sql import STATUS
from .targets.http import HttpCall, HttpOutcome, send
from .targets.http_target import (
    DeliveryNotReady,
    allow_networks,
    http_call,
    prepare_delivery,
    scheduler_headers,
)

log = logging.getLogger("runs.execution")
OUTPUT_LIMIT = 4096


@dataclass(frozen=True)
class Claimed:
    schema: str
    run_id: Any
    job_id: int
    attempt: int
    scheduled_for: datetime
    payload: dict
    target_type: str
    target: dict
    timeout_seconds: int
    retry: RetryPolicy
    job_deleted: bool
    concurrency_policy: str
    trigger: str = ""
    dag_run: Any = None  # the DAG run the run belongs to (set at its first claim if a root)
    has_downstreams: bool = False  # of a run not yet in a DAG run: it starts one
    signing_version: int | None = None  # the tenant's, to check the cached signing secrets
    due_at: datetime | None = None  # when the run was due (its start lag is measured from it)
    priority: str = "normal"  # the job's, as metrics label


# Claim and finish are one statement each, and neither waits for its WAL flush
# (set_config(..., is_local) applies to the statement's own transaction). Only a crash of
# PostgreSQL itself inside that ~0.2 s window can undo one: a lost finish leaves the run
# `running`, and the reaper retries it; a lost claim leaves it `queued`, the late finish
# changes nothing, and the reaper publishes it again. Either way the run executes again,
# as at-least-once allows, under the same run id (the Idempotency-Key). Worker crashes,
# the common failure, are unaffected. See docs/adr/0007-worker-bookkeeping.md.
_CLAIMED_SQL = """
SELECT c.job_id, c.attempt, c.scheduled_for, coalesce(c.payload_override, j.payload),
       j.target_type, j.target, j.timeout_seconds, j.max_attempts, j.backoff_seconds,
       j.backoff_multiplier, j.backoff_max_seconds, j.retry_jitter, j.deleted_at IS NOT NULL,
       j.concurrency_policy, c.trigger, c.dag_run,
       c.dag_run IS NULL AND EXISTS (
           SELECT 1 FROM {deps} d JOIN {jobs} dj ON dj.id = d.downstream_id
           WHERE d.upstream_id = c.job_id AND dj.deleted_at IS NULL),
       (SELECT t.signing_secret_version FROM {tenants} t WHERE t.schema_name = %(schema)s),
       c.due_at, j.priority
FROM claimed c JOIN {jobs} j ON j.id = c.job_id
"""
CLAIM_SQL = (
    """
WITH claimed AS (
    UPDATE {runs} SET status = {running}, started_at = %(now)s, heartbeat_at = now(),
                      worker = %(worker)s, error = '', queued_at = coalesce(queued_at, now())
    WHERE id = %(run_id)s AND attempt = %(attempt)s AND status IN {claimable}
      AND set_config('synchronous_commit', 'off', true) IS NOT NULL
    RETURNING id, job_id, attempt, scheduled_for, payload_override, trigger, dag_run, due_at
)"""
    + _CLAIMED_SQL
)
# The claim this call made, if it committed although its reply was lost: the same row, the
# same attempt, still `running` with this process as its worker and this call's `now` as
# its start (a later claim by this process would have another). The row is locked by its
# key alone, and the claim's conditions checked after: FOR UPDATE waits only for a row its
# WHERE matches in its snapshot, and a claim still executing (waiting for the fire's lock,
# say) has not yet made the row match; locked by key, the look waits for that claim's end
# (bounded) and reads the row as it left it.
CLAIM_RECOVERY_SQL = (
    """
WITH found AS (
    SELECT id, job_id, attempt, scheduled_for, payload_override, trigger, dag_run, due_at,
           status, worker, started_at
    FROM {runs}
    WHERE id = %(run_id)s AND set_config('lock_timeout', %(lock_timeout)s, true) IS NOT NULL
    FOR UPDATE
), claimed AS (
    SELECT * FROM found
    WHERE attempt = %(attempt)s AND status = {running} AND worker = %(worker)s
      AND started_at = %(now)s
)"""
    + _CLAIMED_SQL
)


def _claim_tables(schema: str) -> dict:
    """The names the claim and its recovery read (`_CLAIMED_SQL`), in one schema."""
    return {
        "runs": table(schema, "runs_run"),
        "jobs": table(schema, "jobs_job"),
        "deps": table(schema, "jobs_dependency"),
        "tenants": table("public", "tenants_tenant"),
        **STATUS,
    }


@per_schema
def _claim_sql(schema: str) -> sql.Composable:
    return sql.SQL(CLAIM_SQL).format(**_claim_tables(schema))


@per_schema
def _claim_recovery_sql(schema: str) -> sql.Composable:
    return sql.SQL(CLAIM_RECOVERY_SQL).format(**_claim_tables(schema))


def claim_run(
    *, schema: str, run_id: str, attempt: int, worker: str, now: datetime
) -> Claimed | None:
    query = _claim_sql(schema)
    params = {"now": now, "worker": worker, "run_id": run_id, "attempt": attempt, "schema": schema}
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        row = cursor.fetchone()
    if row is None and _admitted_after_a_wait(schema, run_id, attempt):
        with connection.cursor() as cursor:
            cursor.execute(query, params)
            row = cursor.fetchone()
    return _claimed(schema, run_id, row)


def claim_made(
    *, schema: str, run_id: str, attempt: int, worker: str, now: datetime
) -> Claimed | None:
    """The claim `claim_run` made with these arguments, if it committed (its reply lost
    with the connection), else None."""
    params = {
        "now": now,
        "worker": worker,
        "run_id": run_id,
        "attempt": attempt,
        "schema": schema,
        "lock_timeout": f"{ADMISSION_WAIT_SECONDS * 1000:.0f}",
    }
    with connection.cursor() as cursor:
        cursor.execute(_claim_recovery_sql(schema), params)
        return _claimed(schema, run_id, cursor.fetchone())


def _claimed(schema: str, run_id: str, row: tuple | None) -> Claimed | None:
    if row is None:
        return None
    payload, target = _json(row[3]) or {}, _json(row[5]) or {}
    return Claimed(
        schema,
        run_id,
        row[0],
        row[1],
        row[2],
        payload,
        row[4],
        target,
        row[6],
        RetryPolicy(*row[7:12]),
        row[12],
        row[13],
        row[14],
        row[15],
        row[16],
        row[17],
        row[18],
        row[19],
    )


# The leader publishes inside the transaction that moves a run to `queued`, so a quick
# worker's claim can arrive while that row is still locked. A claim of a `scheduled` run
# matches the old row, waits on the lock and sees the commit; a retry (or a replay) is
# `retrying` until admitted and deliberately not claimable, so its claim skips the locked
# row at once and would spend the attempt's only message (the run then sat `queued` until
# the reaper published it again, a visibility timeout later). When a claim takes nothing,
# this waits for a fire holding the row (bounded) and says whether the run is now queued.
ADMISSION_WAIT_SECONDS = 5.0
# No status filter: the row as the fire left it (`queued`) is what the wait must return.
_WAIT_SQL = "SELECT status = {queued} FROM {runs} WHERE id = %s AND attempt = %s FOR UPDATE"


def _admitted_after_a_wait(schema: str, run_id: str, attempt: int) -> bool:
    query = sql.SQL(_WAIT_SQL).format(runs=table(schema, "runs_run"), **STATUS)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('lock_timeout', %s, true)",
                [f"{ADMISSION_WAIT_SECONDS * 1000:.0f}"],
            )
            cursor.execute(query, [run_id, attempt])
            row = cursor.fetchone()
    except OperationalError:  # still locked after the wait: the reaper republishes it
        return False
    return bool(row and row[0])


def _json(value: Any) -> Any:
    # Django registers no jsonb loader on its connections: raw queries return the text.
    return json.loads(value) if isinstance(value, str | bytes) else value


# One statement, so one implicit transaction and one round trip (as the claim).
FINISH_SQL = """
WITH finished AS (
    UPDATE {runs} SET status = %(status)s, finished_at = %(finished)s, error = %(error)s,
                      attempt = %(next_attempt)s, due_at = coalesce(%(due)s, due_at),
                      heartbeat_at = NULL
    WHERE id = %(run_id)s AND attempt = %(attempt)s AND status IN {finishable}
      AND set_config('synchronous_commit', 'off', true) IS NOT NULL
    RETURNING id, started_at, worker
)
INSERT INTO {attempts} (run_id, number, outcome, worker, started_at, finished_at, error, output)
SELECT id, %(attempt)s, %(outcome)s, worker, started_at, %(now)s, %(error)s, %(output)s
FROM finished
ON CONFLICT (run_id, number) DO UPDATE SET outcome = EXCLUDED.outcome,
    finished_at = EXCLUDED.finished_at, error = EXCLUDED.error, output = EXCLUDED.output
RETURNING run_id
"""


@per_schema
def _finish_sql(schema: str) -> sql.Composable:
    return sql.SQL(FINISH_SQL).format(
        runs=table(schema, "runs_run"), attempts=table(schema, "runs_attempt"), **STATUS
    )


def finish_run(claimed: Claimed, outcome: Outcome, now: datetime) -> Decision | None:
    """Record the attempt and the run's next status; None if the run moved on meanwhile
    (cancelled, or reaped as lost): then this late result changes nothing."""
    decision = decide(claimed, outcome, now)
    query = _finish_sql(claimed.schema)
    params = {
        "status": decision.status,
        "next_attempt": decision.next_attempt,
        "due": decision.due_at,
        "finished": now if decision.status != states.RETRYING else None,
        "error": outcome.error[:OUTPUT_LIMIT],
        "run_id": claimed.run_id,
        "attempt": claimed.attempt,
        "now": now,
        "output": outcome.output[:OUTPUT_LIMIT],
        "outcome": states.ATTEMPT_SUCCEEDED if outcome.ok else states.ATTEMPT_FAILED,
    }
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        if cursor.fetchone() is None:
            return None
    if decision.status == states.RETRYING:
        enqueue_retry_on_commit(claimed.schema, claimed.run_id, decision.due_at)
    return decision


def execute_task_target(claimed: Claimed, context: RunContext) -> Outcome:
    func = get_task(claimed.target.get("task", ""))
    if func is None:
        return Outcome(False, f"unknown task {claimed.target.get('task')!r}", permanent=True)
    try:
        # The engine's own SQL names its schema; a registered task may use the ORM, and
        # then sees its tenant's schema (runs.tasks resets the connection afterwards).
        if needs_tenant_schema(claimed.target["task"]):
            with schema_context(claimed.schema):
                result = func(claimed.payload, context)
        else:
            result = func(claimed.payload, context)
    except Exception as exc:
        return Outcome(
            False, f"{exc.__class__.__name__}: {exc}", traceback.format_exc()[-OUTPUT_LIMIT:]
        )
    return Outcome(True, output=repr(result)[:OUTPUT_LIMIT])


def execute_http_target(claimed: Claimed, context: RunContext, clock: Clock) -> Outcome:
    """Open the job's secret headers, sign, send; from opening the secrets to returning,
    every log line and the text kept of the attempt have their values redacted."""
    prepared = prepare_http(claimed, clock)
    if isinstance(prepared, Outcome):
        return prepared
    with redacting(prepared.secrets):
        try:
            result = send(prepared.call, allow=allow_networks())
        except Exception as exc:  # logged and recorded here, while redaction is on
            outcome = http_call_failed(claimed, exc)
        else:
            http_call_ended(result)
            outcome = http_outcome(result)
    return redacted(outcome, prepared.secrets)


@dataclass(frozen=True)
class PreparedHttp:
    """An HTTP target's call, ready to send: its secret header values are open in it
    (`secrets`, to redact) until the attempt's outcome is recorded."""

    claimed: Claimed
    call: HttpCall
    secrets: tuple[str, ...]


def prepare_http(claimed: Claimed, clock: Clock) -> PreparedHttp | Outcome:
    """The call of both execution modes, or the failed outcome if it cannot be made."""
    scheduler = scheduler_headers(
        run_id=str(claimed.run_id),
        job_id=claimed.job_id,
        scheduled_for=claimed.scheduled_for.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        attempt=claimed.attempt,
    )
    try:
        delivery = prepare_delivery(
            schema=claimed.schema,
            signing_version=claimed.signing_version,
            stored_headers=claimed.target.get("headers"),
            run_id=str(claimed.run_id),
            clock=clock,
        )
    except DeliveryNotReady as exc:
        log_event(
            log,
            "run.delivery_not_ready",
            "run %s: %s",
            claimed.run_id,
            exc,
            level=logging.ERROR,
            error=str(exc),
            **ids(claimed),
        )
        return Outcome(False, str(exc))  # not permanent: a worker with the key can run it
    ours = {name.lower() for name in scheduler}
    headers = {k: v for k, v in delivery.headers.items() if k.lower() not in ours}
    with redacting(delivery.secrets):
        try:
            call = http_call(
                target=claimed.target,
                payload=claimed.payload,
                timeout_seconds=claimed.timeout_seconds,
                headers={**headers, **scheduler},
                signer=delivery.signer,
            )
        except Exception as exc:
            return redacted(http_call_failed(claimed, exc), delivery.secrets)
    return PreparedHttp(claimed, call, delivery.secrets)


def http_call_failed(claimed: Claimed, exc: Exception) -> Outcome:
    """A bug or a bad target (not a network problem: those are outcomes): logged while
    redaction is on, and recorded."""
    log_event(
        log,
        "run.http_call_failed",
        "run %s: the HTTP call failed: %s",
        claimed.run_id,
        exc.__class__.__name__,
        level=logging.ERROR,
        exc_info=True,
        error=exc.__class__.__name__,
        **ids(claimed),
    )
    return Outcome(False, f"{exc.__class__.__name__}: {exc}")


def http_outcome(result: HttpOutcome) -> Outcome:
    if result.ok:
        return Outcome(True, output=result.body_excerpt)
    # A refused destination is a configuration problem: retrying cannot help.
    return Outcome(
        False, result.error or "HTTP call failed", result.body_excerpt, permanent=result.refused
    )


def redacted(outcome: Outcome, secrets: tuple[str, ...]) -> Outcome:
    if not secrets:
        return outcome
    return dataclasses.replace(
        outcome, error=redact(outcome.error, secrets), output=redact(outcome.output, secrets)
    )


def execute_target(claimed: Claimed, context: RunContext, clock: Clock | None = None) -> Outcome:
    if claimed.job_deleted:
        return Outcome(False, "job deleted", permanent=True)
    if claimed.target_type == "task":
        return execute_task_target(claimed, context)
    if claimed.target_type == "http":
        return execute_http_target(claimed, context, clock or SystemClock())
    return Outcome(False, f"unsupported target type {claimed.target_type!r}", permanent=True)


def release_connection() -> None:
    """With a connection pool, give the connection back while the target runs (seconds or
    hours of I/O): in-flight runs then do not each hold a PostgreSQL connection."""
    if connection.settings_dict.get("OPTIONS", {}).get("pool"):
        connection.close()


class DatabaseUnavailable(Exception):
    """The run could not be claimed because PostgreSQL did not answer: the delivery should
    go back to the broker (nothing was done), not be acknowledged as handled."""


CONNECTION_ERRORS = (OperationalError, InterfaceError)
FINISH_TRIES = 8  # about 12 s of waiting, bounded


def _reconnect() -> None:
    """Drop a connection that failed, so that the next statement opens a new one."""
    with contextlib.suppress(Exception):
        connection.close()


# How long a worker looks for a claim whose reply was lost, at most (then the delivery goes
# back to the broker, and a claim that did commit waits for the reaper, as before).
CLAIM_RECOVERY_SECONDS = 10.0


def claim_or_requeue(**claim) -> Claimed | None:
    """Claim the run; if the connection is lost with the claim in flight, find out whether
    the claim committed before handing the delivery back. A claim whose reply was lost has
    moved the run to `running` under this process: the delivery handed back would claim
    nothing when it came again, and the run would wait for the reaper (a visibility
    timeout, and one of its attempts, so a job of one attempt went `dead` without running).
    So the claim is looked for, for up to CLAIM_RECOVERY_SECONDS; found, the run goes on as
    claimed. An error that says the claim did not commit (one the server reported, such as
    a lock timeout; no connection from the pool) hands the delivery back at once."""
    try:
        connection.ensure_connection()
        backend = _backend_pid()
    except CONNECTION_ERRORS as exc:  # no claim was sent
        _reconnect()
        raise DatabaseUnavailable(str(exc)) from exc
    failure: BaseException
    try:
        return claim_run(**claim)
    except CONNECTION_ERRORS as exc:
        failure = exc
        if not outcome_unknown(exc):
            _reconnect()
            raise DatabaseUnavailable(str(exc)) from exc
    except SoftTimeLimitExceeded as exc:
        # Out of time with the claim in flight (waiting for a row lock, say): the statement
        # runs on in the server and may commit, so it is looked for like a lost reply.
        failure = exc
    deadline = time.monotonic() + CLAIM_RECOVERY_SECONDS
    pause = 0.1
    found: Claimed | None = None
    while True:
        # A soft time limit fires once per task, anywhere in here: it must not end the
        # look, whose end alone decides whether the delivery may go back.
        try:
            _reconnect()  # a fresh connection each look (a pool may hand out dead ones)
            _wait_for_backend(backend, deadline)
            found = claim_made(**claim)
            break  # found, or the claim did not commit: the delivery claims again
        except (*CONNECTION_ERRORS, SoftTimeLimitExceeded) as exc:
            failure = exc
        if time.monotonic() + pause > deadline:
            break
        with contextlib.suppress(SoftTimeLimitExceeded):
            time.sleep(pause)
        pause = min(pause * 2, 2.0)
    if found is not None:
        with contextlib.suppress(SoftTimeLimitExceeded):
            log_event(
                log,
                "worker.claim_recovered",
                "run %s attempt %s: the claim's reply was lost, the claim had committed",
                claim["run_id"],
                claim["attempt"],
                run_id=claim["run_id"],
                attempt=claim["attempt"],
            )
        return found
    _reconnect()
    raise DatabaseUnavailable(str(failure)) from failure


def outcome_unknown(exc: BaseException) -> bool:
    """Whether a statement that failed this way may have committed: the connection was lost
    with it in flight (no SQLSTATE, a connection-class or shutdown SQLSTATE). An error the
    server reported about the statement, a connection Django knew closed, or a pool that
    gave no connection mean it did not."""
    if isinstance(exc, InterfaceError):
        return False
    cause = exc.__cause__ or exc
    if isinstance(cause, PoolTimeout):
        return False
    state = getattr(cause, "sqlstate", None)
    return state is None or state.startswith(("08", "57P"))


def _backend_pid() -> int | None:
    """The server process of this connection: where a claim lost with the connection may
    still be executing. None behind a transaction pooler (there it is the pooler's)."""
    if settings.DB_TRANSACTION_POOLING or connection.connection is None:
        return None
    try:
        return connection.connection.info.backend_pid
    except Exception:  # a connection already finished: nothing to wait for
        return None


# That process, only while it runs a claim of this role (a pid reused by another process,
# or a session pooler's own pid, matches nothing here). Ending it checks the same in the
# same statement, so nothing can take the pid between the check and the signal.
_CLAIM_IN_FLIGHT = """
FROM pg_stat_activity
WHERE pid = %s AND pid <> pg_backend_pid() AND state = 'active'
  AND usename = current_user AND backend_type = 'client backend'
  AND query LIKE '%%WITH claimed AS (%%UPDATE%%'
"""


def _wait_for_backend(pid: int | None, deadline: float) -> None:
    """A claim lost with its connection may still be executing in its server process (a
    statement whose client is gone runs on until it tries to reply): a look before its end
    could find the row as it was, and the claim commit afterwards, unseen. So wait until
    that process runs no claim; past half the time left, end it (it is this worker's own
    claim, orphaned: ended, it commits nothing, and the look that follows is definitive)."""
    if pid is None:
        return
    pause = 0.05
    end_at = time.monotonic() + (deadline - time.monotonic()) / 2
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            if time.monotonic() >= end_at:
                cursor.execute("SELECT pg_terminate_backend(pid) " + _CLAIM_IN_FLIGHT, [pid])
                end_at = deadline
            cursor.execute("SELECT 1 " + _CLAIM_IN_FLIGHT, [pid])
            if cursor.fetchone() is None:
                return
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def finish_with_retries(
    claimed: Claimed, outcome: Outcome, clock: Clock, sleep=time.sleep
) -> Decision | None:
    """Record the outcome, trying again (bounded) while the database is unreachable: the
    attempt has run, and losing its result would make the reaper run it again. The finish
    is conditional on the attempt, so trying twice cannot record it twice."""
    for try_number in range(1, FINISH_TRIES + 1):
        try:
            return finish_run(claimed, outcome, clock.now())
        except CONNECTION_ERRORS:
            if try_number == FINISH_TRIES:
                raise
            _reconnect()
            sleep(min(0.25 * 2 ** (try_number - 1), 4.0))
    return None


def run_execute(
    *,
    schema: str,
    run_id: str,
    attempt: int,
    worker: str,
    clock: Clock,
    heartbeats: Heartbeats | None = None,
    http_executor: HttpExecutorLike | None = None,
) -> str:
    """Execute one delivery of a run message; returns what happened (for logs and tests).

    With an `http_executor` (TICKWORK_HTTP_EXECUTION=async), an HTTP run first waits for a
    free slot of the executor, unclaimed, then is claimed, prepared and handed over in that
    slot, and this returns "handed-off": the executor finishes the run with
    :func:`complete_run` when the call ends. The delivery may be acknowledged then: from
    the claim on, PostgreSQL holds the run (`running`, this attempt), so a second delivery
    of the message would claim nothing anyway, and a worker that dies is found by its
    heartbeats stopping (the reaper), as before."""
    holder = _reserve_http_slot(http_executor, schema, run_id)
    try:
        claimed = claim_or_requeue(
            schema=schema, run_id=run_id, attempt=attempt, worker=worker, now=clock.now()
        )
        if claimed is None:
            run_not_claimed(schema=schema, run_id=run_id, attempt=attempt)
            return "duplicate"
        run_claimed(claimed, clock.now())
        claimed, refused = _start_dag_run_if_root(claimed, clock)
        release_connection()
        started = time.monotonic()
        if holder is not None and refused is None and _is_live_http(claimed):
            prepared = prepare_http(claimed, clock)
            if isinstance(prepared, PreparedHttp):
                holder.submit(prepared, started)
                holder = None  # the slot is the call's now: freed once its outcome is recorded
                return "handed-off"
            refused = prepared
    finally:
        if holder is not None:
            holder.release()
    # Any other run executes here, in the pool slot (so does an HTTP run whose job became
    # an HTTP target between the look before the wait and the claim: it has no slot).
    outcome = refused if refused is not None else _execute(claimed, heartbeats, clock)
    return complete_run(claimed, outcome, clock, started)


class HttpExecutorLike(Protocol):
    def reserve(self) -> None: ...

    def try_reserve(self) -> bool: ...

    def release(self) -> None: ...

    def submit(self, prepared: PreparedHttp, started: float) -> None: ...


def _reserve_http_slot(
    executor: HttpExecutorLike | None, schema: str, run_id: str
) -> HttpExecutorLike | None:
    """Take a slot of the executor BEFORE the claim; returns the executor if one was taken.

    A claimed run that waited for a slot would have no heartbeat (the reaper would retry it
    elsewhere while this worker then sent it too; a cancel would go unnoticed), and a time
    limit in the wait would leave it `running`, never sent, until the reaper. Unclaimed, an
    interrupted wait loses nothing: runs.tasks puts the delivery back. Only an HTTP run
    waits: when the executor is full, its job is looked at first, and any other run (a
    Python task, a deleted job's) goes on without a slot, as it needs none."""
    if executor is None:
        return None
    if executor.try_reserve():
        return executor
    if not _is_http_run(schema, run_id):
        return None
    release_connection()  # a pooled connection is not held through the wait
    executor.reserve()
    return executor


_HTTP_RUN_SQL = """
SELECT j.target_type = 'http' AND j.deleted_at IS NULL
FROM {runs} r JOIN {jobs} j ON j.id = r.job_id WHERE r.id = %s
"""


@per_schema
def _http_run_sql(schema: str) -> sql.Composable:
    return sql.SQL(_HTTP_RUN_SQL).format(
        runs=table(schema, "runs_run"), jobs=table(schema, "jobs_job")
    )


def _is_http_run(schema: str, run_id: str) -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute(_http_run_sql(schema), [run_id])
            row = cursor.fetchone()
    except CONNECTION_ERRORS as exc:
        _reconnect()
        raise DatabaseUnavailable(str(exc)) from exc
    return bool(row and row[0])


def _is_live_http(claimed: Claimed) -> bool:
    return claimed.target_type == "http" and not claimed.job_deleted


def complete_run(claimed: Claimed, outcome: Outcome, clock: Clock, started: float) -> str:
    """Record an executed attempt and what follows it (the leader told, the DAG run
    settled); returns the run's new status, or "superseded" if it had moved on."""
    decision = finish_with_retries(claimed, outcome, clock)
    run_finished(claimed, outcome, decision, time.monotonic() - started)
    if decision is None:
        return "superseded"
    notify_finished(claimed)
    if claimed.dag_run is not None and decision.status in states.TERMINAL:
        _settle_dag_run(claimed, clock)
    return decision.status


def _execute(claimed: Claimed, heartbeats: Heartbeats | None, clock: Clock) -> Outcome:
    schema, run_id, attempt = claimed.schema, claimed.run_id, claimed.attempt
    stop = heartbeats.track(schema, run_id, attempt) if heartbeats else threading.Event()
    context = RunContext(
        run_id=str(run_id),
        job_id=claimed.job_id,
        tenant_schema=schema,
        attempt=claimed.attempt,
        scheduled_for=claimed.scheduled_for,
        stopped=stop,
    )
    try:
        return execute_target(claimed, context, clock)
    except Exception as exc:  # a bug of ours (or a time limit) must still end the attempt
        log_event(
            log,
            "run.target_error",
            "run %s: %s",
            run_id,
            exc.__class__.__name__,
            level=logging.ERROR,
            exc_info=True,
            error=exc.__class__.__name__,
            **ids(claimed),
        )
        return Outcome(False, f"{exc.__class__.__name__}: {exc}")
    finally:
        if heartbeats:
            heartbeats.untrack(schema, run_id, attempt)


def _start_dag_run_if_root(claimed: Claimed, clock: Clock) -> tuple[Claimed, Outcome | None]:
    """A run of a job with downstreams that is in no DAG run yet starts one. If that
    fails, the attempt fails without running the target (a root run alone would leave
    its downstreams silently behind): the retry policy tries again, and a lasting
    failure ends in the dead-letter queue, visible."""
    if not claimed.has_downstreams:
        return claimed, None
    try:
        dag_run = dag_start(
            schema=claimed.schema,
            run_id=claimed.run_id,
            job_id=claimed.job_id,
            trigger=claimed.trigger,
            started_at=clock.now(),
        )
    except Exception as exc:
        _reconnect()
        log_event(
            log,
            "run.dag_start_failed",
            "run %s: its DAG run could not be started",
            claimed.run_id,
            level=logging.ERROR,
            exc_info=True,
            **ids(claimed),
        )
        return claimed, Outcome(
            False, f"its DAG run could not be started: {exc.__class__.__name__}: {exc}"
        )
    return dataclasses.replace(claimed, dag_run=dag_run), None


def _settle_dag_run(claimed: Claimed, clock: Clock) -> None:
    """The downstream runs follow at once; if this fails (or the worker dies first), the
    leader's DAG sweep settles the DAG run."""
    try:
        dag_settle_after_end(
            schema=claimed.schema,
            dag_run_id=claimed.dag_run,
            job_id=claimed.job_id,
            now=clock.now(),
        )
    except Exception:
        _reconnect()
        log_event(
            log,
            "run.dag_settle_failed",
            "run %s: settling DAG run %s failed",
            claimed.run_id,
            claimed.dag_run,
            level=logging.ERROR,
            exc_info=True,
            dag_run_id=claimed.dag_run,
            **ids(claimed),
        )
