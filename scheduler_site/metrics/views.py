"""GET /metrics on the public host (scheduler_site/urls_public.py; a tenant's domain has no
such path), behind `METRICS_TOKEN` when it is set."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from .exposition import authorised, render, web_registry

# The classic text format, as generate_latest writes it (and Prometheus asks first).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_REGISTRY = None


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    global _REGISTRY
    if not authorised(request.headers.get("Authorization")):
        response = HttpResponse(
            "a valid metrics token is required\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if _REGISTRY is None:
        _REGISTRY = web_registry()
    return HttpResponse(render(_REGISTRY), content_type=CONTENT_TYPE)
