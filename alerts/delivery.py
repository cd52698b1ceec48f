"""Delivering notifications: claim one with a lease, send it, record what happened.

A claim is a conditional UPDATE of one due row (`FOR UPDATE SKIP LOCKED`): `pending` and
due, or `sending` with its lease expired (the sender crashed mid-send). It runs in the
caller's fenced transaction, so a deposed leader claims nothing, and while a claim's lease
runs nobody else sends that notification. The send happens outside any transaction (an
HTTP call bounded by ALERTS_HTTP_TIMEOUT_SECONDS, or the mail backend's EMAIL_TIMEOUT);
its result is written only if the claim is still ours (same `attempts`), so a late
sender whose lease expired changes nothing. Delivery is therefore at least once: a crash
between the receiver accepting and our record repeats the send, with the same
`webhook-id` (the notification id), by which receivers dedupe.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import connection, transaction
from psycopg import sql

from core.clock import Clock
from core.encryption import UnsealError, keyring
from core.logs import log_event
from core.metrics import LEADER
from core.sql import table
from core.ssrf import parse_allow_networks
from runs.targets.http import HttpCall, send
from runs.targets.http_target import signer_for
from tenants.signing import SIGNING_KEYS

from .payloads import email_text
from .states import EMAIL, GIVEN_UP, PENDING, SENDING, SENT, backoff_seconds

log = logging.getLogger("alerts.delivery")

MAX_RESPONSE_BYTES = 16 * 1024


@dataclass(frozen=True)
class Claimed:
    id: str
    attempts: int
    kind: str
    url: str
    headers: dict[str, str]  # sealed values
    emails: list[str]
    payload: dict[str, Any]
    holder: str
    started_at: datetime


@dataclass(frozen=True)
class Result:
    ok: bool
    status_code: int | None = None
    error: str = ""


CLAIM_SQL = """
UPDATE {notifications} n SET state = {sending}, attempts = n.attempts + 1,
       lease_until = %(lease_until)s, claimed_by = %(holder)s
