"""A suspended tenant's domain answers every page with a page saying so (403); its API
answers problem+json itself (scheduler_site/api/views.py), its health probes stay up."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_tenants.utils import get_public_schema_name

PASS_THROUGH = ("/api/", "/healthz", "/readyz", "/static/")


class SuspendedTenantMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        tenant = getattr(request, "tenant", None)
        if (
            tenant is not None
            and tenant.schema_name != get_public_schema_name()
            and tenant.suspended_at is not None
            and not request.path.startswith(PASS_THROUGH)
        ):
            return render(request, "portal/suspended.html", {"tenant": tenant}, status=403)
        return self.get_response(request)
