from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django_tenants.utils import schema_context

from tenants.models import ApiToken, Domain, Tenant
from tenants.tokens import token_authenticate, token_digest, token_issue

pytestmark = pytest.mark.django_db


def _schemas() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT schema_name FROM information_schema.schemata")
        return {row[0] for row in cursor.fetchall()}


def test_each_tenant_gets_its_own_schema_with_its_own_users(alpha, beta):
    assert {"t_alpha", "t_beta"} <= _schemas()
    with schema_context(alpha.schema):
        alpha_users = set(get_user_model().objects.values_list("username", flat=True))
    with schema_context(beta.schema):
        beta_users = set(get_user_model().objects.values_list("username", flat=True))
    assert alpha_users == {"alpha-admin"}
    assert beta_users == {"beta-admin"}


def test_user_of_one_tenant_cannot_log_into_another_tenants_dashboard(alpha, beta):
    client = Client(HTTP_HOST=beta.domain)
    response = client.post(
        "/login/", {"username": alpha.admin_user, "password": alpha.admin_password}
    )
    assert response.status_code == 200  # the form again, with an error
    assert "didn't match" in response.content.decode()
    assert client.get("/").status_code == 302


def test_session_of_one_tenant_does_not_open_another_tenants_dashboard(alpha, beta):
    client = Client(HTTP_HOST=alpha.domain)
    response = client.post(
        "/login/", {"username": alpha.admin_user, "password": alpha.admin_password}
    )
    assert response.status_code == 302
    assert client.get("/").status_code == 200
    # The same cookie jar sent to beta's host: beta's schema knows neither the session nor the user.
    response = client.get("/", HTTP_HOST=beta.domain)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_tokens_are_stored_as_digests_only(alpha):
    issued = token_issue(tenant=alpha.tenant, name="t")
    row = ApiToken.objects.filter(pk=issued.token.pk).values().get()
    assert issued.plain not in {str(value) for value in row.values()}
    assert row["digest"] == token_digest(issued.plain)
    assert token_authenticate(issued.plain).tenant_id == alpha.tenant.id
    assert token_authenticate(issued.plain + "x") is None


def test_provisioning_an_existing_slug_fails_and_changes_nothing(alpha):
    before = (Tenant.objects.count(), Domain.objects.count(), ApiToken.objects.count())
    with pytest.raises(CommandError, match="tenant 'alpha' already exists"):
        call_command("provision_tenant", "alpha", "--domain", "other.localhost")
    assert (Tenant.objects.count(), Domain.objects.count(), ApiToken.objects.count()) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["Bad_Slug"], "invalid slug"),
        (["gamma", "--domain", "alpha.localhost"], "already belongs"),
        (["gamma", "--domain", "localhost"], "is the public host"),
        (["gamma", "--domain", "127.0.0.1"], "is the public host"),
        (["gamma", "--weight", "0"], "at least 1"),
    ],
)
def test_provisioning_rejects_bad_input_with_one_line(alpha, args, message):
    with pytest.raises(CommandError, match=message) as info:
        call_command("provision_tenant", *args)
    assert "\n" not in str(info.value)
    assert not Tenant.objects.filter(slug="gamma").exists()


def test_issue_token_for_unknown_tenant_says_what_to_do():
    with pytest.raises(CommandError, match="provision_tenant"):
        call_command("issue_token", "nobody")


def test_provisioning_prints_the_signing_secret_the_workers_sign_with(alpha):
    import json
    from io import StringIO

    from django.utils import timezone

    from tenants.signing import signing_keys_load

    connection.set_schema_to_public()  # a request of an earlier test left its tenant's
    out = StringIO()
    call_command("provision_tenant", "gamma", "--json", stdout=out)
    secret = json.loads(out.getvalue())["signing_secret"]
    assert secret.startswith("whsec_")
    assert signing_keys_load(schema="t_gamma", now=timezone.now()).current == secret
    assert secret not in Tenant.objects.get(slug="gamma").signing_secret
