"""Standard Webhooks signatures: the spec's published example, and the reference library
(`standardwebhooks`, written by the spec's authors) as the independent verifier."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from core.webhook_signing import (
    BadSigningSecret,
    generate_secret,
    signature,
    signature_header,
    webhook_headers,
)

# The example of the Standard Webhooks / Svix documentation.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_the_published_example_signs_to_the_published_signature():
    assert signature(VECTOR_SECRET, VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY) == VECTOR_SIGNATURE


def test_the_reference_library_signs_the_example_alike():
    at = datetime.fromtimestamp(VECTOR_TIMESTAMP, tz=UTC)
    expected = Webhook(VECTOR_SECRET).sign(VECTOR_ID, at, VECTOR_BODY.decode())
    assert signature(VECTOR_SECRET, VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY) == expected


def _now_headers(secrets: list[str], body: bytes, message_id: str = "run-1") -> dict[str, str]:
    return webhook_headers(secrets, message_id, int(time.time()), body)


def test_the_reference_verifier_accepts_our_headers_and_refuses_a_tampered_body():
    secret = generate_secret()
    body = '{"report":"daily","ü":"ñ"}'.encode()
    headers = _now_headers([secret], body)
    assert Webhook(secret).verify(body, headers) == {"report": "daily", "ü": "ñ"}
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace(b"daily", b"hourly"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, {**headers, "webhook-id": "run-2"})
    stale = str(int(headers["webhook-timestamp"]) - 1)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, {**headers, "webhook-timestamp": stale})


def test_two_secrets_give_two_signatures_each_verifying_alone():
    new, old, stranger = generate_secret(), generate_secret(), generate_secret()
    body = b"{}"
    headers = _now_headers([new, old], body)
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(new).verify(body, headers)
    Webhook(old).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(stranger).verify(body, headers)


def test_an_empty_body_is_signed_as_empty():
    secret = generate_secret()
    headers = _now_headers([secret], b"")
    Webhook(secret).verify(b"", headers, json_parse=False)


def test_generated_secrets_are_whsec_and_32_random_bytes():
    one, two = generate_secret(), generate_secret()
    assert one.startswith("whsec_") and one != two
    assert len(base64.b64decode(one.removeprefix("whsec_"))) == 32


@pytest.mark.parametrize("bad", ["", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_%%%"])
def test_a_malformed_secret_is_refused(bad):
    with pytest.raises(BadSigningSecret):
        signature_header([bad], "id", 1, b"")
