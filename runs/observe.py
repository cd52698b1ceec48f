"""What a worker reports about the runs it executes: one log event and the metrics of each
step (claimed, finished), so that `runs/execution.py` says it in one line per step.

Events: `run.claimed` (DEBUG), `run.duplicate` and `run.superseded` (INFO: a delivery that
changed nothing), `run.succeeded` (INFO), `run.retrying` (WARNING), `run.dead` (ERROR),
`run.cancelled` (INFO, by a person). Each names the tenant (slug), job, run and attempt.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from core.logs import log_event
from core.metrics import (
    ATTEMPT_DURATION,
    ATTEMPTS_FINISHED,
    HTTP_TARGET,
    RUNS_FINISHED,
    START_LAG,
    status_class,
    tenant_label,
)
from tenants.services import slug_for_schema

from . import states
from .outcomes import Decision, Outcome

log = logging.getLogger("runs.execution")

_LEVELS = {states.SUCCEEDED: logging.INFO, states.RETRYING: logging.WARNING}


def ids(claimed: Any) -> dict[str, Any]:
    return {
        "tenant": slug_for_schema(claimed.schema),
        "job_id": claimed.job_id,
        "run_id": str(claimed.run_id),
        "attempt": claimed.attempt,
    }


def run_claimed(claimed: Any, now: datetime) -> None:
    """The worker claimed the attempt: the start lag, from the run's due instant."""
    if claimed.due_at is not None:
        lag = max((now - claimed.due_at).total_seconds(), 0.0)
        START_LAG.labels(priority=claimed.priority).observe(lag)
    log_event(
        log,
        "run.claimed",
        "run %s attempt %s claimed",
        claimed.run_id,
        claimed.attempt,
        level=logging.DEBUG,
        trigger=claimed.trigger,
        **ids(claimed),
    )


def run_not_claimed(*, schema: str, run_id: str, attempt: int) -> None:
    log_event(
        log,
        "run.duplicate",
        "run %s attempt %s: nothing to claim (duplicate or moved on)",
        run_id,
        attempt,
        tenant=slug_for_schema(schema),
        run_id=run_id,
        attempt=attempt,
    )


def run_finished(
    claimed: Any, outcome: Outcome, decision: Decision | None, duration: float
) -> None:
    """The attempt ended; `decision` is None when the run had moved on meanwhile."""
    ATTEMPT_DURATION.labels(target=claimed.target_type or "unknown").observe(duration)
    if decision is None:
        log_event(
            log,
            "run.superseded",
            "run %s attempt %s ended after the run moved on (cancelled or reaped)",
            claimed.run_id,
            claimed.attempt,
            **ids(claimed),
        )
        return
    tenant = tenant_label(slug_for_schema(claimed.schema))
    ATTEMPTS_FINISHED.labels(
        tenant=tenant, outcome=states.ATTEMPT_SUCCEEDED if outcome.ok else states.ATTEMPT_FAILED
    ).inc()
    if decision.status in states.TERMINAL:
        RUNS_FINISHED.labels(tenant=tenant, status=decision.status).inc()
    fields = ids(claimed)
    if decision.status == states.RETRYING:
        fields["next_attempt_at"] = decision.due_at.isoformat() if decision.due_at else None
    log_event(
        log,
        f"run.{decision.status}",
        "run %s attempt %s %s in %.3fs%s",
        claimed.run_id,
        claimed.attempt,
        decision.status,
        duration,
        f": {outcome.error}" if outcome.error else "",
        level=_LEVELS.get(decision.status, logging.ERROR),
        duration_seconds=round(duration, 3),
        error=outcome.error[:300] or None,
        **fields,
    )


def run_cancelled(*, schema: str, job_id: int, run_id: Any, attempt: int, actor: str) -> None:
    """A person cancelled the run (API, portal, console)."""
    RUNS_FINISHED.labels(
        tenant=tenant_label(slug_for_schema(schema)), status=states.CANCELLED
    ).inc()
    log_event(
        log,
        "run.cancelled",
        "run %s cancelled by %s",
        run_id,
        actor,
        tenant=slug_for_schema(schema),
        job_id=job_id,
        run_id=str(run_id),
        attempt=attempt,
        actor=actor,
    )


def http_call_ended(outcome: Any) -> None:
    """An HTTP target call ended (runs/targets/http_target.py)."""
    timed_out = (outcome.error or "").startswith("timed out")
    klass = status_class(
        status_code=outcome.status_code, refused=outcome.refused, timed_out=timed_out
    )
    HTTP_TARGET.labels(status_class=klass).observe(outcome.elapsed_seconds)
