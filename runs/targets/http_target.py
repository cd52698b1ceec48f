"""A job's `http` target as one guarded call: the scheduler's headers, settings as limits."""

from __future__ import annotations

from django.conf import settings

from core.ssrf import parse_allow_networks

from .http import HttpCall, send

BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def scheduler_headers(*, run_id: str, job_id: int, scheduled_for: str, attempt: int) -> dict:
    return {
        "Idempotency-Key": run_id,
        "X-Scheduler-Run-Id": run_id,
        "X-Scheduler-Job-Id": str(job_id),
        "X-Scheduler-Scheduled-For": scheduled_for,
        "X-Scheduler-Attempt": str(attempt),
    }


def call_http_target(*, target: dict, payload: dict, timeout_seconds: float, headers: dict):
    method = target.get("method", "POST").upper()
    call = HttpCall(
        method=method,
        url=target["url"],
        headers={**(target.get("headers") or {}), **headers},
        json_body=payload if method in BODY_METHODS else None,
        timeout_seconds=timeout_seconds,
        max_response_bytes=settings.SCHEDULER_HTTP_MAX_RESPONSE_BYTES,
    )
    return send(call, allow=parse_allow_networks(settings.SCHEDULER_HTTP_ALLOW_NETWORKS))
