"""New tenants' schemas cloned from the template schema: identical to migrated ones (catalog
entry by catalog entry), their own sequences, never older than the code's migrations,
atomic, and two at once."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import Client
from django_tenants.utils import schema_context, schema_exists
from psycopg import sql

from bench.probe_migration import PROBE, probe_migration
from tenants import schema_template, services
from tenants.models import Domain, Tenant
from tenants.schema_catalog import schema_snapshot, snapshot_differences
from tenants.schema_template import (
    TEMPLATE_LOCK,
    code_migrations,
    schema_create_from_template,
    schema_state,
    template_drop,
    template_ensure,
    template_name,
    template_state,
)
from tenants.services import GENERATED_PASSWORD_ITERATIONS, tenant_provision

from ..scenarios.procs import wait_for
from .schemas import migrate_schema


def _migrated(schema: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    migrate_schema(schema)


def _cloned(schema: str) -> None:
    with transaction.atomic():
        assert schema_create_from_template(schema)


def _snapshot(schema: str) -> dict[str, list]:
    connection.set_schema_to_public()
    with connection.cursor() as cursor:
        return schema_snapshot(cursor, schema)


def _state(schema: str):
    with connection.cursor() as cursor:
        return schema_state(cursor, schema)


def _has_probe(schema: str) -> bool:
    snapshot = _snapshot(schema)
    columns = {(row[0], row[2]) for row in snapshot["columns"]}
    return ("jobs_job", "probe_level") in columns and ("jobs", PROBE[1]) in {
        (row[1], row[2]) for row in snapshot["rows:django_migrations"]
    }


@pytest.fixture
def scratch(live):
    """Schema names to drop after the test; tenants named tpl-* are deleted too."""
    names: list[str] = []
    yield names
    connection.set_schema_to_public()
    for tenant in Tenant.objects.filter(slug__startswith="tpl-"):
        tenant.delete(force_drop=True)
    with connection.cursor() as cursor:
        for name in names:
            cursor.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def restore_template(live):
    """For tests that change the template: drop it after (the next provisioning builds it
    from the real code again)."""
    yield
    schema_template._recipes.clear()
    connection.set_schema_to_public()
    template_drop()


def test_a_cloned_schema_is_identical_to_a_freshly_migrated_one(scratch):
    template_ensure()
    scratch += ["t_tplx_migrated", "t_tplx_cloned"]
    _migrated("t_tplx_migrated")
    _cloned("t_tplx_cloned")
    migrated, cloned = _snapshot("t_tplx_migrated"), _snapshot("t_tplx_cloned")
    assert snapshot_differences(migrated, cloned) == []
    # What the comparison covers (so that it could fail): partial indexes, every kind of
    # constraint by name, identity sequences, triggers, and the rows migrations write.
    assert any(" WHERE " in row[2] for row in migrated["indexes"])
    assert ("jobs_job", "job_index_dirty_idx") in {row[:2] for row in migrated["indexes"]}
    assert {row[2] for row in migrated["constraints"]} >= {"p", "u", "c", "f"}
    assert ("jobs_dependency", "dependency_unique") in {r[:2] for r in migrated["constraints"]}
    assert len(migrated["sequences"]) >= 10
    assert ("jobs_job_calendars", "job_calendars_changed") in {r[:2] for r in migrated["triggers"]}
    assert {(r[1], r[2]) for r in migrated["rows:django_migrations"]} == code_migrations()
    assert migrated["rows:auth_permission"] and migrated["rows:django_content_type"]


def test_a_new_migration_applies_to_a_clone_as_to_a_migrated_schema(scratch):
    template_ensure()
    scratch += ["t_tplx_old_migrated", "t_tplx_old_cloned"]
    _migrated("t_tplx_old_migrated")
    _cloned("t_tplx_old_cloned")
    with probe_migration():
        migrate_schema("t_tplx_old_migrated")
        migrate_schema("t_tplx_old_cloned")
        assert _state("t_tplx_old_cloned").current
    migrated, cloned = _snapshot("t_tplx_old_migrated"), _snapshot("t_tplx_old_cloned")
    assert snapshot_differences(migrated, cloned) == []
    assert _has_probe("t_tplx_old_cloned")
    indexes = {row[1] for row in cloned["indexes"]}
    assert "job_probe_partial_idx" in indexes and "job_updated_idx" not in indexes
    assert "dependency_unique" not in {row[1] for row in cloned["constraints"]}


def test_a_clone_has_its_own_sequences_that_start_past_the_copied_rows(scratch):
    template_ensure()
    scratch.append("t_tplx_ids")
    template = template_name()
    with connection.cursor() as cursor:
        # The template's user sequence moved (a row written and removed by hand): no clone
        # may start from its value.
        cursor.execute(f"SELECT nextval('{template}.auth_user_id_seq') FROM generate_series(1, 5)")
        cursor.execute(f"SELECT last_value FROM {template}.django_content_type_id_seq")
        template_types = cursor.fetchone()[0]
    try:
        _cloned("t_tplx_ids")
        with connection.cursor() as cursor:
            cursor.execute("SELECT max(id) FROM t_tplx_ids.django_content_type")
            copied = cursor.fetchone()[0]
            cursor.execute(
                "INSERT INTO t_tplx_ids.django_content_type (app_label, model) "
                "VALUES ('probe', 'probe') RETURNING id"
            )
            assert cursor.fetchone()[0] == copied + 1
            cursor.execute(
                "INSERT INTO t_tplx_ids.auth_user (password, is_superuser, username, first_name,"
                " last_name, email, is_staff, is_active, date_joined) "
                "VALUES ('!', false, 'u', '', '', '', false, true, now()) RETURNING id"
            )
            assert cursor.fetchone()[0] == 1
            cursor.execute(f"SELECT last_value FROM {template}.django_content_type_id_seq")
            assert cursor.fetchone()[0] == template_types  # the template's own did not move
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT setval('{template}.auth_user_id_seq', 1, false)")


def test_a_template_behind_the_code_is_rebuilt_before_any_tenant_is_cloned(
    scratch, restore_template
):
    template_ensure()
    with probe_migration():
        assert not template_state().current
        assert template_state().missing == {PROBE}
        tenant = tenant_provision(slug="tpl-after-release").tenant
        assert _state(tenant.schema_name).current and _has_probe(tenant.schema_name)
        assert template_state().current


def test_inside_a_transaction_a_stale_template_is_not_cloned_the_schema_is_migrated(scratch):
    """Migrations cannot run inside the caller's transaction, so the template cannot be
    rebuilt there: the new schema is migrated instead, never cloned from the old template."""
    template_ensure()
    with probe_migration(), transaction.atomic():
        assert not schema_create_from_template("t_tplx_refused")
        assert not schema_exists("t_tplx_refused")
        tenant = Tenant(schema_name="t_tpl_in_txn", slug="tpl-in-txn", name="in a transaction")
        tenant.save(verbosity=0)
        assert not template_state().current
    assert _has_probe("t_tpl_in_txn") and _state("t_tpl_in_txn").current


def test_a_template_holding_what_a_clone_cannot_copy_is_not_cloned(
    scratch, restore_template, caplog
):
    template_ensure()
    schema_template._recipes.clear()
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE VIEW {template_name()}.extra AS SELECT 1 AS one")
    tenant = tenant_provision(slug="tpl-view").tenant
    assert "cannot be cloned" in caplog.text and "relation extra" in caplog.text
    assert _state(tenant.schema_name).current  # migrated instead
    assert "extra" not in {row[0] for row in _snapshot(tenant.schema_name)["tables"]}


def test_a_clone_waits_while_the_template_is_being_replaced(scratch):
    """The race: a clone reading the template while a rebuild swaps in the new one would
    copy parts of each. The swap holds the template lock exclusively, a clone holds it
    shared until it commits."""
    template_ensure()
    outcome: list = []

    def provision() -> None:
        try:
            outcome.append(tenant_provision(slug="tpl-waits"))
        except Exception as exc:  # reported by the assertion below
            outcome.append(exc)
        finally:
            connections.close_all()

    with psycopg.connect(**connection.get_connection_params()) as swapper:
        swapper.execute("SELECT pg_advisory_xact_lock(%s, %s)", TEMPLATE_LOCK)
        thread = threading.Thread(target=provision)
        thread.start()
        wait_for(lambda: _lock_waiters(swapper) > 0, timeout=30)
        assert not outcome
        swapper.rollback()
    thread.join(60)
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
    assert _state(outcome[0].tenant.schema_name).current


def _lock_waiters(conn) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND classid = %s AND objid = %s",
        TEMPLATE_LOCK,
    ).fetchone()[0]


@pytest.mark.parametrize("template_missing", [False, True], ids=["current", "to-build"])
def test_two_provisions_at_once_both_succeed(scratch, template_missing):
    if template_missing:
        template_drop()
    else:
        template_ensure()
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def provision(slug: str) -> None:
        try:
            barrier.wait(30)
            results[slug] = tenant_provision(slug=slug)
        except Exception as exc:  # reported by the assertion below
            results[slug] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=provision, args=(s,)) for s in ("tpl-twin-a", "tpl-twin-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    assert template_state().current
    for slug, result in results.items():
        schema = result.tenant.schema_name
        assert _state(schema).current, slug
        assert Domain.objects.get(tenant=result.tenant).domain == f"{slug}.localhost"
        with schema_context(schema):
            assert list(get_user_model().objects.values_list("id", "username")) == [(1, "admin")]


def test_a_failed_provisioning_leaves_no_tenant_domain_or_schema(scratch, monkeypatch):
    template_ensure()

    def broken(**kwargs):
        raise RuntimeError("signing store down")

    monkeypatch.setattr(services, "signing_secret_rotate", broken)
    with pytest.raises(RuntimeError, match="signing store down"):
        tenant_provision(slug="tpl-broken")
    assert not Tenant.objects.filter(slug="tpl-broken").exists()
    assert not Domain.objects.filter(domain="tpl-broken.localhost").exists()
    assert not schema_exists("t_tpl_broken")


def test_a_generated_first_password_logs_in_and_is_then_hashed_at_full_cost(scratch, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    result = tenant_provision(slug="tpl-password")
    with schema_context(result.tenant.schema_name):
        stored = get_user_model().objects.get(username="admin").password
    assert stored.startswith(f"pbkdf2_sha256${GENERATED_PASSWORD_ITERATIONS}$")
    portal = Client(HTTP_HOST=result.domain)
    login = portal.post("/login/", {"username": "admin", "password": result.admin_password})
    assert login.status_code == 302
    connection.set_schema_to_public()
    with schema_context(result.tenant.schema_name):
        stored = get_user_model().objects.get(username="admin").password
    assert stored.startswith(f"pbkdf2_sha256${PBKDF2PasswordHasher.iterations}$")


def test_the_tenant_template_command_verifies_a_clone_against_a_migration(scratch):
    from io import StringIO

    out = StringIO()
    call_command("tenant_template", "--verify", stdout=out)
    assert "identical to a freshly migrated schema" in out.getvalue()
    assert not schema_exists(f"{template_name()}_verify_cloned")


def test_with_templates_off_a_new_schema_is_migrated(scratch, settings):
    settings.TENANT_TEMPLATE_SCHEMA = ""
    assert not template_ensure()
    with transaction.atomic():
        assert not schema_create_from_template("t_tplx_off")
    tenant = tenant_provision(slug="tpl-off").tenant
    assert _state(tenant.schema_name).current