FROM {channels} c
WHERE c.id = n.channel_id AND n.id = (
    SELECT id FROM {notifications}
    WHERE (state = {pending} AND next_attempt_at <= %(now)s)
       OR (state = {sending} AND lease_until <= %(now)s)
    ORDER BY next_attempt_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING n.id, n.attempts, c.kind, c.url, c.headers, c.emails, n.payload
"""


def claim_next(
    cursor, *, schema: str, now: datetime, holder: str, lease_seconds: float
) -> Claimed | None:
    cursor.execute(
        sql.SQL(CLAIM_SQL).format(
            notifications=table(schema, "alerts_notification"),
            channels=table(schema, "alerts_alertchannel"),
            sending=sql.Literal(SENDING),
            pending=sql.Literal(PENDING),
        ),
        {"now": now, "holder": holder, "lease_until": now + timedelta(seconds=lease_seconds)},
    )
    row = cursor.fetchone()
    if row is None:
        return None
    nid, attempts, kind, url, headers, emails, body = row
    headers, emails, body = (_json(v) for v in (headers, emails, body))
    return Claimed(str(nid), attempts, kind, url, headers or {}, emails or [], body, holder, now)


def _json(value: Any) -> Any:
    # Django registers no jsonb loader on its connections: raw queries return the text.
    return json.loads(value) if isinstance(value, str | bytes) else value


def send_notification(claimed: Claimed, *, schema: str, clock: Clock) -> Result:
    if claimed.kind == EMAIL:
        return _send_email(claimed)
    return _send_webhook(claimed, schema=schema, clock=clock)


def _send_webhook(claimed: Claimed, *, schema: str, clock: Clock) -> Result:
    ring = keyring()
    try:
        headers = {name: ring.unseal(sealed) for name, sealed in claimed.headers.items()}
        keys = SIGNING_KEYS.get(schema=schema, version=None, now=clock.now())
    except UnsealError:
        return Result(False, error="a secret cannot be decrypted: its key is not configured")
    headers["X-Tickwork-Notification-Id"] = claimed.id
    call = HttpCall(
        method="POST",
        url=claimed.url,
        headers=headers,
        json_body=claimed.payload,
        timeout_seconds=settings.ALERTS_HTTP_TIMEOUT_SECONDS,
        max_response_bytes=MAX_RESPONSE_BYTES,
        signer=signer_for(keys, claimed.id, clock),
    )
    outcome = send(call, allow=parse_allow_networks(settings.SCHEDULER_HTTP_ALLOW_NETWORKS))
    return Result(outcome.ok, outcome.status_code, outcome.error or "")


def _send_email(claimed: Claimed) -> Result:
    subject, text = email_text(claimed.payload)
    message = EmailMessage(
        subject,
        text,
        settings.DEFAULT_FROM_EMAIL,
        claimed.emails,
        headers={"X-Tickwork-Notification-Id": claimed.id},
    )
    try:
        message.send(fail_silently=False)
    except Exception as exc:  # the backend's own errors: SMTP, socket, file system
        return Result(False, error=f"{exc.__class__.__name__}: {exc}"[:1000])
    return Result(True)


RECORD_SQL = """
UPDATE {notifications} SET state = %(state)s, next_attempt_at = %(next)s, lease_until = NULL,
       last_error = %(error)s, sent_at = %(sent_at)s
WHERE id = %(id)s AND state = {sending} AND attempts = %(attempts)s
"""
LOG_SQL = """
INSERT INTO {attempts} (notification_id, number, sender, started_at, finished_at, ok,
                        status_code, error)
VALUES (%(id)s, %(attempts)s, %(holder)s, %(started)s, %(now)s, %(ok)s, %(status)s, %(error)s)
ON CONFLICT (notification_id, number) DO NOTHING
"""


def record(cursor, *, schema: str, claimed: Claimed, result: Result, now: datetime) -> str:
    """Write the attempt and the notification's next state; returns that state."""
    if result.ok:
        state, next_at = SENT, now
    elif claimed.attempts >= settings.ALERTS_DELIVERY_MAX_ATTEMPTS:
        state, next_at = GIVEN_UP, now
    else:
        wait = backoff_seconds(
            claimed.attempts,
            initial=settings.ALERTS_DELIVERY_BACKOFF_SECONDS,
            maximum=settings.ALERTS_DELIVERY_BACKOFF_MAX_SECONDS,
        )
        state, next_at = PENDING, now + timedelta(seconds=wait)
    params = {
        "id": claimed.id,
        "attempts": claimed.attempts,
        "state": state,
        "next": next_at,
        "error": result.error[:2000],
        "sent_at": now if result.ok else None,
        "holder": claimed.holder,
        "started": claimed.started_at,
        "now": now,
        "ok": result.ok,
        "status": result.status_code,
    }
    cursor.execute(
        sql.SQL(RECORD_SQL).format(
            notifications=table(schema, "alerts_notification"), sending=sql.Literal(SENDING)
        ),
        params,
    )
    ours = cursor.rowcount == 1
    cursor.execute(
        sql.SQL(LOG_SQL).format(attempts=table(schema, "alerts_deliveryattempt")), params
    )
    return state if ours else "superseded"


def deliver_tenant(
    *,
    schema: str,
    slug: str,
    clock: Clock,
    holder: str,
    fence: Callable[[Any], None],
    limit: int = 20,
    should_stop: Callable[[], bool] = lambda: False,
) -> int:
    """Send the tenant's due notifications, at most `limit`; returns how many were tried."""
    tried = 0
    while tried < limit and not should_stop():
        with transaction.atomic(), connection.cursor() as cursor:
            fence(cursor)
            claimed = claim_next(
                cursor,
                schema=schema,
                now=clock.now(),
                holder=holder,
                lease_seconds=settings.ALERTS_DELIVERY_LEASE_SECONDS,
            )
        if claimed is None:
            return tried
        tried += 1
        deliver_claimed(claimed, schema=schema, slug=slug, clock=clock)
    return tried


def deliver_claimed(claimed: Claimed, *, schema: str, slug: str, clock: Clock) -> str:
    if claimed.attempts > settings.ALERTS_DELIVERY_MAX_ATTEMPTS:
        result = Result(False, error="given up: a sender's lease expired on the last attempt")
    else:
        result = send_notification(claimed, schema=schema, clock=clock)
    with transaction.atomic(), connection.cursor() as cursor:
        state = record(cursor, schema=schema, claimed=claimed, result=result, now=clock.now())
    # A late record (its claim was taken over) still says what this attempt did.
    result_label = {SENT: "sent", GIVEN_UP: "given_up"}.get(state, "sent" if result.ok else "retry")
    LEADER.inc("tickwork_alert_deliveries", channel=claimed.kind, result=result_label)
    log_event(
        log,
        f"alert.{'delivered' if result.ok else 'delivery_failed'}",
        "notification %s (%s, attempt %s): %s",
        claimed.id,
        claimed.kind,
        claimed.attempts,
        "sent" if result.ok else f"{result.error} -> {state}",
        level=logging.INFO if result.ok else logging.WARNING,
        tenant=slug,
        attempt=claimed.attempts,
        notification=claimed.id,
        state=state,
        status_code=result.status_code,
    )
    return state
