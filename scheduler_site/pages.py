"""The public host's own pages: its root, and a helpful 404 for any unknown path (never
Django's debug page), with links to where people are usually going."""

from __future__ import annotations

from collections.abc import Callable

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import get_resolver

from tenants.models import Domain


def _context(request: HttpRequest) -> dict:
    host = request.get_host()
    port = host.rpartition(":")[2] if ":" in host and not host.endswith("]") else ""
    suffix = f":{port}" if port else ""
    domains = list(Domain.objects.filter(is_primary=True).order_by("domain")[:5])
    return {
        "portals": [f"{request.scheme}://{d.domain}{suffix}/login/" for d in domains],
        "more_portals": Domain.objects.filter(is_primary=True).count() > len(domains),
        "path": request.path,
    }


def public_home(request: HttpRequest) -> HttpResponse:
    return render(request, "public/home.html", _context(request))


def public_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "public/not_found.html", _context(request), status=404)


def tenant_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "portal/not_found.html", {"path": request.path}, status=404)


class HelpfulNotFoundMiddleware:
    """A view that raises Http404 (an unknown job in the portal, admin's catch-all) answers
    the host's own 404 page, also with DEBUG on, where Django would show its debug page:
    `make run` runs with DEBUG on, and that is where new users first look around. (The
    API's views turn Http404 into problem+json themselves, before this sees it.)"""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, Http404):
            return None
        handler = get_resolver(getattr(request, "urlconf", None)).resolve_error_handler(404)
        return handler(request, exception)
