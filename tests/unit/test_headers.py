"""An HTTP target's headers as given, stored, shown and opened (jobs/headers.py)."""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet

from core.encryption import Keyring
from jobs.headers import clean_headers, is_secret, open_headers, reseal_headers, shown_headers

RING_KEY = Fernet.generate_key().decode()
RING = Keyring([RING_KEY])


class Sink:
    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def add(self, field: str, message: str) -> None:
        self.errors.append((field, message))


def clean(given, stored=None, max_bytes=8192, ring=RING):
    sink = Sink()
    return clean_headers(sink, given, stored, ring=ring, max_bytes=max_bytes), sink.errors


def test_plain_strings_keep_working_and_a_secret_is_sealed():
    stored, errors = clean(
        {"X-Team": "blue", "Authorization": {"value": "Bearer t0k", "secret": True}}
    )
    assert errors == []
    assert stored["X-Team"] == "blue"
    assert is_secret(stored["Authorization"]) and "t0k" not in json.dumps(stored)
    assert shown_headers(stored) == {"X-Team": "blue", "Authorization": {"secret": True}}
    opened = open_headers(stored, RING)
    assert opened.values == {"X-Team": "blue", "Authorization": "Bearer t0k"}
    assert opened.secrets == ("Bearer t0k",)


def test_a_secret_without_a_value_keeps_the_stored_one_and_the_same_value_keeps_its_token():
    stored, _ = clean({"Authorization": {"value": "Bearer t0k", "secret": True}})
    kept, errors = clean({"Authorization": {"secret": True}}, stored)
    assert errors == [] and kept == stored
    again, _ = clean({"Authorization": {"value": "Bearer t0k", "secret": True}}, stored)
    assert again == stored  # no new token, so an edit that changed nothing changes nothing
    changed, _ = clean({"Authorization": {"value": "Bearer other", "secret": True}}, stored)
    assert open_headers(changed, RING).values == {"Authorization": "Bearer other"}


def test_a_value_object_with_secret_false_is_plain():
    stored, errors = clean({"X-A": {"value": "1", "secret": False}, "X-B": {"value": "2"}})
    assert errors == [] and stored == {"X-A": "1", "X-B": "2"}


@pytest.mark.parametrize(
    ("given", "stored", "message"),
    [
        ({"Authorization": {"secret": True}}, None, "Authorization: has no stored secret value"),
        ({"Authorization": {"secret": True}}, {"Authorization": "plain"}, "has no stored secret"),
        ({"X-A": {"secret": False}}, None, "X-A: a value is required"),
        ({"X-A": {"value": "1", "secret": "yes"}}, None, 'X-A: give a string or {"value"'),
        ({"X-A": {"value": "1", "hidden": True}}, None, 'X-A: give a string or {"value"'),
        ({"X-A": 5}, None, "X-A: the value must be a string"),
        ({"X-A": {"value": 5, "secret": True}}, None, "X-A: the value must be a string"),
        ({"X-A": "a\r\nX-Injected: 1"}, None, "must not contain line breaks"),
        ({"X-A": {"value": "a\nb", "secret": True}}, None, "must not contain line breaks"),
        ({"X:A": "1"}, None, "X:A: a name is letters, digits"),
        ({"X A": "1"}, None, "X A: a name is letters, digits"),
        ({"X-A": "caf\u00e9"}, None, "X-A: a value is printable ASCII"),
        ({"X-A": {"value": "t0k\x00", "secret": True}}, None, "X-A: a value is printable ASCII"),
        ({"": "1"}, None, "names must be non-empty strings"),
        ({"Webhook-Signature": "v1,forged"}, None, "set by the scheduler"),
        ({"webhook-id": "x"}, None, "set by the scheduler"),
        (["X-A"], None, "must be an object"),
    ],
)
def test_bad_headers_are_refused_naming_the_header(given, stored, message):
    _, errors = clean(given, stored)
    assert [field for field, _ in errors] == ["target.headers"]
    assert message in errors[0][1]


def test_the_size_limit_counts_values_in_clear_not_their_tokens():
    value = "v" * 60
    _, errors = clean({"Authorization": {"value": value, "secret": True}}, max_bytes=100)
    assert errors == []  # the token is ~2.5 times longer: it must not count
    _, errors = clean({"Authorization": {"value": value * 2, "secret": True}}, max_bytes=100)
    assert errors == [("target.headers", "larger than 100 bytes")]


def test_a_kept_secret_whose_key_is_gone_must_be_given_again():
    stored, _ = clean({"Authorization": {"value": "Bearer t0k", "secret": True}})
    other = Keyring([Fernet.generate_key().decode()])
    _, errors = clean({"Authorization": {"secret": True}}, stored, ring=other)
    assert "can no longer be decrypted" in errors[0][1]


def test_resealing_counts_only_what_was_not_under_the_newest_key():
    stored, _ = clean({"A": {"value": "1", "secret": True}, "B": "plain"}, ring=RING)
    new = Keyring([Fernet.generate_key().decode(), RING_KEY])
    resealed, count = reseal_headers(stored, new)
    assert count == 1 and resealed["B"] == "plain"
    assert reseal_headers(resealed, new) == (resealed, 0)
    assert open_headers(resealed, new).values == {"A": "1", "B": "plain"}
