"""What every portal view shares: login, who acts, the clock, cursors, redirects back."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from datetime import datetime
from functools import wraps
from typing import Any
from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme

from core.clock import Clock, SystemClock
from jobs import selectors as job_selectors
from jobs.models import Job
from jobs.services import Actor, JobNotFound
from runs.selectors import with_last_run
from tenants.members import is_tenant_admin

CLOCK: Clock = SystemClock()


def job_or_404(job_id: int) -> Job:
    """A live job of this tenant with its upstreams and last run, or a 404 (another
    tenant's id does not exist in this schema)."""
    try:
        return job_selectors.job_get(
            job_id=job_id, queryset=with_last_run(Job.objects.all(), CLOCK.now())
        )
    except JobNotFound:
        raise Http404("no such job") from None


def actor_of(request: HttpRequest) -> Actor:
    return Actor(f"user:{request.user.get_username()}")


def services_kwargs(request: HttpRequest) -> dict[str, Any]:
    """What every service action takes: the tenant, who acts, and the clock."""
    return {"tenant": request.tenant, "actor": actor_of(request), "clock": CLOCK}


def portal_view(view: Callable) -> Callable:
    """A tenant page: login required (the session lives in the tenant's schema, so another
    tenant's session is no login here)."""
    return login_required(view)


def admin_only(view: Callable) -> Callable:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_tenant_admin(request.user):
            raise PermissionDenied("only a tenant admin can do this")
        return view(request, *args, **kwargs)

    return login_required(wrapped)


def back(request: HttpRequest, default: str) -> HttpResponse:
    """Redirect to the form's `next` (a path on this host only), else `default`."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}):
        return redirect(target)
    return redirect(default)


def encode_cursor(values: list[Any]) -> str:
    plain = [v.isoformat() if isinstance(v, datetime) else v for v in values]
    plain = [str(v) if isinstance(v, UUID) else v for v in plain]
    raw = json.dumps(plain, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> list[Any] | None:
    """The values of a cursor this portal issued, or None for anything else."""
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error):
        return None
    return values if isinstance(values, list) else None


def parse_instant(value: str) -> datetime | None:
    """A `datetime-local` input (UTC) or an ISO instant; None if empty or invalid."""
    from datetime import UTC

    from django.utils.dateparse import parse_datetime

    if not value:
        return None
    try:
        parsed = parse_datetime(value.strip())
    except ValueError:
        return None
    if parsed is None:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed
