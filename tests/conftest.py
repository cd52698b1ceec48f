"""The shared test world: two tenants (alpha, beta) provisioned once per session in the test
database, and a clean Redis DB for every test that asks for one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tenants.models import Tenant


@dataclass(frozen=True)
class TenantWorld:
    tenant: Tenant
    domain: str
    admin_user: str
    admin_password: str
    token: str

    @property
    def schema(self) -> str:
        return self.tenant.schema_name


def _provision(slug: str) -> TenantWorld:
    from tenants.services import tenant_provision

    result = tenant_provision(
        slug=slug, admin_user=f"{slug}-admin", admin_password=f"{slug}-password"
    )
    return TenantWorld(
        tenant=result.tenant,
        domain=result.domain,
        admin_user=result.admin_user,
        admin_password=result.admin_password,
        token=result.token.plain,
    )


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_blocker):
    """Always create the test database. pytest-django creates it only when a collected test
    carries the django_db mark, and tests using the `live` fixture carry none: without this
    they would run against the development database."""
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        config = setup_databases(verbosity=0, interactive=False, aliases={"default"})
    yield
    with django_db_blocker.unblock():
        _end_other_sessions()
        teardown_databases(config, verbosity=0)


def _end_other_sessions() -> None:
    """A test that leaves a connection behind (a thread, a child process) would make the
    test database impossible to drop: say which, and end it."""
    import warnings

    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, application_name, state, left(query, 120) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        others = cursor.fetchall()
        for pid, *_ in others:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    if others:
        warnings.warn(f"sessions left on the test database: {others}", stacklevel=1)
    connection.close()


@pytest.fixture(scope="session")
def world(django_db_setup, django_db_blocker) -> dict[str, TenantWorld]:
    """Tenants alpha and beta, committed for the whole session."""
    from django.db import connection

    assert connection.settings_dict["NAME"].startswith("test_"), "not the test database"
    with django_db_blocker.unblock():
        return {slug: _provision(slug) for slug in ("alpha", "beta")}


@pytest.fixture
def alpha(world) -> TenantWorld:
    return world["alpha"]


@pytest.fixture
def beta(world) -> TenantWorld:
    return world["beta"]


@pytest.fixture
def redis_client():
    """The test Redis DB, emptied before and after the test."""
    from django.conf import settings

    from core.redis import get_redis
    from runs.notify import ENDED_REPORTER

    client = get_redis()
    assert client.connection_pool.connection_kwargs.get("db") == int(
        settings.REDIS_URL.rsplit("/", 1)[1]
    )
    # A report the last test's attempts queued (runs/notify.py) must not land in this one.
    assert ENDED_REPORTER.flush(5)
    client.flushdb()
    yield client
    assert ENDED_REPORTER.flush(5)
    client.flushdb()


# Everything a test can write in a tenant's schema: a row left behind (a calendar named
# after an API example, say) makes a later test's create collide with it.
TENANT_DATA_TABLES = (
    "alerts_deliveryattempt",
    "alerts_notification",
    "alerts_incident",
    "alerts_alertchannel",
    "alerts_evaluationcursor",
    "runs_attempt",
    "runs_run",
    "runs_dagrun",
    "jobs_dependency",
    "jobs_auditevent",
    "jobs_job_calendars",
    "jobs_exclusioncalendar",
    "jobs_job",
)


# A table larger than this is truncated; a smaller one is emptied with DELETE.
TRUNCATE_ABOVE_BYTES = 1 << 20


def truncate_tenant_data(schemas: list[str]) -> None:
    """Empty the tenants' data tables, their id sequences restarted. TRUNCATE gives every
    table new files: about 300 ms for these 26 tables, twice for each of the hundreds of
    tests using `live`, which was minutes of the suite. DELETE empties a table of a few
    rows in microseconds; one grown past TRUNCATE_ABOVE_BYTES is still truncated (a DELETE
    would leave its dead rows for the next tests to scan)."""
    from django.db import connection, transaction

    names = [f'"{s}"."{t}"' for s in schemas for t in TENANT_DATA_TABLES]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, pg_relation_size(name::regclass) > %s,"
            " pg_get_serial_sequence(name, 'id') FROM unnest(%s::text[]) AS name",
            [TRUNCATE_ABOVE_BYTES, names],
        )
        tables = cursor.fetchall()
        # As TRUNCATE would: wait for, and then shut out, any writer still at work (a thread
        # or process a test left behind), so that nothing lands between the deletes.
        cursor.execute(f"LOCK TABLE {', '.join(names)} IN ACCESS EXCLUSIVE MODE")
        big = [name for name, large, _ in tables if large]
        if big:  # CASCADE: the tables referring to them are emptied with them
            cursor.execute(f"TRUNCATE {', '.join(big)} RESTART IDENTITY CASCADE")
        for name, large, _ in tables:  # children first (the order of TENANT_DATA_TABLES)
            if not large:
                cursor.execute(f"DELETE FROM {name}")
        sequences = [seq for _, large, seq in tables if seq and not large]
        cursor.execute("SELECT setval(seq, 1, false) FROM unnest(%s::text[]) AS seq", [sequences])
        cursor.execute("DELETE FROM public.beat_schedulerlease")


@pytest.fixture
def live(world, django_db_blocker, redis_client):
    """Real commits (for tests of code that commits, or of other processes), with the
    tenants' data tables and the test Redis DB emptied before and after."""
    schemas = [w.schema for w in world.values()]
    with django_db_blocker.unblock():
        truncate_tenant_data(schemas)
        yield world
        from django.db import connection

        connection.set_schema_to_public()
        truncate_tenant_data(schemas)


