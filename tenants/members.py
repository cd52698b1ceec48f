"""A tenant's members: the users of its schema who log in to its portal.

Run inside the tenant's schema (a request on its domain, or `schema_context`). A tenant
admin (`is_staff`) invites and removes members; an invitation creates the account with a
one-time password shown once to the admin, who hands it over (there is no mail service).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

USERNAME_RE = re.compile(r"^[\w.@+-]{1,150}$")


class MemberError(Exception):
    """An invitation or removal that cannot be carried out; the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Invitation:
    user: object
    password: str  # shown once


def member_list():
    return get_user_model().objects.filter(is_active=True).order_by("username")


def is_tenant_admin(user) -> bool:
    return bool(getattr(user, "is_authenticated", False) and (user.is_staff or user.is_superuser))


def member_invite(*, username: str, email: str = "", admin: bool = False) -> Invitation:
    username = (username or "").strip()
    if not USERNAME_RE.match(username):
        raise MemberError(
            "username", "use 1-150 letters, digits and @ . + - _ (no spaces) for the user name"
        )
    users = get_user_model().objects
    if users.filter(username=username).exists():
        raise MemberError("username", f"{username!r} is already a member")
    if email and ("@" not in email or len(email) > 254):
        raise MemberError("email", "enter a valid e-mail address, or leave it empty")
    password = secrets.token_urlsafe(12)
    user = users.create_user(username=username, email=email, password=password, is_staff=admin)
    return Invitation(user=user, password=password)


def member_remove(*, user_id: int, by) -> str:
    """Remove a member (the account is deleted, so its sessions end). An admin cannot remove
    themselves, and the last admin stays. Returns the removed user name."""
    users = get_user_model().objects
    with transaction.atomic():
        user = users.select_for_update().filter(pk=user_id, is_active=True).first()
        if user is None:
            raise MemberError("user", "no such member")
        if user.pk == by.pk:
            raise MemberError("user", "you cannot remove yourself")
        if is_tenant_admin(user):
            admins = users.filter(is_active=True).filter(is_staff=True) | users.filter(
                is_active=True, is_superuser=True
            )
            if admins.distinct().count() <= 1:
                raise MemberError("user", "the tenant's last admin cannot be removed")
        name = user.username
        user.delete()
    return name
