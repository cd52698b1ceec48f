"""The template schema new tenants are cloned from, never older than the code's migrations.

Running every migration for each new tenant costs about a second (Django renders the
project state migration by migration); cloning a schema that was migrated once costs only
the DDL (tenants/schema_clone.py). The template (`TENANT_TEMPLATE_SCHEMA`, not a tenant:
no Tenant row, no domain, no data but what migrations wrote) is that schema.

A stale template must never produce an out-of-date tenant:
- a clone is made only after checking, in the provisioning transaction and under a shared
  advisory lock, that the template has recorded every migration the running code has
  (`schema_state`); the template is replaced only under the same lock, held exclusively,
  so no clone can read it half replaced;
- the template is never migrated in place: `template_build` migrates a scratch schema with
  the ordinary `migrate_schemas` and swaps it in. `tenant_provision` builds it first when
  it is missing or behind the code (after a release added migrations), and so does
  `manage.py tenant_template` (a release step);
- when it cannot be used (behind the code inside an open transaction, which migrations
  cannot run in; or holding something a clone does not reproduce), the new schema is
  migrated as django-tenants always did: slower, never wrong.

A template ahead of the code (a newer release built it during a rolling deploy) is used:
its clones are exactly what that release's migrate_schemas makes of every other tenant,
and their migration records say so.
"""

from __future__ import annotations

import functools
import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.db.migrations.loader import MigrationLoader
from psycopg import sql

from core.pgbackend.base import require_session_connection

from .schema_clone import CloneRecipe, CloneUnsupported, clone_recipe, clone_run

logger = logging.getLogger(__name__)

# Advisory lock keys (two int4: "tw", n). TEMPLATE: clones hold it shared for the rest of
# their transaction, a swap holds it exclusively. BUILD: one builder at a time.
TEMPLATE_LOCK = (0x7477, 15)
BUILD_LOCK = (0x7477, 16)
# A build waits this long for another process's build (about a second here) to finish.
BUILD_WAIT_SECONDS = 120


class TemplateError(Exception):
    """The template could not be built to the code's migrations."""


@dataclass(frozen=True)
class SchemaState:
    exists: bool
    missing: frozenset[tuple[str, str]]  # the code's migrations the schema has not recorded
    identity: tuple | None = None  # (namespace oid, migrations recorded): what a recipe is of

    @property
    def current(self) -> bool:
        return self.exists and not self.missing


def template_name() -> str:
    """The template schema's name; empty when cloning is turned off."""
    return settings.TENANT_TEMPLATE_SCHEMA


@functools.cache
def code_migrations() -> frozenset[tuple[str, str]]:
    """Every migration of the running code, as (app, name): what a tenant schema records
    once migrated (django-tenants runs the whole plan there; the router skips the other
    apps' operations, their records stay)."""
    return frozenset(MigrationLoader(None, ignore_no_migrations=True).graph.nodes)


def schema_state(cursor, schema: str) -> SchemaState:
    """Whether `schema` exists and which of the code's migrations it has not recorded."""
    cursor.execute(
        "SELECT n.oid, to_regclass(quote_ident(n.nspname) || '.django_migrations') IS NOT NULL "
        "FROM pg_namespace n WHERE n.nspname = %s",
        [schema],
    )
    row = cursor.fetchone()
    if row is None:
        return SchemaState(exists=False, missing=code_migrations())
    if not row[1]:
        return SchemaState(exists=True, missing=code_migrations())
    cursor.execute(
        sql.SQL("SELECT app, name FROM {}.django_migrations").format(sql.Identifier(schema))
    )
    recorded = frozenset(cursor.fetchall())
    return SchemaState(True, code_migrations() - recorded, (row[0], recorded))


def template_state() -> SchemaState:
    with connection.cursor() as cursor:
        return schema_state(cursor, template_name())


_recipes: dict[tuple, CloneRecipe] = {}
_recipes_lock = threading.Lock()


def _recipe(cursor, state: SchemaState) -> CloneRecipe:
    """The template's recipe, read once per template: a rebuilt template is a new schema
    (a new oid), a migrated one records other migrations."""
    with _recipes_lock:
        recipe = _recipes.get(state.identity)
    if recipe is None:
        recipe = clone_recipe(cursor, template_name())
        with _recipes_lock:
            _recipes.clear()
            _recipes[state.identity] = recipe
    return recipe