# --- RabbitMQ (ADR 0019) -------------------------------------------------------------------


@pytest.fixture(scope="session")
def rabbitmq_url() -> str:
    """A RabbitMQ vhost of this test run's own (`tickwork_test_<TEST_REDIS_DB>`, made with
    `rabbitmqctl` when it is at hand), or a skip saying why there is none."""
    from tests.rabbitmq import rabbitmq_test_url

    url, reason = rabbitmq_test_url()
    if url is None:
        pytest.skip(reason)
    return url


@pytest.fixture
def amqp_broker(rabbitmq_url, settings):
    """This test's broker is RabbitMQ: CELERY_BROKER_URL points at the test vhost, whose
    run queues are emptied before and after."""
    from tests.rabbitmq import reset_queues

    settings.CELERY_BROKER_URL = rabbitmq_url
    reset_queues(rabbitmq_url)
    yield rabbitmq_url
    reset_queues(rabbitmq_url)


# --- Redis Cluster (docs/operations.md "Redis Cluster") ------------------------------------


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """Three primaries, each with a replica, of this machine's redis-server made one
    cluster for the session (a skip saying why where redis-server or redis-cli is missing)."""
    from tests.redis_cluster import LocalRedisCluster, missing_tools

    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    cluster = LocalRedisCluster(tmp_path_factory.mktemp("redis-cluster"), replicas=1)
    try:
        yield cluster.start()
    finally:
        cluster.stop()  # the nodes started, whether or not they became a cluster


@pytest.fixture
def on_redis_cluster(redis_cluster, amqp_broker, settings):
    """This test's Redis is the cluster (REDIS_CLUSTER, its broker RabbitMQ as a cluster
    requires): a cluster client, every primary emptied before and after."""
    from core.redis import get_redis
    from runs.notify import ENDED_REPORTER

    assert ENDED_REPORTER.flush(5)  # the last test's reports go to the Redis they were for
    redis_cluster.restart_dead()  # a test that failed before restarting what it killed
    redis_cluster.wait_healthy()
    settings.REDIS_URL = redis_cluster.url
    settings.REDIS_CLUSTER = True
    settings.REDIS_CLUSTER_NODES = [("127.0.0.1", port) for port in redis_cluster.ports]
    client = get_redis()
    client.nodes_manager.initialize()
    client.flushdb(target_nodes="primaries")
    yield client
    assert ENDED_REPORTER.flush(5)
    # A test may have failed a primary over: FLUSHDB goes by the client's node list, not by
    # key (no MOVED to correct it), so read the slot map again first.
    client.nodes_manager.initialize()
    client.flushdb(target_nodes="primaries")


# --- RabbitMQ cluster (ADR 0026) ----------------------------------------------------------


@pytest.fixture(scope="session")
def rabbitmq_cluster():
    """Three extra nodes of this machine's rabbitmq-server joined into one cluster for the
    session, on ports of this TEST_REDIS_DB's own (a skip saying why where rabbitmq-server
    or rabbitmqctl is missing); the system node is not touched."""
    from tests.rabbitmq_cluster import LocalRabbitCluster, missing_tools

    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    cluster = LocalRabbitCluster()  # in a temp folder of its own, which the nodes' user reaches
    try:
        yield cluster.start()
    finally:
        cluster.stop()  # the nodes started, whether or not they became a cluster


@pytest.fixture
def amqp_cluster_broker(rabbitmq_cluster, settings):
    """This test's broker is the cluster: CELERY_BROKER_URL lists its three nodes (kombu's
    failover syntax), the run queues are quorum queues, emptied before and after, and a
    node a test killed is started again."""
    from tests.rabbitmq import reset_queues

    rabbitmq_cluster.restart_dead()
    url = rabbitmq_cluster.url()
    settings.CELERY_BROKER_URL = url
    settings.SCHEDULER_AMQP_QUEUE_TYPE = "quorum"
    # emptied through one node's own URL: the fixture does not lean on the list's parsing
    reset_queues(rabbitmq_cluster.node_url(0))
    yield url
    rabbitmq_cluster.restart_dead()
    reset_queues(rabbitmq_cluster.node_url(0))
