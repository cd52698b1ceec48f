"""Examples shown in the OpenAPI schema (and so in the Swagger UI): what the objects look
like, and one request or answer for every operation."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from drf_spectacular.utils import OpenApiExample

from runs import states

RUN_ID = "01a22689-11d9-754e-8aa1-48ddf05cae1b"
DAG_RUN_ID = "01a2268a-0b6e-7b42-9d1e-5f1c2a7e3b10"

JOB = {
    "id": 5,
    "name": "nightly-report",
    "description": "Builds the sales report.",
    "schedule": {
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "description": "At 02:30 (Europe/Berlin)",
    },
    "target": {
        "type": "http",
        "url": "https://example.com/hooks/report",
        "method": "POST",
        "headers": {"X-Team": "sales"},
    },
    "payload": {"format": "pdf"},
    "retry": {
        "max_attempts": 3,
        "backoff_seconds": 10.0,
        "backoff_multiplier": 2.0,
        "backoff_max_seconds": 3600.0,
        "jitter": True,
    },
    "timeout_seconds": 300,
    "priority": "normal",
    "concurrency_policy": "forbid",
    "max_concurrent_runs": 1,
    "misfire_policy": "run_once",
    "misfire_grace_seconds": 60,
    "jitter_seconds": 0,
    "dst_gap": "shift",
    "dst_repeat": "first",
    "depends_on": [],
    "state": "active",
    "paused_reason": "",
    "paused_at": None,
    "fault": None,
    "next_run_at": "2026-11-30T01:30:00Z",
    "last_run": {
        "id": RUN_ID,
        "status": states.SUCCEEDED,
        "finished_at": "2026-11-29T01:30:02.114Z",
    },
    "created_at": "2026-11-20T09:00:46.347306Z",
    "updated_at": "2026-11-20T09:00:46.347306Z",
}
PAUSED_JOB = {
    **JOB,
    "state": "paused",
    "paused_reason": "database migration",
    "paused_at": "2026-11-29T08:00:00Z",
    "next_run_at": None,
}
RUN = {
    "id": RUN_ID,
    "job": 5,
    "job_name": "nightly-report",
    "job_deleted": False,
    "trigger": "schedule",
    "status": states.SUCCEEDED,
    "scheduled_for": "2026-11-29T01:30:00Z",
    "queued_at": "2026-11-29T01:30:00.004Z",
    "started_at": "2026-11-29T01:30:00.011Z",
    "finished_at": "2026-11-29T01:30:02.114Z",
    "attempt": 1,
    "attempts": [
        {
            "number": 1,
            "outcome": states.ATTEMPT_SUCCEEDED,
            "worker": "worker-1:4711",
            "started_at": "2026-11-29T01:30:00.011Z",
            "finished_at": "2026-11-29T01:30:02.114Z",
            "error": "",
            "output": 'HTTP 200: {"ok": true}',
        }
    ],
    "next_attempt_at": None,
    "error": "",
    "skip_reason": "",
    "dag_run": None,
}
DEAD_RUN = {
    **RUN,
    "trigger": "manual",
    "status": states.DEAD,
    "attempt": 3,
    "attempts": [],
    "error": "HTTP 500",
}
NEXT = "http://localhost:8000/api/v1/{path}?page_size=50&cursor={cursor}"


def page(path: str, cursor: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"next": NEXT.format(path=path, cursor=cursor), "results": list(items)}


def answer(title: str, value: Any, status: int = 200) -> OpenApiExample:
    return OpenApiExample(title, value, response_only=True, status_codes=[str(status)])


def request(title: str, value: Any) -> OpenApiExample:
    return OpenApiExample(title, value, request_only=True)


def problem(
    title: str, status: int, detail: str, type_: str = "about:blank", errors: dict | None = None
) -> OpenApiExample:
    """A problem+json answer, titled `title` in the Swagger UI."""
    body: dict[str, Any] = {
        "type": type_,
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    if errors:
        body["errors"] = errors
    return OpenApiExample(
        title,
        body,
        response_only=True,
        status_codes=[str(status)],
        media_type="application/problem+json",
    )