def schema_create_from_template(schema: str) -> bool:
    """Create `schema` as a clone of the template, in the caller's transaction. False, with
    nothing done, when the template is off, missing, behind the code or not clonable:
    the caller migrates the schema instead."""
    name = template_name()
    if not name:
        return False
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            # Held until the caller's transaction ends: the template cannot be swapped
            # between the check below and the copy, nor before the copy commits.
            cursor.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", TEMPLATE_LOCK)
            state = schema_state(cursor, name)
            if not state.current:
                logger.info(
                    "template %s %s: migrating %s instead",
                    name,
                    "is behind the code" if state.exists else "does not exist",
                    schema,
                )
                return False
            clone_run(cursor, _recipe(cursor, state), schema)
            return True
    except CloneUnsupported as exc:
        logger.warning("template %s cannot be cloned (%s): migrating %s instead", name, exc, schema)
    except DatabaseError:
        logger.exception("cloning template %s failed: migrating %s instead", name, schema)
    return False


def template_ensure() -> bool:
    """Build the template if it is missing or behind the code; True if it is current
    after. Outside a transaction only (migrations commit); inside one, nothing is done and
    provisioning migrates if it must."""
    if not template_name() or connection.in_atomic_block:
        return False
    if template_state().current:
        return True
    if connection.transaction_pooling:
        return False  # building takes a session lock and migrate_schemas: not behind a pool
    try:
        template_build()
    except (DatabaseError, psycopg.Error) as exc:
        # Another builder held the lock too long, or the database refused: this tenant is
        # migrated instead, and the next provisioning tries again.
        logger.warning("template %s not built (%s)", template_name(), exc)
        return False
    return True


def template_build(*, force: bool = False) -> bool:
    """Migrate a scratch schema with the ordinary migrate_schemas, then swap it in as the
    template; True if it did. Without `force`, nothing is done when the template is
    current (another process may have just built it). Outside a transaction only."""
    require_session_connection("building the tenant template")  # a session lock, migrations
    name = template_name()
    if not name:
        raise TemplateError("TENANT_TEMPLATE_SCHEMA is empty: templates are off")
    if connection.in_atomic_block:
        raise TemplateError("the template cannot be built inside a transaction")
    with _session_lock(BUILD_LOCK, BUILD_WAIT_SECONDS):
        if not force and template_state().current:
            return False
        scratch = f"{name}_build"
        with connection.cursor() as cursor:
            cursor.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}").format(
                    s=sql.Identifier(scratch)
                )
            )
        # The same command and executor that migrate every tenant (it commits and closes
        # the connection when done).
        call_command(
            "migrate_schemas",
            schema_name=scratch,
            tenant=True,
            executor="standard",
            interactive=False,
            verbosity=0,
        )
        with connection.cursor() as cursor:
            missing = schema_state(cursor, scratch).missing
        if missing:
            raise TemplateError(f"migrating {scratch} left {sorted(missing)[:3]} unrecorded")
        _swap(scratch, name)
    logger.info("template %s built", name)
    return True


def _swap(scratch: str, name: str) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        # Waits (lock_timeout) for clones in progress; clones then wait for this.
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", TEMPLATE_LOCK)
        cursor.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {t} CASCADE; ALTER SCHEMA {s} RENAME TO {t}").format(
                t=sql.Identifier(name), s=sql.Identifier(scratch)
            )
        )


def template_drop() -> None:
    """Drop the template (the next provisioning builds it again)."""
    name = template_name()
    if not name:
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", TEMPLATE_LOCK)
        cursor.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@contextmanager
def _session_lock(key: tuple[int, int], wait_seconds: float):
    """Hold an advisory lock on a connection of its own: migrate_schemas closes Django's
    connection (and with it any session lock) when it is done."""
    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as own:
        for bound in ("lock_timeout", "statement_timeout"):  # the wait is one statement
            own.execute(f"SET {bound} = '{int(wait_seconds * 1000)}ms'")
        own.execute("SELECT pg_advisory_lock(%s, %s)", key)
        try:
            yield
        finally:
            own.execute("SELECT pg_advisory_unlock(%s, %s)", key)


def template_verify() -> list[str]:
    """Compare a clone of the template with a schema migrated afresh, on this database:
    the catalog differences (none: clones are exact here). Both scratch schemas are dropped
    after. Outside a transaction only."""
    from .schema_catalog import schema_snapshot, snapshot_differences

    name = template_name()
    template_build()  # current, or built now
    migrated, cloned = f"{name}_verify_migrated", f"{name}_verify_cloned"
    _drop_schemas(migrated, cloned)
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(migrated)))
        call_command(
            "migrate_schemas",
            schema_name=migrated,
            tenant=True,
            executor="standard",
            interactive=False,
            verbosity=0,
        )
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", TEMPLATE_LOCK)
            clone_run(cursor, clone_recipe(cursor, name), cloned)
        with connection.cursor() as cursor:
            return snapshot_differences(
                schema_snapshot(cursor, migrated), schema_snapshot(cursor, cloned)
            )
    finally:
        _drop_schemas(migrated, cloned)


def _drop_schemas(*names: str) -> None:
    with connection.cursor() as cursor:
        for name in names:
            cursor.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
