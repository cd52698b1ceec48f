"""Each tenant's Standard Webhooks signing secret: issue, rotate, describe, and the workers'
cached copy.

The secret lives on the tenant row (public schema), sealed with TICKWORK_SECRET_KEYS
(core/encryption.py). A rotation makes a new secret current and keeps the old one signing
until the end of an overlap window, so that receivers can switch at their own pace; during
the window every delivery carries both signatures. Rotating again within a window drops the
older of the two at once (only the newest two ever sign).

Workers sign every HTTP delivery. The run claim also returns the tenant's
`signing_secret_version` (runs/execution.py, same statement, no extra round trip), and
:class:`SigningKeyCache` opens the secrets again only when that version moved: no query
per run, and a rotation applies from the next claim on.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction

from core.encryption import Keyring, UnsealError, keyring
from core.webhook_signing import generate_secret

from .models import Tenant


@dataclass(frozen=True)
class SigningSecretInfo:
    """What may be shown about a tenant's signing secret: never the secret."""

    created_at: datetime | None
    previous_expires_at: datetime | None  # None: no previous secret signs any more
    version: int


@dataclass(frozen=True)
class IssuedSigningSecret:
    secret: str  # shown once, to whoever issued or rotated it
    info: SigningSecretInfo


@dataclass(frozen=True)
class SigningKeys:
    version: int
    current: str
    previous: str | None
    previous_expires_at: datetime | None

    def active(self, now: datetime) -> list[str]:
        """The secrets that sign a delivery sent at `now`: the current one first."""
        keys = [self.current]
        if self.previous and self.previous_expires_at and now < self.previous_expires_at:
            keys.append(self.previous)
        return keys


def _info(tenant: Tenant, now: datetime | None = None) -> SigningSecretInfo:
    expires = tenant.signing_secret_previous_expires_at
    if not tenant.signing_secret_previous or (now is not None and expires and expires <= now):
        expires = None
    return SigningSecretInfo(
        created_at=tenant.signing_secret_created_at,
        previous_expires_at=expires,
        version=tenant.signing_secret_version,
    )


def signing_secret_info(*, tenant: Tenant, now: datetime) -> SigningSecretInfo:
    tenant.refresh_from_db()
    return _info(tenant, now)


def signing_secret_rotate(
    *, tenant: Tenant, now: datetime, overlap: timedelta, ring: Keyring | None = None
) -> IssuedSigningSecret:
    """Make a new secret current; the current one keeps signing for `overlap` (zero: it
    stops at once, for a secret that leaked). Also issues a tenant's first secret."""
    if overlap < timedelta(0):
        raise ValueError("overlap must not be negative")
    ring = ring or keyring()
    secret = generate_secret()
    with transaction.atomic():
        row = Tenant.objects.select_for_update().get(pk=tenant.pk)
        keep_old = bool(row.signing_secret) and overlap > timedelta(0)
        row.signing_secret_previous = row.signing_secret if keep_old else ""
        row.signing_secret_previous_expires_at = now + overlap if keep_old else None
        row.signing_secret = ring.seal(secret)
        row.signing_secret_created_at = now
        row.signing_secret_version = row.signing_secret_version + 1
        row.save(
            update_fields=[
                "signing_secret",
                "signing_secret_created_at",
                "signing_secret_previous",
                "signing_secret_previous_expires_at",
                "signing_secret_version",
            ]
        )
    for field in ("signing_secret", "signing_secret_previous", "signing_secret_version"):
        setattr(tenant, field, getattr(row, field))
    return IssuedSigningSecret(secret=secret, info=_info(row, now))


def signing_secret_ensure(*, schema: str, now: datetime, ring: Keyring | None = None) -> None:
    """Give a tenant that has none (made before signing existed, or copied by a bench) a
    secret, once even if many workers try at the same time (a conditional UPDATE). Nobody
    has seen that secret: the tenant rotates to obtain one it can verify with."""
    ring = ring or keyring()
    Tenant.objects.filter(schema_name=schema, signing_secret="", signing_secret_version=0).update(
        signing_secret=ring.seal(generate_secret()),
        signing_secret_created_at=now,
        signing_secret_version=1,
    )


def signing_keys_load(*, schema: str, now: datetime, ring: Keyring | None = None) -> SigningKeys:
    """The tenant's secrets, opened (UnsealError if no configured key opens them)."""
    ring = ring or keyring()
    fields = (
        "signing_secret",
        "signing_secret_previous",
        "signing_secret_previous_expires_at",
        "signing_secret_version",
    )
    row = Tenant.objects.filter(schema_name=schema).values(*fields).first()
    if row is not None and not row["signing_secret"]:
        signing_secret_ensure(schema=schema, now=now, ring=ring)
        row = Tenant.objects.filter(schema_name=schema).values(*fields).first()
    if row is None:
        raise LookupError(f"no tenant has the schema {schema!r}")
    previous = row["signing_secret_previous"]
    return SigningKeys(
        version=row["signing_secret_version"],
        current=ring.unseal(row["signing_secret"]),
        previous=ring.unseal(previous) if previous else None,
        previous_expires_at=row["signing_secret_previous_expires_at"],
    )


class SigningKeyCache:
    """Opened signing secrets per tenant schema, valid while the tenant's version is the one
    cached. Bounded (least recently used out first); safe across a worker's threads."""

    def __init__(self, max_tenants: int = 10_000) -> None:
        self._entries: OrderedDict[str, SigningKeys] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_tenants
        self.loads = 0  # how many times the database was asked (for tests and figures)

    def get(self, *, schema: str, version: int | None, now: datetime) -> SigningKeys:
        with self._lock:
            cached = self._entries.get(schema)
            if cached is not None and version is not None and cached.version == version:
                self._entries.move_to_end(schema)
                return cached
        keys = signing_keys_load(schema=schema, now=now)
        with self._lock:
            self.loads += 1
            self._entries[schema] = keys
            self._entries.move_to_end(schema)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return keys

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


SIGNING_KEYS = SigningKeyCache()


class UnopenableSigningSecret(Exception):
    """A tenant's stored signing secret that no configured key opens."""


def signing_secrets_reseal(*, ring: Keyring, batch_size: int = 500) -> tuple[int, int]:
    """Re-encrypt every tenant's signing secrets with the newest key, in batches of locked
    rows; returns (values re-encrypted, tenants already current). Idempotent."""
    resealed = current = 0
    last_id = 0
    while True:
        with transaction.atomic():
            rows = list(
                Tenant.objects.select_for_update()
                .filter(id__gt=last_id)
                .exclude(signing_secret="")
                .order_by("id")[:batch_size]
            )
            for tenant in rows:
                changed = _reseal_tenant(tenant, ring)
                resealed += changed
                if not changed:
                    current += 1
        if len(rows) < batch_size:
            return resealed, current
        last_id = rows[-1].id


def _reseal_tenant(tenant: Tenant, ring: Keyring) -> int:
    updates = {}
    for field in ("signing_secret", "signing_secret_previous"):
        token = getattr(tenant, field)
        if not token or ring.is_current(token):
            continue
        try:
            updates[field] = ring.reseal(token)
        except UnsealError:
            raise UnopenableSigningSecret(
                f"tenant {tenant.slug}: its {field.replace('_', ' ')} is sealed with a key that "
                "is not in TICKWORK_SECRET_KEYS (keep the old key in the list until "
                "rotate_secrets has run)"
            ) from None
    if updates:
        # The version stays: the secrets in clear are the same, workers' caches still hold.
        Tenant.objects.filter(pk=tenant.pk).update(**updates)
    return len(updates)
