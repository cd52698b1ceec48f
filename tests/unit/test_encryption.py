"""Secrets at rest: Fernet tokens, key rotation with MultiFernet, key checks."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from core.encryption import Keyring, SecretKeyError, UnsealError, check_key, derived_dev_key

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def test_a_sealed_value_opens_and_does_not_contain_the_value():
    ring = Keyring([NEW])
    token = ring.seal("Bearer s3cret-token")
    assert "s3cret" not in token
    assert ring.unseal(token) == "Bearer s3cret-token"
    assert ring.seal("x") != ring.seal("x")  # a fresh IV every time


def test_rotation_opens_old_tokens_and_reseals_them_under_the_newest_key():
    old_token = Keyring([OLD]).seal("value")
    rotating = Keyring([NEW, OLD])
    assert rotating.unseal(old_token) == "value"
    assert not rotating.is_current(old_token)
    resealed = rotating.reseal(old_token)
    assert rotating.is_current(resealed)
    assert Keyring([NEW]).unseal(resealed) == "value"


def test_a_token_whose_key_is_gone_does_not_open():
    token = Keyring([OLD]).seal("value")
    with pytest.raises(UnsealError):
        Keyring([NEW]).unseal(token)
    with pytest.raises(UnsealError):
        Keyring([NEW]).reseal(token)
    with pytest.raises(UnsealError):
        Keyring([NEW]).unseal("not a token")


@pytest.mark.parametrize("bad", ["", "short", "x" * 44, "ñ" * 44, Fernet.generate_key().hex()])
def test_a_bad_key_is_named_by_position_not_printed(bad):
    with pytest.raises(SecretKeyError) as caught:
        check_key(bad, 2)
    assert "entry 2 is not a Fernet key" in str(caught.value)
    assert not bad or bad not in str(caught.value)


def test_the_development_key_is_derived_stably_and_is_a_fernet_key():
    key = derived_dev_key("some secret key")
    assert key == derived_dev_key("some secret key") != derived_dev_key("another")
    Keyring([key]).seal("works")


def test_a_keyring_needs_a_key():
    with pytest.raises(SecretKeyError):
        Keyring([])
