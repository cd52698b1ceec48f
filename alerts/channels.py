"""Alert channels: create, change, delete, read, for the API and the portal, in the current
tenant schema. Input is checked field by field (a JobValidationError names each bad field:
the API's 400 problem); a webhook URL passes the SSRF guard's save-time check (an address
literal in a refused range, or `localhost`, is refused now; names are checked again when
each notification is sent). Header values are sealed at once and never shown again."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction

from core.encryption import keyring
from core.ssrf import RefusedDestination, check_saved_url, parse_allow_networks
from jobs.models import Job
from jobs.validation import Errors, JobValidationError

from .models import AlertChannel
from .states import CHANNEL_KINDS, EMAIL, WEBHOOK

FIELDS = {
    "name",
    "kind",
    "url",
    "headers",
    "emails",
    "job",
    "on_dead_letter",
    "failure_threshold",
    "missed_grace_seconds",
    "notify_resolved",
    "enabled",
}
BOOLEANS = ("on_dead_letter", "notify_resolved", "enabled")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
OWNED_HEADERS = {"webhook-id", "webhook-timestamp", "webhook-signature", "host", "content-length"}
MAX_EMAILS = 20
MAX_GRACE = 7 * 86400


class ChannelNotFound(Exception):
    pass


def channel_list():
    return AlertChannel.objects.all()


def channel_get(*, channel_id: int) -> AlertChannel:
    try:
        return AlertChannel.objects.get(pk=channel_id)
    except AlertChannel.DoesNotExist:
        raise ChannelNotFound(channel_id) from None


def channel_create(*, data: Any, clock, **_context: Any) -> AlertChannel:
    values = clean_channel_input(data, current=None)
    now = clock.now()
    return _save(AlertChannel(created_at=now, updated_at=now), values)


def channel_update(*, channel_id: int, data: Any, clock, **_context: Any) -> AlertChannel:
    channel = channel_get(channel_id=channel_id)
    values = clean_channel_input(data, current=channel)
    channel.updated_at = clock.now()
    return _save(channel, values)


def channel_delete(*, channel_id: int, **_context: Any) -> None:
    channel_get(channel_id=channel_id).delete()  # its incidents and notifications go too


def _save(channel: AlertChannel, values: dict[str, Any]) -> AlertChannel:
    for name, value in values.items():
        setattr(channel, name, value)
    try:
        with transaction.atomic():
            channel.save()
    except IntegrityError:
        raise JobValidationError({"name": ["a channel with this name exists"]}) from None
    return channel


def clean_channel_input(data: Any, *, current: AlertChannel | None) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise JobValidationError({"non_field_errors": ["expected a JSON object"]})
    errors, out = Errors(), {}
    for key in sorted(set(data) - FIELDS):
        errors.add(key, "unknown field")
    creating = current is None
    if "name" in data or creating:
        name = data.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            errors.add("name", "is required: 1 to 200 characters")
        else:
            out["name"] = name.strip()
    kind = data.get("kind", current.kind if current else None)
    if kind not in CHANNEL_KINDS:
        errors.add("kind", f"must be one of {', '.join(CHANNEL_KINDS)}")
    else:
        out["kind"] = kind
    _destination(errors, data, out, kind, current)
    if "job" in data:
        out["job"] = _job(errors, data["job"])
    for name in BOOLEANS:
        if name in data:
            if not isinstance(data[name], bool):
                errors.add(name, "must be true or false")
            else:
                out[name] = data[name]
    _whole_or_null(errors, data, out, "failure_threshold", 1, 1000)
    _whole_or_null(errors, data, out, "missed_grace_seconds", 0, MAX_GRACE)
    _conditions(errors, out, current)
    errors.raise_if_any()
    return out


def _destination(errors: Errors, data: dict, out: dict, kind, current) -> None:
    if kind == WEBHOOK:
        if "url" in data or current is None or current.kind != WEBHOOK:
            out["url"] = _url(errors, data.get("url"))
        if "headers" in data:
            out["headers"] = _headers(errors, data["headers"])
        if "emails" in data:
            errors.add("emails", "only an email channel has emails")
        out.setdefault("emails", [])
    elif kind == EMAIL:
        if "emails" in data or current is None or current.kind != EMAIL:
            out["emails"] = _emails(errors, data.get("emails"))
        for name in ("url", "headers"):
            if name in data:
                errors.add(name, "only a webhook channel has a url and headers")
        out["url"], out["headers"] = "", {}


def _url(errors: Errors, url: Any) -> str:
    if not isinstance(url, str) or not url or len(url) > 2048:
        errors.add("url", "must be a URL of at most 2048 characters")
        return ""
    try:
        check_saved_url(url, allow=parse_allow_networks(settings.SCHEDULER_HTTP_ALLOW_NETWORKS))
    except RefusedDestination as exc:
        errors.add("url", str(exc))
    return url


def _headers(errors: Errors, given: Any) -> dict[str, str]:
    if not isinstance(given, dict) or len(given) > 20:
        errors.add("headers", "must be an object of at most 20 names to strings")
        return {}
    ring, out = keyring(), {}
    for name, value in given.items():
        if not HEADER_NAME.match(name) or name.lower() in OWNED_HEADERS:
            errors.add("headers", f"{name!r} is not a header name a channel may set")
        elif not isinstance(value, str) or len(value) > 4096 or any(c in value for c in "\r\n"):
            errors.add("headers", f"{name}: must be a string without line breaks (4096 at most)")
        else:
            out[name] = ring.seal(value)
    return out


def _emails(errors: Errors, given: Any) -> list[str]:
    if not isinstance(given, list) or not 1 <= len(given) <= MAX_EMAILS:
        errors.add("emails", f"must be a list of 1 to {MAX_EMAILS} addresses")
        return []
    for address in given:
        try:
            if not isinstance(address, str):
                raise DjangoValidationError("not a string")
            validate_email(address)
        except DjangoValidationError:
            errors.add("emails", f"{address!r} is not an email address")
    return list(given)


def _job(errors: Errors, value: Any) -> Job | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**63:
        errors.add("job", "must be a job id, or null for every job of the tenant")
        return None
    job = Job.objects.filter(pk=value, deleted_at__isnull=True).first()
    if job is None:
        errors.add("job", f"no job {value} in this tenant")
    return job


def _whole_or_null(errors: Errors, data: dict, out: dict, name: str, lo: int, hi: int) -> None:
    if name not in data:
        return
    value = data[name]
    if value is None:
        out[name] = None
    elif isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        errors.add(name, f"must be null (off) or a whole number from {lo} to {hi}")
    else:
        out[name] = value


def _conditions(errors: Errors, out: dict, current: AlertChannel | None) -> None:
    def value(name: str, default: Any) -> Any:
        if name in out:
            return out[name]
        return getattr(current, name) if current is not None else default

    if not (
        value("on_dead_letter", True)
        or value("failure_threshold", None)
        or value("missed_grace_seconds", None) is not None
    ):
        errors.add(
            "on_dead_letter",
            "a channel needs a condition: on_dead_letter, failure_threshold or "
            "missed_grace_seconds",
        )


def shown(channel: AlertChannel) -> dict[str, Any]:
    """What may be shown of a channel: header names, never their values."""
    return {
        "id": channel.id,
        "name": channel.name,
        "kind": channel.kind,
        "url": channel.url or None,
        "header_names": sorted(channel.headers),
        "emails": channel.emails,
        "job": channel.job_id,
        "on_dead_letter": channel.on_dead_letter,
        "failure_threshold": channel.failure_threshold,
        "missed_grace_seconds": channel.missed_grace_seconds,
        "notify_resolved": channel.notify_resolved,
        "enabled": channel.enabled,
        "created_at": channel.created_at,
        "updated_at": channel.updated_at,
    }


def channel_secrets_reseal(*, ring) -> int:
    """Re-encrypt the current schema's channel header values with the newest key (for
    `rotate_secrets`); returns how many values changed. Idempotent."""
    changed = 0
    with transaction.atomic():
        for channel in AlertChannel.objects.select_for_update().exclude(headers={}):
            stale = {n: v for n, v in channel.headers.items() if not ring.is_current(v)}
            if stale:
                channel.headers = {
                    **channel.headers,
                    **{n: ring.reseal(v) for n, v in stale.items()},
                }
                channel.save(update_fields=["headers"])
                changed += len(stale)
    return changed
