"""The base of every API endpoint, the catch-all 404 and the schema and docs views."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBase
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.views import APIView

from core.clock import Clock, SystemClock

from .authentication import actor_of, leave_token_tenant, tenant_of
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

    def services_kwargs(self, request: Request) -> dict[str, Any]:
        """What every service action takes: the tenant, who acts, and the clock."""
        return {"tenant": tenant_of(request), "actor": actor_of(request), "clock": self.clock}


@extend_schema(exclude=True)
class ApiNotFoundView(APIView):
    """Any other path under /api/v1/: a problem+json 404 rather than an HTML page."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        raise NotFound("No such API endpoint; see /api/v1/docs.")


class SchemaView(SpectacularJSONAPIView):
    """The OpenAPI 3 schema, readable without a token."""

    authentication_classes: list = []
    permission_classes = [AllowAny]


class DocsView(SpectacularSwaggerView):
    """Swagger UI from drf-spectacular-sidecar's static files (no CDN)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    url_name = "api:openapi"
