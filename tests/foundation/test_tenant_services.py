"""Members (invite, remove, the last admin stays) and a tenant's own API tokens."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django_tenants.utils import schema_context

from tenants.members import MemberError, member_invite, member_remove
from tenants.tokens import TokenNotFound, token_authenticate, token_issue, token_revoke_for_tenant


def test_invite_and_remove_members(live):
    alpha = live["alpha"]
    with schema_context(alpha.schema):
        admin = get_user_model().objects.get(username=alpha.admin_user)
        invited = member_invite(username="carol", email="carol@example.com")
        try:
            assert invited.user.check_password(invited.password)
            assert not invited.user.is_staff
            with pytest.raises(MemberError, match="already a member"):
                member_invite(username="carol")
            with pytest.raises(MemberError, match="user name"):
                member_invite(username="has space")
            with pytest.raises(MemberError, match="yourself"):
                member_remove(user_id=admin.pk, by=admin)
            assert member_remove(user_id=invited.user.pk, by=admin) == "carol"
            assert not get_user_model().objects.filter(username="carol").exists()
        finally:
            get_user_model().objects.filter(username="carol").delete()


def test_the_last_admin_cannot_be_removed(live):
    alpha = live["alpha"]
    with schema_context(alpha.schema):
        second = member_invite(username="dave", admin=True).user
        try:
            admin = get_user_model().objects.get(username=alpha.admin_user)
            get_user_model().objects.filter(pk=admin.pk).update(is_staff=False, is_superuser=False)
            with pytest.raises(MemberError, match="last admin"):
                member_remove(user_id=second.pk, by=admin)
        finally:
            get_user_model().objects.filter(pk=admin.pk).update(is_staff=True, is_superuser=True)
            get_user_model().objects.filter(username="dave").delete()


def test_a_tenant_revokes_only_its_own_tokens(live):
    alpha, beta = live["alpha"], live["beta"]
    issued = token_issue(tenant=alpha.tenant, name="ci")
    assert token_authenticate(issued.plain) is not None
    with pytest.raises(TokenNotFound):
        token_revoke_for_tenant(tenant=beta.tenant, token_id=issued.token.pk)
    revoked = token_revoke_for_tenant(tenant=alpha.tenant, token_id=issued.token.pk)
    assert revoked.revoked_at is not None
    assert token_authenticate(issued.plain) is None
