"""API tokens and members of the tenant; the notice on a tenant domain's /admin/."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from jobs.services import audit_record
from tenants.members import MemberError, is_tenant_admin, member_invite, member_list, member_remove
from tenants.tokens import TokenNotFound, token_issue, token_list, token_revoke_for_tenant

from .common import actor_of, admin_only, portal_view


@portal_view
def tokens(request: HttpRequest) -> HttpResponse:
    """List (by prefix, with last use) and create; a new token's secret is shown once, on
    the page that answers the POST, and never stored."""
    issued = None
    if request.method == "POST":
        if not is_tenant_admin(request.user):
            return render(request, "portal/forbidden.html", status=403)
        name = request.POST.get("name", "").strip()[:100] or "portal"
        issued = token_issue(tenant=request.tenant, name=name)
        audit_record(
            actor=actor_of(request), action="token_issue", changes={"prefix": issued.token.prefix}
        )
    return render(
        request,
        "portal/tokens.html",
        {
            "tokens": token_list(tenant=request.tenant),
            "issued": issued,
            "can_manage": is_tenant_admin(request.user),
        },
    )


@admin_only
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    try:
        token = token_revoke_for_tenant(tenant=request.tenant, token_id=token_id)
    except TokenNotFound:
        raise Http404("no such token") from None
    audit_record(actor=actor_of(request), action="token_revoke", changes={"prefix": token.prefix})
    messages.success(request, f"Token tw_{token.prefix}… revoked; it no longer works.")
    return redirect("dashboard:tokens")


@portal_view
def members(request: HttpRequest) -> HttpResponse:
    invitation, error = None, None
    if request.method == "POST":
        if not is_tenant_admin(request.user):
            return render(request, "portal/forbidden.html", status=403)
        try:
            invitation = member_invite(
                username=request.POST.get("username", ""),
                email=request.POST.get("email", "").strip(),
                admin=request.POST.get("admin") == "on",
            )
        except MemberError as exc:
            error = exc
        else:
            audit_record(
                actor=actor_of(request),
                action="member_invite",
                changes={"username": invitation.user.username, "admin": invitation.user.is_staff},
            )
    return render(
        request,
        "portal/members.html",
        {
            "members": member_list(),
            "invitation": invitation,
            "error": error,
            "typed": request.POST if error else {},
            "can_manage": is_tenant_admin(request.user),
            "login_url": request.build_absolute_uri("/login/"),
        },
        status=400 if error else 200,
    )


@admin_only
@require_POST
def member_remove_view(request: HttpRequest, user_id: int) -> HttpResponse:
    try:
        name = member_remove(user_id=user_id, by=request.user)
    except MemberError as exc:
        if str(exc) == "no such member":
            raise Http404("no such member") from None
        messages.error(request, str(exc).capitalize() + ".")
        return redirect("dashboard:members")
    audit_record(actor=actor_of(request), action="member_remove", changes={"username": name})
    messages.success(request, f"{name} removed; their sessions have ended.")
    return redirect("dashboard:members")


def admin_elsewhere(request: HttpRequest) -> HttpResponse:
    """A tenant domain's /admin/: operators' admin lives on the public host."""
    return render(
        request,
        "portal/admin_elsewhere.html",
        {"public_admin": f"{request.scheme}://{public_host_of(request)}/admin/"},
        status=404,
    )


def public_host_of(request: HttpRequest) -> str:
    """`demo.localhost:8000` -> `localhost:8000`: a tenant domain `<slug>.<base>` without
    its first label (the public host is any host that is no tenant's domain)."""
    host = request.get_host()
    _first, dot, rest = host.partition(".")
    return rest if dot and rest else host
