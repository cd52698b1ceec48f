"""An HTTP target's headers: plain or secret, as given, stored, shown and sent. Pure.

As given (API, portal): a name maps to a string (plain), to ``{"value": "…", "secret":
true}`` (secret), or to ``{"secret": true}`` without a value, which keeps the secret value
already stored under that name (so a client can send back what it read).

As stored (`Job.target["headers"]`): a plain value is the string; a secret one is
``{"secret": true, "sealed": "<Fernet token>"}``, sealed with TICKWORK_SECRET_KEYS
(core/encryption.py). Only the worker opens it, when it sends the request.

As shown (API, portal, audit log): plain values as they are, a secret one as
``{"secret": true}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from core.encryption import Keyring, UnsealError
from core.webhook_signing import SIGNATURE_HEADERS

FIELD = "target.headers"
SHOWN_SECRET = {"secret": True}
LINE_BREAKS = "names and values must not contain line breaks"
# RFC 9110: a field name is a token; a value is visible ASCII, spaces and tabs (httpx sends
# ASCII only, and h11 refuses control characters: better said at save time than at 3 am).
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_VALUE = re.compile(r"^[\t\x20-\x7e]*$")


class ErrorSink(Protocol):
    def add(self, field: str, message: str) -> None: ...


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get("secret") is True and "sealed" in value


def shown_headers(stored: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        name: dict(SHOWN_SECRET) if is_secret(value) else value
        for name, value in (stored or {}).items()
    }


def secret_names(stored: Mapping[str, Any] | None) -> list[str]:
    return [name for name, value in (stored or {}).items() if is_secret(value)]


@dataclass(frozen=True)
class OpenedHeaders:
    values: dict[str, str]  # what the request sends
    secrets: tuple[str, ...]  # the secret values in clear, to redact wherever text is kept


def open_headers(stored: Mapping[str, Any] | None, ring: Keyring) -> OpenedHeaders:
    """The headers to send (UnsealError if a secret value cannot be opened)."""
    values, secrets = {}, []
    for name, value in (stored or {}).items():
        if is_secret(value):
            values[name] = ring.unseal(value["sealed"])
            secrets.append(values[name])
        else:
            values[name] = value
    return OpenedHeaders(values, tuple(secrets))


def reseal_headers(stored: Mapping[str, Any], ring: Keyring) -> tuple[dict[str, Any], int]:
    """The headers with every secret value sealed under the newest key, and how many had to
    be (0: nothing to write). UnsealError if one cannot be opened."""
    out, count = {}, 0
    for name, value in stored.items():
        if is_secret(value) and not ring.is_current(value["sealed"]):
            value = {"secret": True, "sealed": ring.reseal(value["sealed"])}
            count += 1
        out[name] = value
    return out, count


def clean_headers(
    errors: ErrorSink,
    given: Any,
    stored: Mapping[str, Any] | None,
    *,
    ring: Keyring,
    max_bytes: int,
) -> dict[str, Any]:
    """The headers to store from what was given (errors under `target.headers`, each
    naming the header). `stored` is the job's current headers (None for a new job)."""
    if not isinstance(given, dict):
        errors.add(
            FIELD, 'must be an object: a name to a string, or to {"value": …, "secret": true}'
        )
        return {}
    stored = stored or {}
    out: dict[str, Any] = {}
    plain: dict[str, str] = {}  # every value in clear: the size limit counts what is sent
    for name, value in given.items():
        if not _check_name(errors, name):
            continue
        cleaned = _clean_value(errors, name, value, stored.get(name), ring)
        if cleaned is not None:
            out[name], plain[name] = cleaned
    if len(json.dumps(plain, separators=(",", ":")).encode()) > max_bytes:
        errors.add(FIELD, f"larger than {max_bytes} bytes")
    return out


def _check_name(errors: ErrorSink, name: Any) -> bool:
    if not isinstance(name, str) or not name.strip():
        errors.add(FIELD, "names must be non-empty strings")
        return False
    if "\n" in name or "\r" in name:
        errors.add(FIELD, LINE_BREAKS)
        return False
    if not _TOKEN.match(name):
        errors.add(FIELD, f"{name}: a name is letters, digits and !#$%&'*+-.^_`|~ only")
        return False
    if name.lower() in SIGNATURE_HEADERS:
        errors.add(FIELD, f"{name}: is set by the scheduler (the delivery's signature)")
        return False
    return True


def _clean_value(
    errors: ErrorSink, name: str, value: Any, current: Any, ring: Keyring
) -> tuple[Any, str] | None:
    """(stored form, value in clear), or None after adding an error."""
    if isinstance(value, dict):
        unknown = set(value) - {"value", "secret"}
        secret = value.get("secret", False)
        if unknown or not isinstance(secret, bool):
            errors.add(FIELD, f'{name}: give a string or {{"value": "…", "secret": true}}')
            return None
        if "value" not in value:
            return _kept(errors, name, secret, current, ring)
        value, wants_secret = value["value"], secret
    else:
        wants_secret = False
    if not isinstance(value, str):
        errors.add(FIELD, f"{name}: the value must be a string")
        return None
    if "\n" in value or "\r" in value:
        errors.add(FIELD, LINE_BREAKS)
        return None
    if not _VALUE.match(value):
        errors.add(FIELD, f"{name}: a value is printable ASCII (no control characters)")
        return None
    if not wants_secret:
        return value, value
    if is_secret(current) and _opens_to(current, value, ring):
        return current, value  # the same secret again: keep its token (no spurious change)
    return {"secret": True, "sealed": ring.seal(value)}, value


def _kept(
    errors: ErrorSink, name: str, secret: bool, current: Any, ring: Keyring
) -> tuple[Any, str] | None:
    if not secret:
        errors.add(FIELD, f"{name}: a value is required")
        return None
    if not is_secret(current):
        errors.add(FIELD, f'{name}: has no stored secret value to keep; give {{"value": …}}')
        return None
    try:
        return current, ring.unseal(current["sealed"])
    except UnsealError:
        errors.add(
            FIELD,
            f"{name}: the stored secret value can no longer be decrypted (its key is gone "
            "from TICKWORK_SECRET_KEYS); give the value again",
        )
        return None


def _opens_to(current: Mapping[str, Any], value: str, ring: Keyring) -> bool:
    try:
        return ring.unseal(current["sealed"]) == value
    except UnsealError:
        return False
