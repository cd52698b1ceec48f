"""A job's `http` target as one guarded, signed call: the scheduler's headers, the job's
headers opened at the last moment, settings as limits.

Secret header values stay sealed everywhere (the job row, the claim, the Claimed record;
the broker messages carry only ids) until :func:`prepare_delivery` opens them here, in the
worker, for the request itself. The delivery is signed per Standard Webhooks with the
tenant's signing secret(s): `webhook-id` is the run id, the same for every attempt of the
run (retries and replays are the same message to the receiver, as with Idempotency-Key).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.clock import Clock
from core.encryption import UnsealError, keyring
from core.ssrf import AllowList, parse_allow_networks
from core.webhook_signing import webhook_headers
from jobs.headers import open_headers
from tenants.signing import SIGNING_KEYS, SigningKeys

from .http import HttpCall

BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
Signer = Callable[[bytes], Mapping[str, str]]


class DeliveryNotReady(Exception):
    """The request cannot be prepared on this worker (a key is missing): the message says
    what to fix, without any secret."""


def scheduler_headers(*, run_id: str, job_id: int, scheduled_for: str, attempt: int) -> dict:
    return {
        "Idempotency-Key": run_id,
        "X-Scheduler-Run-Id": run_id,
        "X-Scheduler-Job-Id": str(job_id),
        "X-Scheduler-Scheduled-For": scheduled_for,
        "X-Scheduler-Attempt": str(attempt),
    }


@dataclass(frozen=True)
class PreparedDelivery:
    headers: dict[str, str]  # the job's headers in clear
    secrets: tuple[str, ...]  # the secret values among them, to redact
    signer: Signer


def signer_for(keys: SigningKeys, message_id: str, clock: Clock) -> Signer:
    """Signs each hop's body at the moment it is sent (webhook-timestamp: now)."""

    def sign(body: bytes) -> Mapping[str, str]:
        now = clock.now()
        return webhook_headers(keys.active(now), message_id, int(now.timestamp()), body)

    return sign


def prepare_delivery(
    *, schema: str, signing_version: int | None, stored_headers: Any, run_id: str, clock: Clock
) -> PreparedDelivery:
    try:
        opened = open_headers(stored_headers, keyring())
    except UnsealError:
        raise DeliveryNotReady(
            "a secret header value cannot be decrypted on this worker: the key it was "
            "sealed with is not in TICKWORK_SECRET_KEYS"
        ) from None
    try:
        keys = SIGNING_KEYS.get(schema=schema, version=signing_version, now=clock.now())
    except UnsealError:
        raise DeliveryNotReady(
            "the tenant's signing secret cannot be decrypted on this worker: the key it was "
            "sealed with is not in TICKWORK_SECRET_KEYS"
        ) from None
    return PreparedDelivery(opened.values, opened.secrets, signer_for(keys, run_id, clock))


def http_call(
    *,
    target: dict,
    payload: dict,
    timeout_seconds: float,
    headers: dict,
    signer: Signer | None = None,
) -> HttpCall:
    """The call a job's target makes; `headers`: the job's (opened) and the scheduler's,
    the scheduler's winning. Both execution modes build it here."""
    method = target.get("method", "POST").upper()
    return HttpCall(
        method=method,
        url=target["url"],
        headers=headers,
        json_body=payload if method in BODY_METHODS else None,
        timeout_seconds=timeout_seconds,
        max_response_bytes=settings.SCHEDULER_HTTP_MAX_RESPONSE_BYTES,
        signer=signer,
    )


def allow_networks() -> AllowList:
    return parse_allow_networks(settings.SCHEDULER_HTTP_ALLOW_NETWORKS)
