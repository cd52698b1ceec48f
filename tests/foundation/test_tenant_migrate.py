"""migrate_schemas across many schemas: the migrations-table check asks for one table by
name."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.migrations.recorder import MigrationRecorder
from django.test.utils import CaptureQueriesContext
from psycopg import sql

from tenants.schema_template import schema_create_from_template, template_ensure

SCHEMAS = ["t_mig_a", "t_mig_b", "t_mig_bare"]


@pytest.fixture
def schemas(live):
    """t_mig_a and t_mig_b cloned from the template (every migration recorded), t_mig_bare
    empty; all dropped after."""
    template_ensure()
    for name in SCHEMAS[:2]:
        with transaction.atomic():
            assert schema_create_from_template(name)
    with connection.cursor() as cursor:
        cursor.execute("CREATE SCHEMA t_mig_bare")
    yield SCHEMAS
    connection.set_schema_to_public()
    with connection.cursor() as cursor:
        for name in SCHEMAS:
            cursor.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def test_the_migrations_table_is_looked_up_by_name_in_the_schema_not_listed(schemas):
    """public has a django_migrations table and is on the search path: a schema without one
    must still be told it has none, and without listing every table of the catalog."""
    connection.set_schema("t_mig_bare", include_public=False)
    with CaptureQueriesContext(connection) as queries:
        assert not MigrationRecorder(connection).has_table()
    connection.set_schema("t_mig_a", include_public=False)
    with CaptureQueriesContext(connection) as more:
        assert MigrationRecorder(connection).has_table()
    connection.set_schema_to_public()
    statements = [q["sql"] for q in queries.captured_queries + more.captured_queries]
    assert statements and not any("pg_table_is_visible" in s for s in statements)
    assert any("relname" in s for s in statements)
