"""Tenant id -> schema name, cached in the leader and refreshed when an id is unknown."""

from __future__ import annotations

from django.db import connection


class TenantDirectory:
    def __init__(self) -> None:
        self._schemas: dict[int, str] = {}

    def refresh(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, schema_name FROM public.tenants_tenant WHERE schema_name <> 'public'"
            )
            self._schemas = dict(cursor.fetchall())

    def schema(self, tenant_id: int) -> str | None:
        if tenant_id not in self._schemas:
            self.refresh()
        return self._schemas.get(tenant_id)

    def all(self) -> list[tuple[int, str]]:
        self.refresh()
        return sorted(self._schemas.items())
