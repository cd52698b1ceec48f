"""Tenant id -> schema name, cached in the leader and refreshed when an id is unknown.

Suspended tenants are left out: to the engine they do not exist, so none of their jobs is
materialised or fired (`tenants.services.tenant_suspend`); once resumed, they are back at
the next refresh."""

from __future__ import annotations

from django.db import connection

from core.partitions import partition_of


class TenantDirectory:
    """The tenants of one partition (docs/adr/0020); of every tenant with the defaults.
    A tenant of another partition is unknown here, as a suspended one is."""

    def __init__(self, partition: int = 0, partitions: int = 1) -> None:
        self.partition = partition
        self.partitions = partitions
        self._schemas: dict[int, str] = {}

    def refresh(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, schema_name FROM public.tenants_tenant"
                " WHERE schema_name <> 'public' AND suspended_at IS NULL"
            )
            rows = cursor.fetchall()
        self._schemas = {
            tenant_id: schema
            for tenant_id, schema in rows
            if partition_of(tenant_id, self.partitions) == self.partition
        }

    def includes(self, tenant_id: int) -> bool:
        return partition_of(tenant_id, self.partitions) == self.partition

    def schema(self, tenant_id: int) -> str | None:
        if not self.includes(tenant_id):
            return None
        if tenant_id not in self._schemas:
            self.refresh()
        return self._schemas.get(tenant_id)

    def all(self) -> list[tuple[int, str]]:
        self.refresh()
        return sorted(self._schemas.items())
