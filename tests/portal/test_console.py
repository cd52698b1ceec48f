"""The operator console in Django admin (public host): provisioning, suspension, fleet
health, the drill-down and its audited bulk actions."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django_tenants.utils import schema_context

from core.clock import SystemClock
from jobs.models import AuditEvent, Job
from tenants.models import Domain, Tenant

from ..integration.helpers import make_job

CLOCK = SystemClock()


@pytest.fixture
def operator(live):
    connection.set_schema_to_public()
    users = get_user_model().objects
    users.filter(username="ops").delete()
    users.create_superuser(username="ops", password="ops-password", email="")
    client = Client(HTTP_HOST="localhost")
    assert client.login(username="ops", password="ops-password")
    yield client
    connection.set_schema_to_public()
    users.filter(username="ops").delete()


def test_console_pages_need_an_operator(live):
    for url in (
        "/admin/fleet/",
        "/admin/console/alpha/jobs/",
        "/admin/console/alpha/runs/",
        "/admin/tenants/tenant/",
    ):
        response = Client(HTTP_HOST="localhost").get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url


def test_the_add_tenant_form_starts_at_the_configured_quota_and_weight(operator, settings):
    """Found by an audit: the form showed the model's defaults (100 and 1), so an operator
    who saved it as shown overrode SCHEDULER_TENANT_DEFAULT_MAX_CONCURRENCY / _WEIGHT."""
    import re

    settings.SCHEDULER_TENANT_DEFAULT_MAX_CONCURRENCY = 7
    settings.SCHEDULER_TENANT_DEFAULT_WEIGHT = 3
    page = operator.get("/admin/tenants/tenant/add/").content.decode()

    def value(name: str) -> str:
        tag = re.search(rf'<input[^>]*name="{name}"[^>]*>', page).group(0)
        return re.search(r'value="([^"]*)"', tag).group(1)

    assert (value("max_concurrency"), value("weight")) == ("7", "3")


def test_create_a_tenant_provisions_it(operator):
    page = operator.get("/admin/tenants/tenant/add/")
    assert page.status_code == 200 and b"admin_password" in page.content
    response = operator.post(
        "/admin/tenants/tenant/add/",
        {
            "slug": "gamma",
            "name": "Gamma Inc",
            "domain": "",
            "admin_user": "gina",
            "admin_password": "gina-password",
            "weight": "2",
            "max_concurrency": "7",
        },
        follow=True,
    )
    try:
        assert response.status_code == 200
        assert b"provisioned" in response.content and b"tw_" in response.content
        tenant = Tenant.objects.get(slug="gamma")
        assert (tenant.weight, tenant.max_concurrency, tenant.schema_name) == (2, 7, "t_gamma")
        assert Domain.objects.get(tenant=tenant).domain == "gamma.localhost"
        with schema_context("t_gamma"):
            assert get_user_model().objects.get(username="gina").check_password("gina-password")
            assert AuditEvent.objects.filter(action="tenant_create", actor="operator:ops").exists()
        portal = Client(HTTP_HOST="gamma.localhost")
        assert (
            portal.post("/login/", {"username": "gina", "password": "gina-password"}).status_code
            == 302
        )
        duplicate = operator.post(
            "/admin/tenants/tenant/add/",
            {"slug": "gamma", "name": "", "admin_user": "x", "weight": "1", "max_concurrency": "1"},
        )
        assert duplicate.status_code == 200 and b"already exists" in duplicate.content
        edited = operator.post(
            f"/admin/tenants/tenant/{tenant.pk}/change/",
            {
                "name": "Gamma",
                "weight": "3",
                "max_concurrency": "9",
                "domains-TOTAL_FORMS": "1",
                "domains-INITIAL_FORMS": "1",
                "domains-0-id": Domain.objects.get(tenant=tenant).pk,
                "domains-0-tenant": tenant.pk,
                "domains-0-domain": "gamma.localhost",
                "domains-0-is_primary": "on",
            },
        )
        assert edited.status_code == 302, edited.content[:2000]
        tenant.refresh_from_db()
        assert (tenant.weight, tenant.max_concurrency) == (3, 9)
        with schema_context("t_gamma"):
            event = AuditEvent.objects.get(action="tenant_update")
            assert event.changes["diff"]["weight"] == [2, 3]
    finally:
        connection.set_schema_to_public()
        for tenant in Tenant.objects.filter(slug="gamma"):
            tenant.delete(force_drop=True)


def test_suspend_and_resume_from_the_changelist(operator, live):
    alpha = live["alpha"]
    response = operator.post(
        "/admin/tenants/tenant/",
        {"action": "suspend_tenants", "_selected_action": [alpha.tenant.pk]},
        follow=True,
    )
    try:
        assert b"1 tenant(s) suspended." in response.content
        alpha.tenant.refresh_from_db()
        assert alpha.tenant.suspended_at is not None
        assert "operator:ops" in alpha.tenant.suspended_reason
        fleet = operator.get("/admin/fleet/").content.decode()
        assert "Suspended tenants" in fleet and "alpha" in fleet
        with schema_context(alpha.schema):
            assert AuditEvent.objects.filter(action="tenant_suspend", actor="operator:ops").exists()
    finally:
        operator.post(
            "/admin/tenants/tenant/",
            {"action": "resume_tenants", "_selected_action": [alpha.tenant.pk]},
        )
    alpha.tenant.refresh_from_db()
    assert alpha.tenant.suspended_at is None


def test_fleet_health_warns_without_a_leader(operator, live):
    page = operator.get("/admin/fleet/").content.decode()
    assert "No scheduler holds the lease" in page
    assert "runs.high.0" in page and "Dead-letter queue per tenant" in page


def test_fleet_health_shows_each_partitions_leader_epoch_and_renewal(
    operator, live, settings, redis_client
):
    from core.keys import leader_info_key

    settings.SCHEDULER_PARTITIONS = 2
    settings.SCHEDULER_LEASE_SECONDS = 2.0
    redis_client.set(leader_info_key(1), "host-b:4242", px=1500)  # renewed 0.5 s ago
    page = operator.get("/admin/fleet/").content.decode()
    assert "Partitions led</th><td>1 of 2" in page
    assert "<tr><td>1</td><td>host-b:4242</td>" in page
    assert "<tr><td>0</td><td><strong>none</strong></td>" in page
    row = page.split("<tr><td>1</td>", 1)[1].split("</tr>", 1)[0]
    assert " s ago" in row and "none within the lease" not in row
    assert "No scheduler holds the lease of partition(s) 0" in page


def test_fleet_health_shows_each_tenants_runs_in_flight_against_its_quota(operator, live):
    from tenants.models import Tenant

    Tenant.objects.filter(slug="alpha").update(max_concurrency=3)
    try:
        page = operator.get("/admin/fleet/").content.decode()
    finally:
        Tenant.objects.filter(slug="alpha").update(max_concurrency=100)
    assert "Admission per tenant" in page
    assert "<td>alpha</td><td>0 / 3</td>" in page


def test_drill_down_and_audited_bulk_pause(operator, live):
    alpha, beta = live["alpha"], live["beta"]
    job = make_job(alpha.tenant, CLOCK, name="alpha-nightly", schedule={"cron": "0 3 * * *"})
    make_job(beta.tenant, CLOCK, name="beta-only", schedule=None)
    page = operator.get("/admin/console/alpha/jobs/?q=night").content.decode()
    assert "alpha-nightly" in page and "beta-only" not in page
    assert operator.get("/admin/console/nope/jobs/").status_code == 404
    done = operator.post(
        "/admin/console/alpha/jobs/",
        {"action": "pause", "job": [job.id], "reason": "incident 7"},
        follow=True,
    )
    assert b"1 job(s) of alpha paused" in done.content
    assert connection.schema_name == "public"
    with schema_context(alpha.schema):
        assert Job.objects.get(id=job.id).paused_reason == "incident 7"
        assert AuditEvent.objects.filter(
            job_id=job.id, action="pause", actor="operator:ops"
        ).exists()
    runs = operator.get("/admin/console/alpha/runs/?status=dead")
    assert runs.status_code == 200


def test_admin_forms_enforce_csrf(live):
    connection.set_schema_to_public()
    users = get_user_model().objects
    users.filter(username="ops2").delete()
    users.create_superuser(username="ops2", password="pw-ops2", email="")
    try:
        client = Client(HTTP_HOST="localhost", enforce_csrf_checks=True)
        assert client.login(username="ops2", password="pw-ops2")
        assert (
            client.post("/admin/console/alpha/jobs/", {"action": "pause", "job": [1]}).status_code
            == 403
        )
        assert (
            client.post(
                "/admin/tenants/tenant/", {"action": "suspend_tenants", "_selected_action": [1]}
            ).status_code
            == 403
        )
    finally:
        connection.set_schema_to_public()
        users.filter(username="ops2").delete()


def _change(operator, tenant: Tenant, **fields: str):
    domain = Domain.objects.get(tenant=tenant)
    return operator.post(
        f"/admin/tenants/tenant/{tenant.pk}/change/",
        {
            "name": tenant.name,
            "weight": str(tenant.weight),
            "max_concurrency": str(tenant.max_concurrency),
            "domains-TOTAL_FORMS": "1",
            "domains-INITIAL_FORMS": "1",
            "domains-0-id": domain.pk,
            "domains-0-tenant": tenant.pk,
            "domains-0-domain": domain.domain,
            "domains-0-is_primary": "on",
            **fields,
        },
    )


def test_an_operator_edits_a_tenants_run_retention_within_its_bounds(operator, live):
    alpha = live["alpha"].tenant
    try:
        assert (
            b"Days ended runs are kept"
            in operator.get(f"/admin/tenants/tenant/{alpha.pk}/change/").content
        )
        refused = _change(operator, alpha, run_retention_days="5000")
        assert refused.status_code == 200
        assert b"less than or equal to 3650" in refused.content
        assert _change(operator, alpha, run_retention_days="0").status_code == 200
        alpha.refresh_from_db()
        assert alpha.run_retention_days is None
        assert _change(operator, alpha, run_retention_days="45").status_code == 302
        alpha.refresh_from_db()
        assert alpha.run_retention_days == 45
        assert "45 days" in operator.get("/admin/tenants/tenant/").content.decode()
        with schema_context(alpha.schema_name):
            event = AuditEvent.objects.filter(action="tenant_update").latest("id")
            assert event.changes["diff"]["run_retention_days"] == [None, 45]
        assert _change(operator, alpha, run_retention_days="").status_code == 302
        alpha.refresh_from_db()
        assert alpha.run_retention_days is None  # empty: the default again
    finally:
        Tenant.objects.filter(id=alpha.id).update(run_retention_days=None)
