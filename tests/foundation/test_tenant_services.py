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


def test_provisioning_issues_a_signing_secret_shown_once_and_an_operator_can_rotate_it(live):
    import json as _json
    from io import StringIO

    from django.core.management import call_command

    from tenants.models import Tenant as _Tenant
    from tenants.signing import signing_keys_load

    alpha = live["alpha"].tenant
    out = StringIO()
    call_command("rotate_signing_secret", "alpha", "--overlap-seconds", "60", "--json", stdout=out)
    info = _json.loads(out.getvalue())
    keys = signing_keys_load(schema=alpha.schema_name, now=alpha.created_at)
    assert info["signing_secret"] == keys.current and keys.previous is not None
    assert info["version"] == _Tenant.objects.get(pk=alpha.pk).signing_secret_version
    assert info["signing_secret"] not in _Tenant.objects.get(pk=alpha.pk).signing_secret
