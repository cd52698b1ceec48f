"""DB_TRANSACTION_POOLING behind a real PgBouncer in transaction mode (core/pgbackend).

Every test drives clients whose transactions share one or two server connections for real:
the tenant a client reads, its timeouts and its transactions must stay its own."""

from __future__ import annotations

import copy
import itertools
import subprocess
import sys
import threading
from contextlib import nullcontext

import psycopg
import pytest
from django.db import connection, connections, transaction
from django.db.utils import OperationalError

from core.clock import SystemClock
from core.pgbackend.base import DatabaseWrapper
from devstack import pgbouncer

from ..scenarios.procs import ROOT, process_env
from .helpers import make_job

pytestmark = pytest.mark.skipif(
    pgbouncer.unavailable() is not None, reason=str(pgbouncer.unavailable())
)

_aliases = itertools.count()


@pytest.fixture(scope="module")
def bouncer():
    with pgbouncer.running_pgbouncer(1, *pgbouncer.target_of(connection.settings_dict)) as running:
        yield running


def client(bouncer, *, pooling: bool, settings_dict: dict | None = None) -> DatabaseWrapper:
    """A Django connection of its own through the bouncer, as a web or worker process
    with DB_TRANSACTION_POOLING (or without it) would open one."""
    settings_dict = copy.deepcopy(settings_dict or connection.settings_dict)
    settings_dict.update(HOST="127.0.0.1", PORT=str(bouncer.port), CONN_MAX_AGE=0)
    options = settings_dict["OPTIONS"]
    if pooling:
        settings_dict.update(TRANSACTION_POOLING=True, DISABLE_SERVER_SIDE_CURSORS=True)
    else:
        # django-tenants' backend as it is, minus what PgBouncer refuses outright (startup
        # options, prepared statements), so that only the search_path is left to show.
        for key in ("options", "server_side_binding", "prepare_threshold"):
            options.pop(key, None)
    db = DatabaseWrapper(settings_dict, alias=f"bouncer{next(_aliases)}")
    connections[db.alias] = db  # this thread's, for transaction.atomic(using=...)
    return db


def names_seen(db: DatabaseWrapper) -> set[str]:
    with db.cursor() as cursor:
        cursor.execute("SELECT name FROM jobs_job")
        return {row[0] for row in cursor.fetchall()}


@pytest.fixture
def two_tenants(live):
    clock = SystemClock()
    make_job(live["alpha"].tenant, clock, name="alpha's job", schedule=None)
    make_job(live["beta"].tenant, clock, name="beta's job", schedule=None)
    return live["alpha"].schema, live["beta"].schema


def test_without_the_setting_a_client_reads_another_tenants_tables(bouncer, two_tenants):
    """The hazard the setting exists for, shown on the same bouncer: django-tenants sets the
    search_path once per schema change, and the next statement reaches a server connection
    that another client pointed at its own tenant."""
    alpha_schema, beta_schema = two_tenants
    first, second = client(bouncer, pooling=False), client(bouncer, pooling=False)
    try:
        first.set_schema(alpha_schema)
        second.set_schema(beta_schema)
        assert names_seen(first) == {"alpha's job"}
        assert names_seen(second) == {"beta's job"}
        assert names_seen(first) == {"beta's job"}  # alpha's client, beta's rows
    finally:
        first.close()
        second.close()


def test_each_client_reads_its_own_tenant_through_one_server_connection(bouncer, two_tenants):
    alpha_schema, beta_schema = two_tenants
    first, second = client(bouncer, pooling=True), client(bouncer, pooling=True)
    try:
        first.set_schema(alpha_schema)
        second.set_schema(beta_schema)
        for _ in range(3):
            assert names_seen(first) == {"alpha's job"}
            assert names_seen(second) == {"beta's job"}
        with transaction.atomic(using=first.alias):
            assert names_seen(first) == {"alpha's job"}
        with transaction.atomic(using=second.alias):
            assert names_seen(second) == {"beta's job"}
    finally:
        first.close()
        second.close()


