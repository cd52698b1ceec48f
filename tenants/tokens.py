"""API tokens: random secrets shown once, stored as SHA-256 digests."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from django.utils import timezone

from core.sql import without_waiting_for_disk

from .models import ApiToken, Tenant

TOKEN_PREFIX = "tw_"


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    plain: str


def token_digest(plain: str) -> str:
    return hashlib.sha256(plain.encode()).hexdigest()


def token_issue(*, tenant: Tenant, name: str = "default") -> IssuedToken:
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        tenant=tenant,
        name=name,
        prefix=plain[len(TOKEN_PREFIX) : len(TOKEN_PREFIX) + 8],
        digest=token_digest(plain),
    )
    return IssuedToken(token=token, plain=plain)


def token_authenticate(plain: str) -> ApiToken | None:
    """The live token for `plain`, or None. Compares digests, never plain secrets."""
    if not plain.startswith(TOKEN_PREFIX):
        return None
    token = (
        ApiToken.objects.select_related("tenant")
        .filter(digest=token_digest(plain), revoked_at__isnull=True)
        .first()
    )
    if token is not None and (
        token.last_used_at is None or (timezone.now() - token.last_used_at).total_seconds() > 60
    ):
        with without_waiting_for_disk():  # shown to people; a crash may lose a minute of it
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token


def token_revoke(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


class TokenNotFound(Exception):
    pass


def token_list(*, tenant: Tenant):
    """The tenant's tokens, newest first, revoked ones included (they show when)."""
    return ApiToken.objects.filter(tenant=tenant).order_by("-created_at", "-id")


def token_revoke_for_tenant(*, tenant: Tenant, token_id: int) -> ApiToken:
    """Revoke one of the tenant's own tokens (another tenant's id is not found). Revoking a
    revoked token changes nothing. The token stops working at once: authentication reads
    `revoked_at` on every request."""
    token = ApiToken.objects.filter(tenant=tenant, pk=token_id).first()
    if token is None:
        raise TokenNotFound(token_id)
    token_revoke(token=token)
    token.refresh_from_db(fields=["revoked_at"])
    return token
