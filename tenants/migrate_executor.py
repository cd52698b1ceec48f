"""`migrate_schemas` visits only the tenant schemas that lack one of the code's migrations.

django-tenants' executors run Django's whole `migrate` in every tenant schema, one
connection each, even when nothing is to be applied: the system checks, the rendered
project state and the post_migrate handlers, about 195 ms a schema here (200 current
schemas took 39 s with the standard executor), so a migrate step across 10,000 current
tenants would spend about half an hour finding nothing to do. This module reads which
schemas are behind first, with two statements per 500 schemas, and hands the executor only
those (`GET_EXECUTOR_FUNCTION` in settings, django-tenants' hook). The schemas it visits
share one run of the system checks (`tenants/migrate_once.py`, ADR 0028).

A schema is skipped only when the run would have been a no-op: the command names no app or
migration (so it migrates to the code's leaves), asks for no `--fake`, `--fake-initial`,
`--plan`, `--prune`, `--run-syncdb` or `--check`, and the schema has recorded every one of
the code's migrations. A tenant schema records every migration of the plan, the shared
apps' included (the router skips their operations, not their records; so a release that
adds a migration to a shared app visits every schema), and whatever the post_migrate
handlers write (content types, permissions) follows from models, which change only by
migrations (every app with models has them). The public schema is always migrated.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from django.core.management.base import CommandError
from django.db import connections
from django_tenants.migration_executors import get_executor as tenants_get_executor
from django_tenants.migration_executors.base import MigrationExecutor
from psycopg import sql

from core.pgbackend.base import require_session_connection

from .migrate_once import run_checks_once
from .schema_template import code_migrations

# Schemas per chunk (two statements): one UNION ALL branch each, small enough to plan.
CHUNK_SCHEMAS = 500
# Options that make a run more than "apply what is missing": no schema is skipped then.
_EXACT_OPTIONS = ("fake", "fake_initial", "plan", "prune", "run_syncdb", "check_unapplied")

_WITH_TABLE = """
    SELECT n.nspname FROM pg_catalog.pg_namespace n
    WHERE n.nspname = ANY(%s)
      AND to_regclass(quote_ident(n.nspname) || '.django_migrations') IS NOT NULL
"""


def schemas_behind(cursor, schemas: Iterable[str], code: frozenset[tuple[str, str]]) -> list[str]:
    """The schemas of `schemas`, in their order, that have not recorded every migration of
    `code` (a schema with no migrations table has recorded none)."""
    schemas = list(schemas)
    apps = [app for app, _ in code]
    names = [name for _, name in code]
    current: set[str] = set()
    for start in range(0, len(schemas), CHUNK_SCHEMAS):
        chunk = schemas[start : start + CHUNK_SCHEMAS]
        cursor.execute(_WITH_TABLE, [chunk])
        with_table = [row[0] for row in cursor.fetchall()]
        if not code:
            current.update(with_table)
            continue
        if not with_table:
            continue
        branches = sql.SQL(" UNION ALL ").join(
            sql.SQL(
                "SELECT {schema}, count(DISTINCT (m.app, m.name)) FROM {table} m"
                " JOIN code ON code.app = m.app AND code.name = m.name"
            ).format(
                schema=sql.Literal(schema),
                table=sql.Identifier(schema, "django_migrations"),
            )
            for schema in with_table
        )
        cursor.execute(
            sql.SQL(
                "WITH code(app, name) AS (SELECT * FROM unnest(%s::text[], %s::text[])) {}"
            ).format(branches),
            [apps, names],
        )
        current.update(schema for schema, count in cursor.fetchall() if count == len(code))
    return [schema for schema in schemas if schema not in current]


def _may_skip(options: dict) -> bool:
    return (
        not options.get("app_label")
        and not options.get("migration_name")
        and not any(options.get(name) for name in _EXACT_OPTIONS)
    )


def _filtered(self: MigrationExecutor, tenants: Iterable | None, *, typed: bool) -> list:
    tenants = list(tenants or [])
    if self.codename == "subprocess" and (
        self.options.get("app_label") or self.options.get("migration_name")
    ):
        # django-tenants' subprocess executor does not pass the target on to its processes:
        # each would migrate forward instead (a rollback that rolls nothing back).
        raise CommandError(
            "--executor=subprocess cannot migrate to a named app or migration:"
            " use --executor=multiprocessing or standard"
        )
    if not _may_skip(self.options):
        return tenants
    public = self.PUBLIC_SCHEMA_NAME
    schemas = [tenant[0] if typed else tenant for tenant in tenants]
    candidates = [schema for schema in schemas if schema != public]
    with connections[self.options.get("database") or self.TENANT_DB_ALIAS].cursor() as cursor:
        behind = set(schemas_behind(cursor, candidates, code_migrations()))
    kept = [
        t
        for t, schema in zip(tenants, schemas, strict=True)
        if schema == public or schema in behind
    ]
    skipped = len(tenants) - len(kept)
    if skipped and int(self.options.get("verbosity", 1)) >= 1:
        sys.stdout.write(f"{skipped} of {len(tenants)} schemas have every migration: skipped\n")
        sys.stdout.flush()
    return kept


def _check_once(executor: MigrationExecutor, schemas: list) -> None:
    """The schemas' runs share one run of the system checks (`tenants/migrate_once.py`),
    except with the subprocess executor, whose schemas each run in a `manage.py` process
    of their own."""
    if schemas and executor.codename != "subprocess":
        executor.options = run_checks_once(executor.options)


_classes: dict[type, type] = {}


def _skipping(base: type[MigrationExecutor]) -> type[MigrationExecutor]:
    """`base` (django-tenants' standard, multiprocessing or subprocess executor), handed only
    the schemas that are behind."""
    if base not in _classes:

        def run_migrations(self: MigrationExecutor, tenants=None) -> None:
            kept = _filtered(self, tenants, typed=False)
            _check_once(self, kept)
            base.run_migrations(self, tenants=kept)

        def run_multi_type_migrations(self: MigrationExecutor, tenants) -> None:
            kept = _filtered(self, tenants, typed=True)
            _check_once(self, kept)
            base.run_multi_type_migrations(self, tenants=kept)

        _classes[base] = type(
            f"CurrentSkipping{base.__name__}",
            (base,),
            {
                "run_migrations": run_migrations,
                "run_multi_type_migrations": run_multi_type_migrations,
                "__doc__": _skipping.__doc__,
            },
        )
    return _classes[base]


def get_executor(codename: str | None = None) -> type[MigrationExecutor]:
    """django-tenants' executor for `codename`, skipping the schemas that are current."""
    # The template schema's lock (schema_template.py) is a session advisory lock.
    require_session_connection("migrate_schemas")
    return _skipping(tenants_get_executor(codename))


def command_options(*argv: str) -> dict:
    """migrate_schemas' options as its parser makes them from `argv`: what an executor is
    given, for running one on a chosen list of schemas (the benchmark, the tests)."""
    from django_tenants.management.commands.migrate_schemas import MigrateSchemasCommand

    parser = MigrateSchemasCommand().create_parser("manage.py", "migrate_schemas")
    return vars(parser.parse_args(list(argv)))
