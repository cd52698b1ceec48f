"""migrate_schemas across many schemas: the migrations-table check asks for one table by
name, schemas that already have every migration are not visited, and the schemas visited
share one run of the system checks (ADR 0028)."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.core import checks
from django.core.management import CommandError
from django.core.management.base import SystemCheckError
from django.core.management.commands.migrate import Command as MigrateCommand
from django.db import connection, transaction
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.test.utils import CaptureQueriesContext
from django_tenants.migration_executors import get_executor as tenants_get_executor
from django_tenants.signals import schema_migrated
from psycopg import sql

from bench.probe_migration import PROBE, probe_migration
from tenants.migrate_executor import command_options, get_executor, schemas_behind
from tenants.schema_catalog import schema_snapshot, snapshot_differences
from tenants.schema_template import code_migrations, schema_create_from_template, template_ensure

from .schemas import migrate_schema

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


@pytest.fixture
def visited():
    """The schemas django-tenants' run_migrations visits, in order."""
    names: list[str] = []

    def record(sender, schema_name, **kwargs):
        names.append(schema_name)

    schema_migrated.connect(record)
    yield names
    schema_migrated.disconnect(record)


def _recorded(schema: str) -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("SELECT app, name FROM {}").format(sql.Identifier(schema, "django_migrations"))
        )
        return set(cursor.fetchall())


def _run(schemas: list[str], *argv: str) -> None:
    options = command_options("--executor=standard", "--noinput", "-v", "0", *argv)
    get_executor("standard")([], options).run_migrations(tenants=list(schemas))
    connection.set_schema_to_public()


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


def test_schemas_behind_are_those_missing_a_migration_or_the_table(schemas):
    with connection.cursor() as cursor:
        assert schemas_behind(cursor, SCHEMAS, code_migrations()) == ["t_mig_bare"]
        cursor.execute("DELETE FROM t_mig_b.django_migrations WHERE app = 'runs'")
        assert schemas_behind(cursor, SCHEMAS, code_migrations()) == ["t_mig_b", "t_mig_bare"]
        assert schemas_behind(cursor, ["t_mig_a"], code_migrations() | {PROBE}) == ["t_mig_a"]
        # More schemas than one chunk takes: a later chunk's counts are read too.
        many = ["t_mig_a"] * 700 + ["t_mig_b", "t_mig_bare"]
        assert schemas_behind(cursor, many, code_migrations()) == ["t_mig_b", "t_mig_bare"]
        # A duplicated record does not make up for a missing one.
        cursor.execute(
            "INSERT INTO t_mig_b.django_migrations (app, name, applied)"
            " SELECT app, name, applied FROM t_mig_b.django_migrations WHERE app = 'jobs'"
        )
        assert schemas_behind(cursor, ["t_mig_b"], code_migrations()) == ["t_mig_b"]


