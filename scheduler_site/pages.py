"""The public host's own pages: its root, and a helpful 404 for any unknown path (never
Django's debug page), with links to where people are usually going."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

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
