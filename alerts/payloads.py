"""What a notification says: the webhook's JSON body and the email's subject and text.
Pure. The body is built once, when the notification is written, so every attempt sends the
same bytes' content under the same `webhook-id` (docs/alerts.md has an example)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .states import DEAD_LETTER, FAILURES, MISSED, OPENED

TITLES = {
    DEAD_LETTER: "a run was dead-lettered",
    FAILURES: "consecutive failures",
    MISSED: "a run did not succeed in time",
}


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def payload(
    *,
    notification_id: str,
    event: str,
    tenant: str,
    incident: dict[str, Any],
    job: dict[str, Any],
    at: datetime,
) -> dict[str, Any]:
    """`incident`: id, kind, trigger_at, opened_at, resolved_at, run_id, detail."""
    return {
        "type": f"alert.{event}",
        "id": notification_id,
        "tenant": tenant,
        "at": _iso(at),
        "incident": {
            "id": incident["id"],
            "kind": incident["kind"],
            "title": TITLES[incident["kind"]],
            "detail": incident["detail"],
            "run_id": str(incident["run_id"]) if incident.get("run_id") else None,
            "trigger_at": _iso(incident["trigger_at"]),
            "opened_at": _iso(incident["opened_at"]),
            "resolved_at": _iso(incident.get("resolved_at")),
            "resolved_by_run": (
                str(incident["resolved_by_run"]) if incident.get("resolved_by_run") else None
            ),
        },
        "job": {"id": job["id"], "name": job["name"]},
    }


def email_text(body: dict[str, Any]) -> tuple[str, str]:
    """(subject, text) of an email about the same notification."""
    incident, job = body["incident"], body["job"]
    if body["type"] == f"alert.{OPENED}":
        subject = f"[Tickwork {body['tenant']}] {job['name']}: {incident['title']}"
        lines = [
            f"Job {job['name']} (id {job['id']}): {incident['title']}.",
            incident["detail"],
            f"Since {incident['trigger_at']}. A message follows when the job next succeeds.",
        ]
    else:
        subject = f"[Tickwork {body['tenant']}] {job['name']}: resolved ({incident['title']})"
        lines = [
            f"Job {job['name']} (id {job['id']}) succeeded again at {incident['resolved_at']}"
            f" (run {incident['resolved_by_run']}).",
            f"The incident opened at {incident['opened_at']}: {incident['detail']}",
        ]
    lines += ["", f"Incident {incident['id']}, notification {body['id']}."]
    return subject, "\n".join(lines)
