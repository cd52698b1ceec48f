"""Fault isolation: one bad job costs one job, one bad tenant costs one tenant, and nothing
else a leader meets makes it exit.

- A job whose stored fields cannot be planned (a time zone that no longer exists after a
  tzdata update, a schedule that does not parse, a row that breaks an assumption) is
  *parked*: `fault_code`/`fault_detail`/`faulted_at` say why (the API shows them), it leaves
  the index, and its tenant's other jobs go on. Editing or resuming the job clears it.
- A tenant whose unit of work fails (its schema dropped by hand, a statement that times
  out) is skipped with a growing back-off and reported (`scheduler_status`), while every
  other tenant is served. Each unit runs inside its own savepoint, so a failure rolls back
  only that tenant's part of a shared transaction.
- Errors that mean this process may no longer lead (lease lost, fenced off, Redis or the
  database connection gone) are not a tenant's fault: they propagate and the leader steps
  down. Anything else unexpected escapes only as far as the loop, which logs it, steps
  down and backs off (`beat/loop.py`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from zoneinfo import ZoneInfoNotFoundError

from django.db import DatabaseError, InterfaceError, connection, transaction

from core.logs import log_event
from core.redis import REDIS_ERRORS
from jobs.schedules import ScheduleError
from tenants.services import slug_for_schema

from .lease import LeaseLost
from .store import FencingError

log = logging.getLogger("beat.faults")
T = TypeVar("T")

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0

# Errors a job's own data causes while it is planned: the job is parked. ValueError and
# TypeError stay in: a stored value the planner cannot use (a date out of range, a null
# where a value belongs) raises them from the standard library, and parking the one job,
# visibly (fault_code `invalid_data` with the message), costs less than backing the whole
# tenant off; database and Redis errors are neither, so they still reach the tenant's or
# the leader's handling.
JOB_DATA_ERRORS = (ScheduleError, ZoneInfoNotFoundError, ValueError, TypeError, OverflowError)


def must_step_down(exc: BaseException) -> bool:
    """True when the error says this process cannot (or must not) go on writing."""
    if isinstance(exc, (LeaseLost, FencingError, *REDIS_ERRORS, InterfaceError)):
        return True
    if isinstance(exc, DatabaseError):
        raw = connection.connection
        return raw is None or getattr(raw, "closed", False) or getattr(raw, "broken", False)
    return False


def job_fault_code(exc: BaseException) -> str:
    if isinstance(exc, ZoneInfoNotFoundError) or getattr(exc, "field", None) == "timezone":
        return "invalid_timezone"
    if isinstance(exc, ScheduleError):
        return "invalid_schedule"
    return "invalid_data"


@dataclass
class TenantFault:
    schema: str
    error: str
    failures: int
    retry_at: float  # monotonic


class TenantFaults:
    """Tenants whose work failed, each skipped until its back-off ends."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self.faults: dict[int, TenantFault] = {}

    def allowed(self, tenant_id: int) -> bool:
        fault = self.faults.get(tenant_id)
        return fault is None or fault.retry_at <= self._now()

    def failed(self, tenant_id: int, schema: str, exc: BaseException) -> float:
        previous = self.faults.get(tenant_id)
        failures = previous.failures + 1 if previous else 1
        backoff = min(FIRST_BACKOFF_SECONDS * 2 ** (failures - 1), MAX_BACKOFF_SECONDS)
        error = f"{exc.__class__.__name__}: {str(exc).strip().splitlines()[0][:300]}"
        self.faults[tenant_id] = TenantFault(schema, error, failures, self._now() + backoff)
        log_event(
            log,
            "leader.tenant_failed",
            "tenant %s (%s) skipped for %.0fs after %s failure(s): %s",
            tenant_id,
            schema,
            backoff,
            failures,
            error,
            level=logging.ERROR,
            tenant=slug_for_schema(schema),
            failures=failures,
            backoff_seconds=backoff,
            error=error,
        )
        return backoff

    def remaining(self, tenant_id: int) -> float:
        """Seconds until the tenant's back-off ends (0 when it has none)."""
        fault = self.faults.get(tenant_id)
        return max(fault.retry_at - self._now(), 0.0) if fault else 0.0

    def succeeded(self, tenant_id: int) -> None:
        if self.faults.pop(tenant_id, None) is not None:
            log_event(log, "leader.tenant_recovered", "tenant %s works again", tenant_id)

    def report(self) -> list[dict]:
        now = self._now()
        return [
            {
                "tenant_id": tenant_id,
                "schema": fault.schema,
                "error": fault.error,
                "failures": fault.failures,
                "retry_in_seconds": round(max(fault.retry_at - now, 0.0), 1),
            }
            for tenant_id, fault in sorted(self.faults.items())
        ]

    def adopt(self, client, key: str) -> int:
        """A new leader takes over what its predecessor published: a tenant that was
        failing is not tried again before its back-off ends (a tenant whose every attempt
        costs a lock wait must not cost every leader in turn). Returns how many."""
        try:
            report = json.loads(client.get(key) or b"[]")
        except ValueError:
            return 0
        now = self._now()
        for item in report:
            self.faults.setdefault(
                int(item["tenant_id"]),
                TenantFault(
                    item["schema"],
                    item["error"],
                    int(item["failures"]),
                    now + float(item["retry_in_seconds"]),
                ),
            )
        return len(report)

    def publish(self, client, key: str, ttl_seconds: int) -> None:
        """For `scheduler_status`: what the leader skips right now."""
        client.set(key, json.dumps(self.report()), ex=ttl_seconds)


def isolated(
    faults: TenantFaults,
    tenant_id: int,
    schema: str,
    work: Callable[[], T],
    *,
    record_success: bool = True,
) -> tuple[bool, T | None]:
    """Run one tenant's unit of work in its own savepoint (or transaction); a failure that
    is the tenant's own is recorded and swallowed. Returns (ran, result). A success ends
    the tenant's back-off unless `record_success` is false: a read that works says
    nothing of the write after it (the fire's early publication), and ending the back-off
    on it would restart a tenant whose writes keep failing at its shortest back-off."""
    if not faults.allowed(tenant_id):
        return False, None
    try:
        with transaction.atomic():
            result = work()
    except Exception as exc:
        if must_step_down(exc):
            raise
        faults.failed(tenant_id, schema, exc)
        return False, None
    if record_success:
        faults.succeeded(tenant_id)
    return True, result
