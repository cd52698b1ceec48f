"""Template context for every page: which portal section the page belongs to."""

from __future__ import annotations

from django.http import HttpRequest

SECTIONS = {
    "home": "home",
    "dlq": "dlq",
    "alert": "alerts",
    "token": "tokens",
    "member": "members",
}


def nav(request: HttpRequest) -> dict:
    """`in_portal`: a tenant's domain (the portal's links exist); `nav`: its section."""
    from django_tenants.utils import get_public_schema_name

    tenant = getattr(request, "tenant", None)
    in_portal = tenant is not None and tenant.schema_name != get_public_schema_name()
    match = getattr(request, "resolver_match", None)
    name = (match.url_name or "") if match else ""
    section = ""
    if name.startswith(("job", "run", "schedule")):
        section = "jobs"
    for prefix, value in SECTIONS.items():
        if name.startswith(prefix):
            section = value
    return {"nav": section, "in_portal": in_portal}
