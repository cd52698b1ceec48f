"""Secrets at rest: Fernet tokens under a list of keys, the newest first (MultiFernet).

A value is sealed with the newest key and opened with any key of the list, so an operator
rotates keys by putting a new one first, running `manage.py rotate_secrets` (which reseals
every stored value with it) and only then removing the old one. Pure: the keys come in as
arguments; `keyring()` reads them from the settings (TICKWORK_SECRET_KEYS).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet


class SecretKeyError(ValueError):
    """A configured key is not a Fernet key. The message names its position, never it."""


class UnsealError(Exception):
    """A stored value that no configured key opens (its key was removed, or it is not a
    token at all)."""


def check_key(key: str, position: int) -> None:
    try:
        raw = base64.urlsafe_b64decode(key.encode("ascii"))
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raw = b""
    if len(raw) != 32:
        raise SecretKeyError(
            f"TICKWORK_SECRET_KEYS entry {position} is not a Fernet key (32 bytes, url-safe "
            "base64: make one with `python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())'`)"
        )


def derived_dev_key(secret_key: str) -> str:
    """A development key derived from Django's SECRET_KEY (used only when DEBUG is on and
    no TICKWORK_SECRET_KEYS is set), stable across restarts of the same checkout."""
    digest = hashlib.sha256(b"tickwork-secret-keys:" + secret_key.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")


class Keyring:
    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise SecretKeyError("TICKWORK_SECRET_KEYS holds no key")
        for position, key in enumerate(keys, 1):
            check_key(key, position)
        self._newest = Fernet(keys[0])
        self._all = MultiFernet([Fernet(key) for key in keys])

    def seal(self, plaintext: str) -> str:
        return self._newest.encrypt(plaintext.encode()).decode("ascii")

    def unseal(self, token: str) -> str:
        try:
            return self._all.decrypt(token.encode("ascii")).decode()
        except (InvalidToken, UnicodeError, AttributeError):
            raise UnsealError("no key in TICKWORK_SECRET_KEYS opens this value") from None

    def is_current(self, token: str) -> bool:
        """Sealed with the newest key already (nothing for a rotation to do)."""
        try:
            self._newest.decrypt(token.encode("ascii"))
        except (InvalidToken, UnicodeError):
            return False
        return True

    def reseal(self, token: str) -> str:
        """The same value sealed with the newest key (UnsealError if no key opens it)."""
        try:
            return self._all.rotate(token.encode("ascii")).decode("ascii")
        except (InvalidToken, UnicodeError):
            raise UnsealError("no key in TICKWORK_SECRET_KEYS opens this value") from None


@functools.lru_cache(maxsize=4)
def _keyring_for(keys: tuple[str, ...]) -> Keyring:
    return Keyring(keys)


def keyring() -> Keyring:
    """The process's keyring, from settings (cached per key list, so tests that override
    the setting get theirs)."""
    from django.conf import settings  # imported here: the module itself stays pure

    return _keyring_for(tuple(settings.TICKWORK_SECRET_KEYS))
