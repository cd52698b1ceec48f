"""GET /api/v1/guide: the API reference (docs/api.md) as a web page, and the schedule
reference (docs/schedules.md) beside it, so that the Swagger UI's header links to a page a
browser opens rather than to a file of the repository. Rendered once per process with
markdown-it-py; raw HTML in the documents is escaped."""

from __future__ import annotations

import functools
from pathlib import Path

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from markdown_it import MarkdownIt

DOCS = Path(settings.BASE_DIR) / "docs"
GUIDES = {
    "api": ("api.md", "The Tickwork API"),
    "schedules": ("schedules.md", "Schedules"),
    "alerts": ("alerts.md", "Alerts"),
}
URL = "/api/v1/guide"


def _href(target: str) -> str | None:
    """A link of a document: to another guide here, kept as written when absolute, or None
    (shown as plain text) for the repository's other files."""
    if target.startswith(("http://", "https://", "/", "#")):
        return target
    path, _, anchor = target.partition("#")
    for name, (file, _title) in GUIDES.items():
        if path == file:
            return (URL if name == "api" else f"{URL}/{name}") + (f"#{anchor}" if anchor else "")
    return None


def _rewrite_links(tokens: list) -> None:
    """Links to the other guide point here; links to the repository's other files become
    their text (their opening and closing tags go)."""
    for token in tokens:
        if not token.children:
            continue
        kept, open_links = [], []
        for child in token.children:
            if child.type == "link_open":
                href = _href(child.attrGet("href") or "")
                open_links.append(href is not None)
                if href is None:
                    continue
                child.attrSet("href", href)
            elif child.type == "link_close" and not open_links.pop():
                continue
            kept.append(child)
        token.children = kept


@functools.cache
def rendered(name: str) -> str:
    file, _title = GUIDES[name]
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse((DOCS / file).read_text(encoding="utf-8"))
    _rewrite_links(tokens)
    return md.renderer.render(tokens, md.options, {})


def guide(request: HttpRequest, name: str = "api") -> HttpResponse:
    if name not in GUIDES:
        raise Http404("no such guide")
    context = {"title": GUIDES[name][1], "body": rendered(name), "guides": GUIDES}
    return render(request, "api/guide.html", context)
