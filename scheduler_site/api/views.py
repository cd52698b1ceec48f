"""The base of every API endpoint, the catch-all 404 and the schema and docs views."""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView
from rest_framework.exceptions import NotAuthenticated, NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.views import APIView

from core.clock import Clock, SystemClock

from .authentication import actor_of, leave_token_tenant, missing_credentials_detail, tenant_of
from .fields import BIGINT_MAX
from .parsers import check_declared_size
from .problems import TenantSuspendedError


class ApiView(APIView):
    """Every endpoint: the body cap before anything is read, and the schema reset after."""

    clock: Clock = SystemClock()
    # No OPTIONS: the schema at /api/v1/openapi.json is the description.
    http_method_names = ["get", "post", "patch", "delete", "head"]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        check_declared_size(request.META)
        super().initial(request, *args, **kwargs)
        tenant = getattr(request._request, "tenant", None)
        if getattr(tenant, "suspended_at", None) is not None:
            raise TenantSuspendedError(
                f"The tenant {tenant.slug!r} is suspended by the operators since "
                f"{tenant.suspended_at:%Y-%m-%d %H:%M} UTC; its API accepts no request "
                "until it is resumed."
            )

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            leave_token_tenant(request)

    def permission_denied(
        self, request: Request, message: str | None = None, code: str | None = None
    ) -> None:
        if request.authenticators and not request.successful_authenticator:
            raise NotAuthenticated(missing_credentials_detail(request))
        super().permission_denied(request, message, code)

    def services_kwargs(self, request: Request) -> dict[str, Any]:
        """What every service action takes: the tenant, who acts, and the clock."""
        return {"tenant": tenant_of(request), "actor": actor_of(request), "clock": self.clock}


@extend_schema(exclude=True)
class ApiNotFoundView(APIView):
    """Any other path under /api/: a problem+json 404 rather than an HTML page, saying what
    an id looks like when the path is an endpoint's with a malformed id."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        raise NotFound(not_found_detail(request.path))


API_ROOT = "/api/v1/"
_ID_SHAPES = (
    # (a path with an id in it, the object, what its id must look like, an example)
    (
        re.compile(r"^jobs/(?P<id>[^/]+)(/(pause|resume|run|backfill|graph))?$"),
        "job",
        f"a job id is a whole number from 1 to {BIGINT_MAX}",
        "jobs/42",
    ),
    (
        re.compile(r"^runs/(?P<id>[^/]+)(/(cancel|replay))?$"),
        "run",
        "a run id is a UUID",
        "runs/01a22689-11d9-754e-8aa1-48ddf05cae1b",
    ),
    (
        re.compile(r"^alerts/channels/(?P<id>[^/]+)$"),
        "alert channel",
        f"a channel id is a whole number from 1 to {BIGINT_MAX}",
        "alerts/channels/3",
    ),
    (
        re.compile(r"^dag-runs/(?P<id>[^/]+)$"),
        "DAG run",
        "a DAG run id is a UUID",
        "dag-runs/01a22689-11d9-754e-8aa1-48ddf05cae1b",
    ),
)


def not_found_detail(path: str) -> str:
    """The 404's detail for a path no endpoint matched (`path` as requested)."""
    if not path.startswith(API_ROOT):
        return f"No such API endpoint: the API is under {API_ROOT}; see {API_ROOT}docs."
    rest = path.removeprefix(API_ROOT)
    if rest.endswith("/") and rest.strip("/"):
        return (
            f"No such API endpoint: API paths have no trailing slash "
            f"({API_ROOT}{rest.rstrip('/')}); see {API_ROOT}docs."
        )
    for pattern, noun, shape, example in _ID_SHAPES:
        match = pattern.match(rest)
        if match:
            shown = match["id"] if len(match["id"]) <= 40 else match["id"][:40] + "..."
            return f"No such {noun}: {shape} (e.g. {API_ROOT}{example}), not {shown!r}."
    return f"No such API endpoint; see {API_ROOT}docs."


class SchemaView(SpectacularJSONAPIView):
    """The OpenAPI 3 schema, readable without a token."""

    authentication_classes: list = []
    permission_classes = [AllowAny]


class DocsView(SpectacularSwaggerView):
    """Swagger UI from drf-spectacular-sidecar's static files (no CDN)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    url_name = "api:openapi"
