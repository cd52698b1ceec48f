"""Ask whether a schema has its `django_migrations` table by name, not by listing the catalog.

Django's `MigrationRecorder.has_table` answers "is there a django_migrations table here?"
by listing every table visible on the search_path (`introspection.table_names`, which runs
`pg_table_is_visible` over every row of `pg_class`) and looking for one name in the list.
A fresh recorder asks again, and `migrate_schemas` makes several per schema, each on a new
connection. With 10,000 tenant schemas `pg_class` holds about 1.5 million rows and the
question costs about 2 s, so a release's migrate spent about 5.5 hours visiting 10,000
schemas before applying anything (docs/benchmarks.md, "Tenants").

The replacement asks the catalog for that one relation in the connection's schema, which
PostgreSQL answers from the `(relname, relnamespace)` index whatever the catalog's size.
It gives the answer Django's list would: django-tenants' introspection lists the tables of
`connection.schema_name` alone, and `table_names` keeps ordinary, partitioned and foreign
tables that are not themselves partitions (no views).
"""

from __future__ import annotations

from django.db.migrations.recorder import MigrationRecorder

_HAS_TABLE = """
    SELECT EXISTS (
        SELECT 1
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relname = %s
          AND n.nspname = %s
          AND c.relkind IN ('f', 'p', 'r')
          AND NOT c.relispartition
    )
"""


def has_migrations_table(recorder: MigrationRecorder) -> bool:
    """Whether the recorder's connection's schema holds the migrations table (cached once true,
    as Django's own method caches it)."""
    if recorder._has_table:
        return True
    connection = recorder.connection
    schema = getattr(connection, "schema_name", None) or "public"
    with connection.cursor() as cursor:
        cursor.execute(_HAS_TABLE, [recorder.Migration._meta.db_table, schema])
        recorder._has_table = bool(cursor.fetchone()[0])
    return recorder._has_table


def install() -> None:
    """Make every MigrationRecorder (Django's, django-tenants' executors') ask by name."""
    MigrationRecorder.has_table = has_migrations_table