def test_a_statement_reads_as_if_it_had_run_alone(bouncer, two_tenants):
    """The settings travel in the same query as the statement: the cursor's result, row
    count and description are the statement's own (Django's save() and update() read the
    row count), in autocommit and in a transaction, with and without parameters."""
    db = client(bouncer, pooling=True)
    try:
        db.set_schema(two_tenants[0])
        for atomic in (False, True):
            block = transaction.atomic(using=db.alias) if atomic else nullcontext()
            with block, db.cursor() as cursor:
                cursor.execute("UPDATE jobs_job SET name = name WHERE name <> %s", ["x"])
                assert cursor.rowcount == 1 and cursor.description is None
                cursor.execute("UPDATE jobs_job SET name = name WHERE name = %s", ["x"])
                assert cursor.rowcount == 0  # the statement's, not the settings' (one row)
                cursor.execute("-- nothing but a comment")
                assert cursor.description is None  # not the settings' columns
                # no parameters: the text goes as written (one %), as on a direct connection
                cursor.execute("SELECT name, 100 % 7 FROM jobs_job WHERE name LIKE 'alpha%'")
                assert cursor.fetchall() == [("alpha's job", 2)]
                cursor.execute("SELECT %s::text || '%%'", ["50"])
                assert [c.name for c in cursor.description] == ["?column?"]
                assert cursor.fetchone() == ("50%",)
    finally:
        db.close()


def test_threads_switching_tenants_never_read_another_ones(bouncer, two_tenants):
    """Eight clients on one server connection, each switching between the two tenants in
    autocommit and in transactions, every read checked."""
    schemas = dict(zip(two_tenants, ("alpha's job", "beta's job"), strict=True))
    wrong: list[tuple[str, set[str]]] = []
    errors: list[BaseException] = []

    def hammer(seed: int) -> None:
        db = client(bouncer, pooling=True)
        try:
            for step in range(40):
                schema = list(schemas)[(seed + step) % 2]
                db.set_schema(schema)
                if step % 3 == 0:
                    with transaction.atomic(using=db.alias):
                        seen = names_seen(db)
                        db.set_schema(list(schemas)[(seed + step + 1) % 2])
                        switched = names_seen(db)
                        if switched != {schemas[db.schema_name]}:
                            wrong.append((db.schema_name, switched))
                else:
                    seen = names_seen(db)
                if seen != {schemas[schema]}:
                    wrong.append((schema, seen))
        except BaseException as error:
            errors.append(error)
        finally:
            db.close()

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert wrong == []


def test_the_timeouts_hold_in_every_transaction_and_leave_with_it(bouncer, two_tenants):
    url = bouncer.url(connection.settings_dict["NAME"])
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute("RESET ALL")  # the one server connection, as a new session has it
    db = client(bouncer, pooling=True)
    try:
        db.set_schema(two_tenants[0])
        with db.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            assert cursor.fetchone()[0] == "30s"
            cursor.execute("SHOW lock_timeout")
            assert cursor.fetchone()[0] == "10s"
        with transaction.atomic(using=db.alias), db.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")  # the transaction's first statement
            assert cursor.fetchone()[0] == "30s"
            cursor.execute("SET LOCAL lock_timeout = '1s'")
            db.set_schema(two_tenants[1])  # the search_path is sent again, alone
            with db.cursor() as again:
                again.execute("SHOW lock_timeout")
                assert again.fetchone()[0] == "1s"  # the transaction's own SET LOCAL holds
                again.execute("SHOW statement_timeout")
                assert again.fetchone()[0] == "30s"
            cursor.execute("SET LOCAL statement_timeout = '100ms'")
            with pytest.raises(OperationalError, match="statement timeout"):
                cursor.execute("SELECT pg_sleep(2)")
        # A plain client of the same single server connection: nothing of ours is left on it.
        with psycopg.connect(url, autocommit=True) as raw:
            for name in (
                "statement_timeout",
                "lock_timeout",
                "idle_in_transaction_session_timeout",
            ):
                assert raw.execute(f"SHOW {name}").fetchone()[0] == "0", name
            assert raw.execute("SHOW search_path").fetchone()[0] == '"$user", public'
    finally:
        db.close()


def test_a_statement_timeout_for_a_block_holds_in_it_and_ends_with_it(bouncer, two_tenants):
    """What the metrics' bounded reads use behind a pool (a session-level SET would be
    overridden by the next transaction's own timeout)."""
    db = client(bouncer, pooling=True)
    try:
        db.set_schema(two_tenants[0])
        with db.statement_timeout_for_block(0.1):
            with pytest.raises(OperationalError, match="statement timeout"), db.cursor() as c:
                c.execute("SELECT pg_sleep(2)")
            assert names_seen(db) == {"alpha's job"}
        with db.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            assert cursor.fetchone()[0] == "30s"
    finally:
        db.close()


