"""Who calls the API, and in which tenant's schema the request runs.

* `Authorization: Bearer <token>`: the token names its tenant. On the public host (no tenant
  from the domain) the request switches to that tenant's schema; the API view switches back
  to `public` when the request ends. On a tenant's own domain a token of another tenant is
  refused (401).
* Session cookies (the dashboard): tenant domains only, CSRF enforced (DRF's rules).
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django_tenants.utils import get_public_schema_name
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    get_authorization_header,
)
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from jobs.services import Actor
from tenants.models import ApiToken, Tenant
from tenants.tokens import token_authenticate

SWITCHED_FLAG = "_api_switched_schema"


class TokenUser:
    """The principal behind a bearer token: a tenant's API client, not a person."""

    is_authenticated = True
    is_anonymous = False
    is_active = True

    def __init__(self, token: ApiToken) -> None:
        self.token = token

    def get_username(self) -> str:
        return f"token:{self.token.prefix}"

    def __str__(self) -> str:
        return self.get_username()


def domain_tenant(request: Request) -> Tenant | None:
    """The tenant the request's host belongs to; None on the public host."""
    tenant = getattr(request._request, "tenant", None)
    if tenant is None or tenant.schema_name == get_public_schema_name():
        return None
    return tenant


def _bearer_secret(request: Request) -> str | None:
    parts = get_authorization_header(request).split()
    if not parts or parts[0].lower() != b"bearer":
        return None
    if len(parts) != 2:
        raise AuthenticationFailed("Malformed Authorization header: use `Bearer <token>`.")
    try:
        return parts[1].decode("ascii")
    except UnicodeDecodeError:
        raise AuthenticationFailed("Invalid token.") from None


def missing_credentials_detail(request: Request) -> str:
    """Why a request without usable credentials is a 401, in the words a client needs: an
    `Authorization` header with another scheme (`Token ...`, `Basic ...`) or a bare token
    is read by no authenticator, and "no credentials" would leave its sender guessing."""
    parts = get_authorization_header(request).split()
    if not parts:
        return "No credentials: send `Authorization: Bearer <token>`."
    if len(parts) == 1:
        return (
            "The Authorization header holds no scheme: it must be `Bearer`, as in "
            "`Authorization: Bearer <token>`."
        )
    scheme = parts[0].decode("ascii", "replace")[:20]
    return (
        f"The Authorization scheme must be `Bearer`, not `{scheme}`: send "
        "`Authorization: Bearer <token>`."
    )


def _enter_token_tenant(request: Request, token: ApiToken) -> None:
    from_domain = domain_tenant(request)
    if from_domain is not None:
        if from_domain.pk != token.tenant_id:
            raise AuthenticationFailed("This token belongs to another tenant.")
        return
    connection.set_tenant(token.tenant)
    request._request.tenant = token.tenant
    setattr(request._request, SWITCHED_FLAG, True)


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[TokenUser, ApiToken] | None:
        secret = _bearer_secret(request)
        if secret is None:
            return None
        token = token_authenticate(secret)
        if token is None:
            raise AuthenticationFailed("Invalid or revoked token.")
        _enter_token_tenant(request, token)
        return TokenUser(token), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class TenantSessionAuthentication(SessionAuthentication):
    """The dashboard's session, on a tenant's domain only (the public host's sessions are
    operators' admin sessions, which belong to no tenant)."""

    def authenticate(self, request: Request) -> tuple[Any, None] | None:
        if domain_tenant(request) is None:
            return None
        return super().authenticate(request)


def leave_token_tenant(django_request: Any) -> None:
    """Back to `public` if authentication switched schemas: a reused connection must never
    carry a tenant into the next request or into code that runs outside one."""
    if getattr(django_request, SWITCHED_FLAG, False):
        connection.set_schema_to_public()
        setattr(django_request, SWITCHED_FLAG, False)


def actor_of(request: Request) -> Actor:
    if isinstance(request.auth, ApiToken):
        return Actor(f"token:{request.auth.prefix}")
    return Actor(f"user:{request.user.get_username()}")


def tenant_of(request: Request) -> Tenant:
    return request._request.tenant


class BearerScheme(OpenApiAuthenticationExtension):
    target_class = "scheduler_site.api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token (`tw_...`) from `provision_tenant` or `issue_token`; "
            "it selects the tenant.",
        }


class TenantSessionScheme(OpenApiAuthenticationExtension):
    target_class = "scheduler_site.api.authentication.TenantSessionAuthentication"
    name = "cookieAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        from django.conf import settings

        return {
            "type": "apiKey",
            "in": "cookie",
            "name": settings.SESSION_COOKIE_NAME,
            "description": "The dashboard's session, on the tenant's own domain, with CSRF.",
        }
