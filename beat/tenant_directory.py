"""Tenant id -> schema name, cached in the leader and refreshed when an id is unknown.

Suspended tenants are left out: to the engine they do not exist, so none of their jobs is
materialised or fired (`tenants.services.tenant_suspend`); once resumed, they are back at
the next refresh."""

from __future__ import annotations

from django.db import connection


class TenantDirectory:
    def __init__(self) -> None:
        self._schemas: dict[int, str] = {}

    def refresh(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, schema_name FROM public.tenants_tenant"
                " WHERE schema_name <> 'public' AND suspended_at IS NULL"
            )
            self._schemas = dict(cursor.fetchall())

    def schema(self, tenant_id: int) -> str | None:
        if tenant_id not in self._schemas:
            self.refresh()
        return self._schemas.get(tenant_id)

    def all(self) -> list[tuple[int, str]]:
        self.refresh()
        return sorted(self._schemas.items())
