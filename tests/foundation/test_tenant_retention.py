"""A tenant's run retention: set by an operator (`provision_tenant --update --retention-days`,
admin), bounded, shown to the tenant (GET /usage, the portal's overview)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from tenants.models import Tenant
from tenants.services import (
    DEFAULT_RETENTION,
    ProvisioningError,
    check_retention_days,
    retention_days_of,
    tenant_set_limits,
)


@pytest.fixture
def alpha_tenant(live):
    tenant = live["alpha"].tenant
    yield tenant
    Tenant.objects.filter(id=tenant.id).update(run_retention_days=None)


def _update(*args: str) -> str:
    out = StringIO()
    call_command("provision_tenant", "alpha", "--update", *args, stdout=out)
    return out.getvalue()


def test_the_command_sets_and_clears_a_tenants_retention(alpha_tenant):
    assert "runs kept 90 days (its own)" in _update("--retention-days", "90")
    alpha_tenant.refresh_from_db()
    assert alpha_tenant.run_retention_days == 90
    assert "weight 1" in _update("--weight", "1")  # other changes leave it as it is
    alpha_tenant.refresh_from_db()
    assert alpha_tenant.run_retention_days == 90
    with override_settings(RUN_RETENTION_DAYS=30):
        assert "runs kept 30 days (the default)" in _update("--retention-days", "default")
    alpha_tenant.refresh_from_db()
    assert alpha_tenant.run_retention_days is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "between 1 and 3650 (got 0)"),
        ("3651", "between 1 and 3650 (got 3651)"),
        ("-5", "between 1 and 3650 (got -5)"),
        ("a week", "expected a number of days or 'default'"),
    ],
)
def test_the_command_refuses_a_retention_out_of_bounds(alpha_tenant, value, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _update("--retention-days", value)
    alpha_tenant.refresh_from_db()
    assert alpha_tenant.run_retention_days is None


def test_the_service_checks_the_bounds():
    assert check_retention_days(1) == 1 and check_retention_days(3650) == 3650
    for bad in (0, 3651, True, "30"):
        with pytest.raises(ProvisioningError, match="retention days"):
            check_retention_days(bad)


def test_the_effective_retention_is_the_tenants_own_else_the_default(alpha_tenant):
    with override_settings(RUN_RETENTION_DAYS=30):
        assert retention_days_of(alpha_tenant) == 30
        tenant_set_limits(slug="alpha", retention_days=7)
        alpha_tenant.refresh_from_db()
        assert retention_days_of(alpha_tenant) == 7
        tenant_set_limits(slug="alpha", retention_days=DEFAULT_RETENTION)
        alpha_tenant.refresh_from_db()
        assert retention_days_of(alpha_tenant) == 30
