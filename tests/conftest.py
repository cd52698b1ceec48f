"""The shared test world: two tenants (alpha, beta) provisioned once per session in the test
database, and a clean Redis DB for every test that asks for one."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.conf import settings

from tenants.models import Tenant
from tenants.services import tenant_provision


@dataclass(frozen=True)
class TenantWorld:
    tenant: Tenant
    domain: str
    admin_user: str
    admin_password: str
    token: str

    @property
    def schema(self) -> str:
        return self.tenant.schema_name


def _provision(slug: str) -> TenantWorld:
    result = tenant_provision(
        slug=slug, admin_user=f"{slug}-admin", admin_password=f"{slug}-password"
    )
    return TenantWorld(
        tenant=result.tenant,
        domain=result.domain,
        admin_user=result.admin_user,
        admin_password=result.admin_password,
        token=result.token.plain,
    )


@pytest.fixture(scope="session")
def world(django_db_setup, django_db_blocker) -> dict[str, TenantWorld]:
    """Tenants alpha and beta, committed for the whole session."""
    with django_db_blocker.unblock():
        return {slug: _provision(slug) for slug in ("alpha", "beta")}


@pytest.fixture
def alpha(world) -> TenantWorld:
    return world["alpha"]


@pytest.fixture
def beta(world) -> TenantWorld:
    return world["beta"]


@pytest.fixture
def redis_client():
    """The test Redis DB, emptied before and after the test."""
    from scheduler_site.redis_client import get_redis

    client = get_redis()
    assert client.connection_pool.connection_kwargs.get("db") == int(
        settings.REDIS_URL.rsplit("/", 1)[1]
    )
    client.flushdb()
    yield client
    client.flushdb()