def test_a_rollback_to_a_savepoint_does_not_leave_the_old_tenant_in_place(bouncer, two_tenants):
    """ROLLBACK TO SAVEPOINT undoes a search_path set after the savepoint: the next
    statement must set it again, or it reads the tenant from before the savepoint."""
    alpha_schema, beta_schema = two_tenants
    db = client(bouncer, pooling=True)
    try:
        with transaction.atomic(using=db.alias):
            db.set_schema(alpha_schema)
            assert names_seen(db) == {"alpha's job"}
            try:
                with transaction.atomic(using=db.alias):
                    db.set_schema(beta_schema)
                    assert names_seen(db) == {"beta's job"}
                    raise RuntimeError("undo the savepoint")
            except RuntimeError:
                pass
            assert names_seen(db) == {"beta's job"}  # the schema asked for, set again
    finally:
        db.close()


def test_a_timeout_left_at_zero_keeps_the_role_or_database_value(bouncer, two_tenants):
    """DB_*_TIMEOUT_SECONDS=0 with the value on the role (ALTER ROLE ... SET) instead: the
    transactions must not set it to 0. The session value stands for the role's here, put
    on the one server connection by a plain client."""
    url = bouncer.url(connection.settings_dict["NAME"])
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute("SET statement_timeout = '7s'")
    settings_dict = copy.deepcopy(connection.settings_dict)
    settings_dict["OPTIONS"]["options"] = "-c lock_timeout=10000"  # no statement timeout
    db = client(bouncer, pooling=True, settings_dict=settings_dict)
    try:
        db.set_schema(two_tenants[0])
        for atomic in (False, True):
            block = transaction.atomic(using=db.alias) if atomic else nullcontext()
            with block, db.cursor() as cursor:
                cursor.execute("SHOW statement_timeout")
                assert cursor.fetchone()[0] == "7s"
                cursor.execute("SHOW lock_timeout")
                assert cursor.fetchone()[0] == "10s"
    finally:
        db.close()
        with psycopg.connect(url, autocommit=True) as raw:
            raw.execute("RESET ALL")


def test_a_statement_that_fails_to_render_leaves_the_next_one_its_tenant(bouncer, two_tenants):
    """A statement psycopg cannot render (a value it cannot adapt) is never sent: the
    next one must still carry the tenant switched to before it."""
    alpha_schema, beta_schema = two_tenants
    db = client(bouncer, pooling=True)
    try:
        with transaction.atomic(using=db.alias):
            db.set_schema(alpha_schema)
            assert names_seen(db) == {"alpha's job"}
            db.set_schema(beta_schema)
            with pytest.raises(Exception), db.cursor() as cursor:  # noqa: B017
                cursor.execute("SELECT %s", [object()])
            assert names_seen(db) == {"beta's job"}
    finally:
        db.close()


def test_a_transaction_opened_by_psycopg_itself_gets_the_settings(bouncer, two_tenants):
    """After a Django transaction ends, one opened on the raw connection (psycopg's
    `transaction()`) on a server connection another client pointed at another tenant
    still reads this client's tenant."""
    alpha_schema, beta_schema = two_tenants
    url = bouncer.url(connection.settings_dict["NAME"])
    db = client(bouncer, pooling=True)
    try:
        db.set_schema(alpha_schema)
        with transaction.atomic(using=db.alias):
            assert names_seen(db) == {"alpha's job"}
        with psycopg.connect(url, autocommit=True) as other:
            other.execute(f"SET search_path = {beta_schema}")  # left on the server connection
        raw = db.connection
        with raw.transaction():
            assert raw.execute("SELECT name FROM jobs_job").fetchall() == [("alpha's job",)]
    finally:
        db.close()
        with psycopg.connect(url, autocommit=True) as other:
            other.execute("RESET ALL")