def test_every_app_with_models_has_migrations():
    """Skipping a current schema relies on models changing only by migrations: an app with
    models and no migrations would get its tables and content types from post_migrate and
    run_syncdb alone."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    without = [
        config.label
        for config in apps.get_app_configs()
        if list(config.get_models()) and config.label not in loader.migrated_apps
    ]
    assert without == []


def test_a_view_named_django_migrations_is_not_the_table(schemas):
    with connection.cursor() as cursor:
        cursor.execute("CREATE VIEW t_mig_bare.django_migrations AS SELECT 1 AS id")
    connection.set_schema("t_mig_bare", include_public=False)
    try:
        assert not MigrationRecorder(connection).has_table()
    finally:
        connection.set_schema_to_public()


def test_the_subprocess_executor_refuses_a_target_it_would_not_pass_on(schemas):
    options = command_options("--executor=subprocess", "--noinput", "jobs", "zero")
    with pytest.raises(CommandError, match="subprocess cannot migrate to a named"):
        get_executor("subprocess")([], options).run_migrations(tenants=["t_mig_a"])


def test_the_migrate_schemas_command_skips_a_current_schema(schemas, visited):
    for schema in ("t_mig_a", "t_mig_bare"):
        migrate_schema(schema)
    assert visited == ["t_mig_bare"]
    assert _recorded("t_mig_bare") == code_migrations()


def test_migrate_visits_only_the_schemas_behind_the_code_and_migrates_them(schemas, visited):
    with probe_migration() as leaf:
        _run(["t_mig_a"])
        assert visited == ["t_mig_a"] and PROBE in _recorded("t_mig_a")
        visited.clear()
        _run(["t_mig_a", "t_mig_b"])
        assert visited == ["t_mig_b"]  # t_mig_a has the probe already
        assert PROBE in _recorded("t_mig_b")
        visited.clear()
        _run(["t_mig_a", "t_mig_b"])
        assert visited == []
        # A run that is not "apply what is missing" visits every schema it is given.
        _run(["t_mig_a", "t_mig_b"], "--plan")
        assert visited == ["t_mig_a", "t_mig_b"]
        visited.clear()
        # Naming a target (here: back to before the probe) visits every schema too.
        _run(["t_mig_a", "t_mig_b"], *leaf)
        assert visited == ["t_mig_a", "t_mig_b"]
    assert PROBE not in _recorded("t_mig_a") and PROBE not in _recorded("t_mig_b")
    # The public schema is migrated even when current (outside the probe: it would record it).
    visited.clear()
    _run(["public", "t_mig_a"])
    assert visited == ["public"]


@pytest.fixture
def references(live):
    """t_ref_a cloned from the template and t_ref_bare empty, for schemas migrated the way
    django-tenants alone does; dropped after."""
    template_ensure()
    with transaction.atomic():
        assert schema_create_from_template("t_ref_a")
    with connection.cursor() as cursor:
        cursor.execute("CREATE SCHEMA t_ref_bare")
    yield {"t_mig_a": "t_ref_a", "t_mig_b": "t_ref_a", "t_mig_bare": "t_ref_bare"}
    connection.set_schema_to_public()
    with connection.cursor() as cursor:
        cursor.execute("DROP SCHEMA IF EXISTS t_ref_a, t_ref_bare CASCADE")


def _differences(schema: str, other: str) -> list[str]:
    connection.set_schema_to_public()
    with connection.cursor() as cursor:
        return snapshot_differences(schema_snapshot(cursor, schema), schema_snapshot(cursor, other))


def test_schemas_migrated_with_the_checks_once_end_as_django_tenants_leaves_them(
    schemas, references
):
    """Each schema migrated through this executor (checks once, current schemas skipped)
    ends as its reference, migrated by django-tenants' own executor: catalog entry by
    catalog entry, upgraded and rolled back."""

    def alone(*argv: str) -> None:
        options = command_options("--executor=standard", "--noinput", "-v", "0", *argv)
        targets = ["t_ref_a"] if argv else ["t_ref_a", "t_ref_bare"]
        tenants_get_executor("standard")([], options).run_migrations(tenants=targets)

    with probe_migration() as leaf:
        alone()
        _run(["t_mig_a", "t_mig_b", "t_mig_bare"])
        for schema in SCHEMAS:
            assert PROBE in _recorded(schema)
            assert _differences(schema, references[schema]) == [], schema
        alone(*leaf)
        _run(["t_mig_a", "t_mig_b"], *leaf)
    for schema in ("t_mig_a", "t_mig_b"):
        assert PROBE not in _recorded(schema)
        assert _differences(schema, "t_ref_a") == [], schema


def test_the_system_checks_run_once_before_any_schema(schemas, visited, monkeypatch):
    ran: list[dict] = []
    django_check = MigrateCommand.check

    def counting(self, *args, **kwargs):
        ran.append(kwargs)
        return django_check(self, *args, **kwargs)

    def failing(app_configs=None, **kwargs):
        return [checks.Error("broken on purpose", id="tests.E001")]

    monkeypatch.setattr(MigrateCommand, "check", counting)
    with probe_migration() as leaf:
        _run(["t_mig_a", "t_mig_b"])
        assert visited == ["t_mig_a", "t_mig_b"]
        assert [kwargs.get("databases") for kwargs in ran] == [["default"]]  # migrate's own
        # A check that fails stops the run before the first schema, as each migrate would.
        visited.clear()
        ran.clear()
        registry = checks.registry.registry
        monkeypatch.setattr(registry, "registered_checks", registry.registered_checks | {failing})
        with pytest.raises(SystemCheckError, match="broken on purpose"):
            _run(["t_mig_a", "t_mig_b"], *leaf)
        assert visited == [] and len(ran) == 1
        assert PROBE in _recorded("t_mig_a") and PROBE in _recorded("t_mig_b")
