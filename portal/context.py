"""Template context for every page: which portal section the page belongs to."""

from __future__ import annotations

from django.http import HttpRequest

SECTIONS = {"home": "home", "dlq": "dlq", "token": "tokens", "member": "members"}


def nav(request: HttpRequest) -> dict[str, str]:
    match = getattr(request, "resolver_match", None)
    name = (match.url_name or "") if match else ""
    if name.startswith(("job", "run", "schedule")):
        return {"nav": "jobs"}
    for prefix, section in SECTIONS.items():
        if name.startswith(prefix):
            return {"nav": section}
    return {"nav": ""}