def test_a_failed_autocommit_statement_leaves_the_client_usable(bouncer, two_tenants):
    db = client(bouncer, pooling=True)
    try:
        db.set_schema(two_tenants[0])
        with pytest.raises(Exception, match="no_such_table"), db.cursor() as cursor:
            cursor.execute("SELECT * FROM no_such_table")
        assert names_seen(db) == {"alpha's job"}
    finally:
        db.close()


def test_server_side_cursors_are_refused_not_broken(bouncer, two_tenants):
    db = client(bouncer, pooling=True)
    try:
        db.set_schema(two_tenants[0])
        assert db.settings_dict["DISABLE_SERVER_SIDE_CURSORS"]
        from django.core.exceptions import ImproperlyConfigured

        with pytest.raises(ImproperlyConfigured, match="server-side cursors"):
            db.create_cursor("named")
    finally:
        db.close()


def _manage(args: list[str], **env: str) -> subprocess.CompletedProcess:
    """`manage.py <args>` in a process of its own on the test database, `env` on top."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        env=process_env(**env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


SESSION_COMMANDS = [
    ["runscheduler"],
    ["migrate_schemas"],
    ["migrate"],
    ["tenant_template", "--rebuild"],
]


@pytest.mark.parametrize("command", SESSION_COMMANDS)
def test_commands_that_need_a_session_refuse_the_setting_with_one_line(command):
    result = _manage(command, DB_TRANSACTION_POOLING="1")
    assert result.returncode != 0
    assert "needs a PostgreSQL session of its own" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


PROVISION_IN_A_TRANSACTION = """
from django.db import transaction
from tenants.services import tenant_provision
with transaction.atomic():
    tenant_provision(slug="pooled-three")
"""


ADMIN_FORM_ERRORS = """
from django.db import transaction
from scheduler_site.admin import TenantProvisionForm
form = TenantProvisionForm(data={"slug": "pooled-two", "name": "Two", "admin_user": "admin",
                                 "weight": 1, "max_concurrency": 5})
with transaction.atomic():  # as Django admin's add view validates
    print(form.is_valid(), form.errors.as_text())
"""


def test_a_tenant_is_provisioned_through_the_pool_by_cloning_the_template(bouncer, live):
    import json

    from tenants.models import Tenant

    database = connection.settings_dict["NAME"]
    pooled = {"DATABASE_URL": bouncer.url(database), "DB_TRANSACTION_POOLING": "1"}
    result = _manage(["provision_tenant", "pooled-one", "--json"], **pooled)
    try:
        assert result.returncode == 0, result.stderr
        schema = json.loads(result.stdout)["schema"]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = 'jobs_job'",
                [schema],
            )
            assert cursor.fetchone()[0] == 1
        # With no current template (here: one that does not exist) it is refused, saying why.
        refused = _manage(
            ["provision_tenant", "pooled-two"], **pooled, TENANT_TEMPLATE_SCHEMA="no_such_template"
        )
        assert refused.returncode != 0
        assert "the tenant template is not current" in refused.stderr
        assert not Tenant.objects.filter(slug="pooled-two").exists()
        # Django admin's add form says so as a form error (it was a server error).
        form = _manage(
            ["shell", "-c", ADMIN_FORM_ERRORS], **pooled, TENANT_TEMPLATE_SCHEMA="no_such_template"
        )
        assert form.returncode == 0, form.stderr
        assert "False" in form.stdout and "the tenant template is not current" in form.stdout
        assert not Tenant.objects.filter(slug="pooled-two").exists()
        # With templates turned off, the refusal says that, not to build a template.
        off = _manage(["provision_tenant", "pooled-two"], **pooled, TENANT_TEMPLATE_SCHEMA="")
        assert off.returncode != 0 and "TENANT_TEMPLATE_SCHEMA is empty" in off.stderr
        assert not Tenant.objects.filter(slug="pooled-two").exists()
        # Inside a transaction, as Django admin's add view provisions: still a clone.
        in_admin = _manage(["shell", "-c", PROVISION_IN_A_TRANSACTION], **pooled)
        assert in_admin.returncode == 0, in_admin.stderr
        assert Tenant.objects.filter(slug="pooled-three").exists()
    finally:
        connection.set_schema_to_public()
        slugs = ["pooled-one", "pooled-two", "pooled-three"]
        for tenant in Tenant.objects.filter(slug__in=slugs):
            tenant.auto_drop_schema = True
            tenant.delete(force_drop=True)
