"""Standard Webhooks signatures (https://www.standardwebhooks.com, spec v1): pure.

The signed content is ``{webhook-id}.{webhook-timestamp}.{body}`` (the body's exact bytes);
the signature is ``v1,`` + base64(HMAC-SHA256(key, content)), where the key is the
base64-decoded part of a ``whsec_…`` secret. ``webhook-signature`` carries one or more of
them separated by spaces: during a rotation's overlap we sign with both the new and the old
secret, and a receiver accepts the message if any one matches a secret it knows.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence

PREFIX = "whsec_"
SECRET_BYTES = 32  # the spec asks for 24 to 64 random bytes


class BadSigningSecret(ValueError):
    pass


def generate_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_…`` secret."""
    if not secret.startswith(PREFIX):
        raise BadSigningSecret("a signing secret starts with whsec_")
    try:
        key = base64.b64decode(secret[len(PREFIX) :], validate=True)
    except ValueError:
        raise BadSigningSecret("a signing secret is whsec_ and base64") from None
    if not key:
        raise BadSigningSecret("a signing secret must not be empty")
    return key


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    content = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_header(
    signing_secrets: Sequence[str], message_id: str, timestamp: int, body: bytes
) -> str:
    """The ``webhook-signature`` value: one signature per secret, space-separated."""
    return " ".join(signature(s, message_id, timestamp, body) for s in signing_secrets)


def webhook_headers(
    signing_secrets: Sequence[str], message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_header(signing_secrets, message_id, timestamp, body),
    }


SIGNATURE_HEADERS = frozenset({"webhook-id", "webhook-timestamp", "webhook-signature"})
