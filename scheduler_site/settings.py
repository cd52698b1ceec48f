"""Settings, all read from the environment (see the settings table in README.md).

Development defaults are safe: with DEBUG off (the default) the process refuses to start
with the development secret key, so a forgotten SECRET_KEY cannot reach production.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from core.encryption import SecretKeyError, check_key, derived_dev_key

from .env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

DEV_SECRET_KEY = "dev-insecure-secret-key-do-not-use-in-production"
DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY", DEV_SECRET_KEY)
if not DEBUG and SECRET_KEY == DEV_SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY is the development key: set SECRET_KEY for production, or DEBUG=1 to develop"
    )
# Secrets at rest (secret header values, tenants' signing secrets) are Fernet tokens under
# these keys, newest first (core/encryption.py; rotation: docs/operations.md).
TICKWORK_SECRET_KEYS = env_list("TICKWORK_SECRET_KEYS", [])
if not TICKWORK_SECRET_KEYS:
    if not DEBUG:
        raise ImproperlyConfigured(
            "TICKWORK_SECRET_KEYS is not set: give one or more Fernet keys, newest first, "
            "comma-separated (or DEBUG=1 to develop with a key derived from SECRET_KEY)"
        )
    TICKWORK_SECRET_KEYS = [derived_dev_key(SECRET_KEY)]
for _position, _key in enumerate(TICKWORK_SECRET_KEYS, 1):
    try:
        check_key(_key, _position)
    except SecretKeyError as _exc:
        raise ImproperlyConfigured(str(_exc)) from None
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", ".localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Hosts that are always the public site (admin, API, health, /metrics): provisioning refuses
# them as a tenant's domain, since a tenant holding one would hide the public site behind
# its portal.
SCHEDULER_PUBLIC_HOSTS = [
    host.lower()
    for host in env_list("SCHEDULER_PUBLIC_HOSTS", ["localhost", "127.0.0.1", "[::1]", "::1"])
]

SHARED_APPS = [
    "django_tenants",
    "tenants",
    "beat",
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.admin",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "scheduler_site",
    "portal",
    "django_htmx",
]
TENANT_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "jobs",
    "runs",
    "alerts",
]
INSTALLED_APPS = SHARED_APPS + [app for app in TENANT_APPS if app not in SHARED_APPS]

TENANT_MODEL = "tenants.Tenant"
TENANT_DOMAIN_MODEL = "tenants.Domain"
PUBLIC_SCHEMA_URLCONF = "scheduler_site.urls_public"
ROOT_URLCONF = "scheduler_site.urls_tenant"
# Any host that is not a tenant's domain gets the public site: admin, API, health checks.
SHOW_PUBLIC_IF_NO_TENANT_FOUND = True
# New tenants' schemas are cloned from this schema, migrated once (tenants/schema_template.py,
# ADR 0015); empty: every new tenant's schema is migrated instead. Not a tenant's name:
# those are t_<slug>.
TENANT_TEMPLATE_SCHEMA = env_str("TENANT_TEMPLATE_SCHEMA", "tenant_template")
if TENANT_TEMPLATE_SCHEMA and (
    not re.fullmatch(r"[a-z_][a-z0-9_]{0,50}", TENANT_TEMPLATE_SCHEMA)
    or TENANT_TEMPLATE_SCHEMA.startswith(("t_", "pg_"))
    or TENANT_TEMPLATE_SCHEMA == "public"
):
    raise ImproperlyConfigured(
        f"TENANT_TEMPLATE_SCHEMA={TENANT_TEMPLATE_SCHEMA!r}: use lowercase letters, digits"
        " and _ (at most 51), not starting with t_ (tenant schemas) or pg_, and not public"
    )
# `migrate_schemas --executor=multiprocessing` migrates tenant schemas in this many
# processes, handing each this many schemas at a time (django-tenants' settings).
TENANT_MULTIPROCESSING_MAX_PROCESSES = env_int(
    "TENANT_MIGRATION_PROCESSES", os.cpu_count() or 2, minimum=1
)
TENANT_MULTIPROCESSING_CHUNKS = env_int("TENANT_MIGRATION_CHUNK", 10, minimum=1)
# migrate_schemas hands its executor only the tenant schemas that lack one of the code's
# migrations (tenants/migrate_executor.py): a release that adds no migration visits none.
GET_EXECUTOR_FUNCTION = "tenants.migrate_executor.get_executor"
# Issue `SET search_path` once per schema change (django-tenants resets its cache on every
# set_tenant, rollback and close), not before every query: a round trip per cursor saved.
TENANT_LIMIT_SET_CALLS = True

MIDDLEWARE = [
    "django_tenants.middleware.main.TenantMainMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.middleware.SuspendedTenantMiddleware",
    "scheduler_site.pages.HelpfulNotFoundMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context.nav",
            ],
        },
    },
]

WSGI_APPLICATION = "scheduler_site.wsgi.application"

DATABASE_URL = env_str("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/tickwork")
DB_POOL_MAX_SIZE = env_int("DB_POOL_MAX_SIZE", 0, minimum=0)
_db = dj_database_url.parse(
    DATABASE_URL, conn_max_age=0 if DB_POOL_MAX_SIZE else env_int("DB_CONN_MAX_AGE", 60)
)
# django-tenants' backend; with DB_TRANSACTION_POOLING=1 it keeps each tenant's search_path
# and the timeouts inside every transaction, for a transaction-pooling PgBouncer
# (core/pgbackend/base.py; web and workers only: runscheduler and migrations refuse it).
_db["ENGINE"] = "core.pgbackend"
DB_TRANSACTION_POOLING = env_bool("DB_TRANSACTION_POOLING", False)
if DB_TRANSACTION_POOLING:
    _db["TRANSACTION_POOLING"] = True
    _db["DISABLE_SERVER_SIDE_CURSORS"] = True
# Off (Django's default): a check costs a SELECT 1 per request or task; a connection
# that failed is closed anyway by close_old_connections() before the next one.
_db["CONN_HEALTH_CHECKS"] = env_bool("DB_CONN_HEALTH_CHECKS", False)
# Server-side parameter binding lets psycopg prepare statements that run again and again
# (a worker's claim and finish, the leader's fire): planning them cost ~1 ms each, more
# than executing them. Prepared plans follow search_path changes (PostgreSQL re-plans a
# cached statement when search_path differs), so tenant switching stays correct.
# DB_PREPARE_THRESHOLD=0: no prepared statements (always so with DB_TRANSACTION_POOLING:
# PgBouncer 1.18 keeps no prepared statement across transactions).
if env_int("DB_PREPARE_THRESHOLD", 5, minimum=0) and not DB_TRANSACTION_POOLING:
    _db.setdefault("OPTIONS", {})["server_side_binding"] = True
    _db["OPTIONS"]["prepare_threshold"] = env_int("DB_PREPARE_THRESHOLD", 5, minimum=0)
if DB_POOL_MAX_SIZE:
    # A connection pool per process (psycopg_pool): a worker with hundreds of threads, most
    # of them waiting on I/O, shares a few connections instead of holding one per thread.
    _db.setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DB_POOL_MAX_SIZE,
        "timeout": env_float("DB_POOL_TIMEOUT_SECONDS", 30.0, minimum=1.0),
    }
# Every wait on PostgreSQL is bounded (0 turns one off). Sent as startup options, so they
# hold from the first statement of every connection. A pooler that refuses startup
# options (PgBouncer without ignore_startup_parameters): set all three to 0 and put them
# on the database role instead (ALTER ROLE ... SET statement_timeout = ...). With
# DB_TRANSACTION_POOLING they are not sent at start-up but set in every transaction, and
# one set to 0 is left alone there, so the role's or database's value holds.
DB_STATEMENT_TIMEOUT_SECONDS = env_float("DB_STATEMENT_TIMEOUT_SECONDS", 30.0, minimum=0)
DB_LOCK_TIMEOUT_SECONDS = env_float("DB_LOCK_TIMEOUT_SECONDS", 10.0, minimum=0)
DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS = env_float(
    "DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", 60.0, minimum=0
)
_timeouts = {
    "statement_timeout": DB_STATEMENT_TIMEOUT_SECONDS,
    "lock_timeout": DB_LOCK_TIMEOUT_SECONDS,
    "idle_in_transaction_session_timeout": DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS,
}
if any(_timeouts.values()):
    _db.setdefault("OPTIONS", {})["options"] = " ".join(
        f"-c {name}={int(seconds * 1000)}" for name, seconds in _timeouts.items() if seconds
    )
# Connecting is bounded too: without it libpq waits for the operating system (psycopg's own
# default is 130 s), and a worker or leader reconnecting to a host that vanished held on.
DB_CONNECT_TIMEOUT_SECONDS = env_int("DB_CONNECT_TIMEOUT_SECONDS", 5, minimum=1)
_db.setdefault("OPTIONS", {})["connect_timeout"] = DB_CONNECT_TIMEOUT_SECONDS
_db.setdefault("TEST", {})["NAME"] = env_str("TEST_DATABASE_NAME", f"test_{_db['NAME']}")
DATABASES = {"default": _db}
DATABASE_ROUTERS = ("django_tenants.routers.TenantSyncRouter",)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
# REDIS_URL names one node of a Redis Cluster, which the client discovers from it
# (docs/operations.md "Redis Cluster"): each partition's keys share one hash slot.
REDIS_CLUSTER = env_bool("REDIS_CLUSTER", False)
# More nodes to find the cluster through (`host:port,host:port`), besides REDIS_URL's.
REDIS_CLUSTER_NODES = []
for _node in env_list("REDIS_CLUSTER_NODES", []):
    _host, _, _port = _node.rpartition(":")
    if not _host or not _port.isdigit():
        raise ImproperlyConfigured(f"REDIS_CLUSTER_NODES: {_node!r} is not host:port")
    REDIS_CLUSTER_NODES.append((_host.strip("[]"), int(_port)))  # [::1]:7000 too
# How long a Redis command may wait for its reply. A node that stops answering without
# closing its connections (a frozen primary) holds each command this long; a shorter wait
# shortens that stall (docs/operations.md "Redis Cluster"), but must outlast the longest
# blocking read (the scheduler's BLPOP, a quarter of SCHEDULER_LEASE_SECONDS) and the
# largest pipeline (the index rebuild's).
REDIS_SOCKET_TIMEOUT_SECONDS = env_float("REDIS_SOCKET_TIMEOUT_SECONDS", 10.0, minimum=1.0)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / ".data" / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve static files straight from the app folders in development, so `collectstatic`
# is only a production step.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)

# One event per line (core/logs.py): readable text by default, JSON with LOG_FORMAT=json.
LOG_FORMAT = env_str("LOG_FORMAT", "text").strip().lower()
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r}: expected text or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"()": "core.logs.TextFormatter"},
        "json": {"()": "core.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # A standby polls the lease several times a second; each miss is not news.
        "redis_lock": {"level": "ERROR"},
    },
}

# --- metrics (docs/operations.md#metrics, ADR 0013) ----------------------------------------
# /metrics on the public host; with a token set, only `Authorization: Bearer <token>` reads it.
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
# The `tenant` label: `all` (each tenant's slug), `none` (every tenant as `all`), or a
# comma-separated list of slugs that keep their own series (the others are `other`).
METRICS_TENANTS = env_list("METRICS_TENANTS", ["all"])
# Set in the environment before any process starts (prometheus_client reads it at import):
# the directory where gunicorn workers and Celery's pool children write their metrics.
PROMETHEUS_MULTIPROC_DIR = env_str("PROMETHEUS_MULTIPROC_DIR", "")
if PROMETHEUS_MULTIPROC_DIR and not Path(PROMETHEUS_MULTIPROC_DIR).is_dir():
    raise ImproperlyConfigured(
        f"PROMETHEUS_MULTIPROC_DIR={PROMETHEUS_MULTIPROC_DIR!r} is not a directory: create "
        "it (empty) before starting the host's processes"
    )
# `host:port` where a Celery worker's main process serves its host's metrics (for worker
# hosts without a web process); empty: off.
WORKER_METRICS_BIND = env_str("WORKER_METRICS_BIND", "")
# The facts /metrics reads from PostgreSQL and Redis (backlog, DLQ, queues) are refreshed by
# one web process for all, in the background, once they are this old; each statement of a
# refresh is bounded by METRICS_STATEMENT_TIMEOUT_SECONDS.
METRICS_CACHE_SECONDS = env_float("METRICS_CACHE_SECONDS", 5.0, minimum=0)
METRICS_STATEMENT_TIMEOUT_SECONDS = env_float("METRICS_STATEMENT_TIMEOUT_SECONDS", 2.0, minimum=0.1)

# --- the scheduler ------------------------------------------------------------------------
SCHEDULER_MIN_INTERVAL_SECONDS = env_int("SCHEDULER_MIN_INTERVAL_SECONDS", 60, minimum=1)
SCHEDULER_LOOKAHEAD_SECONDS = env_float("SCHEDULER_LOOKAHEAD_SECONDS", 30.0, minimum=1.0)
# Once the leader takes a job up (its next slot inside the lookahead), it prepares the job's
# slots this much further too: a job firing every few seconds then costs its tenant's
# schema one visit per this many seconds instead of one per slot. At most an hour: the
# leader holds every run prepared ahead in memory, and a takeover reads them all again.
SCHEDULER_LOOKAHEAD_EXTRA_SECONDS = env_float("SCHEDULER_LOOKAHEAD_EXTRA_SECONDS", 30.0, minimum=0)
if SCHEDULER_LOOKAHEAD_EXTRA_SECONDS > 3600:
    raise ImproperlyConfigured(
        f"SCHEDULER_LOOKAHEAD_EXTRA_SECONDS={SCHEDULER_LOOKAHEAD_EXTRA_SECONDS}: at most 3600"
    )
# Whole seconds: the Redis lock expires in whole seconds (python-redis-lock), and the
# database bounds derived from this value must agree with it.
SCHEDULER_LEASE_SECONDS = env_int("SCHEDULER_LEASE_SECONDS", 2, minimum=1)
if REDIS_SOCKET_TIMEOUT_SECONDS <= SCHEDULER_LEASE_SECONDS / 4 + 0.5:
    raise ImproperlyConfigured(
        f"REDIS_SOCKET_TIMEOUT_SECONDS={REDIS_SOCKET_TIMEOUT_SECONDS:g} must exceed a quarter"
        f" of SCHEDULER_LEASE_SECONDS plus 0.5 s ({SCHEDULER_LEASE_SECONDS / 4 + 0.5:g}):"
        " the scheduler waits that long in one blocking read"
    )
SCHEDULER_SHARD_COUNT = env_int("SCHEDULER_SHARD_COUNT", 4, minimum=1)
# Partitions of the tenants, each led by one runscheduler process at a time with its own
# lease and epoch (docs/adr/0020); every process (web, worker, scheduler) must agree on it.
SCHEDULER_PARTITIONS = env_int("SCHEDULER_PARTITIONS", 1, minimum=1)
if SCHEDULER_PARTITIONS > 128:  # core.partitions.MAX_PARTITIONS
    raise ImproperlyConfigured(f"SCHEDULER_PARTITIONS={SCHEDULER_PARTITIONS}: at most 128")
SCHEDULER_CLOCK_SKEW_WARN_SECONDS = env_float("SCHEDULER_CLOCK_SKEW_WARN_SECONDS", 1.0)
SCHEDULER_RELAY_INTERVAL_SECONDS = env_float("SCHEDULER_RELAY_INTERVAL_SECONDS", 10.0, minimum=1)
SCHEDULER_MATERIALISE_BATCH = env_int("SCHEDULER_MATERIALISE_BATCH", 5000, minimum=1)
SCHEDULER_MISFIRE_MAX_RUNS = env_int("SCHEDULER_MISFIRE_MAX_RUNS", 100, minimum=1)
SCHEDULER_MISFIRE_MAX_AGE_SECONDS = env_int("SCHEDULER_MISFIRE_MAX_AGE_SECONDS", 86400, minimum=60)
SCHEDULER_MAX_JOBS_PER_TENANT = env_int("SCHEDULER_MAX_JOBS_PER_TENANT", 100_000, minimum=1)
SCHEDULER_REDIS_PREFIX = env_str("SCHEDULER_REDIS_PREFIX", "tw")
# The leader's own, tighter bounds (its lease is SCHEDULER_LEASE_SECONDS): a lock it waits
# for, one statement, and a transaction left open by a frozen leader, which PostgreSQL then
# ends so that the next leader's epoch bump is not held up.
SCHEDULER_DB_LOCK_TIMEOUT_SECONDS = env_float(
    "SCHEDULER_DB_LOCK_TIMEOUT_SECONDS", SCHEDULER_LEASE_SECONDS / 2, minimum=0.05
)
# A fire transaction admits the due runs of up to 50 tenants at once: a row one tenant's
# run is locked by (a psql session, a stuck request) must cost that tenant alone, so fire
# waits this long for a lock, then puts the tenant's runs back for its back-off.
SCHEDULER_FIRE_LOCK_TIMEOUT_SECONDS = env_float(
    "SCHEDULER_FIRE_LOCK_TIMEOUT_SECONDS", 0.1, minimum=0.01
)
# Fair admission (ADR 0011): due runs wait in the leader's fair queue while their tenant is
# at its max_concurrency or the broker holds BACKLOG_PER_SLOT messages per live worker slot
# (at least BACKLOG_MIN); 0 turns it off (every due run is published at once, FIFO).
SCHEDULER_FAIR_ADMISSION = env_bool("SCHEDULER_FAIR_ADMISSION", True)
SCHEDULER_ADMISSION_BACKLOG_PER_SLOT = env_float(
    "SCHEDULER_ADMISSION_BACKLOG_PER_SLOT", 2.0, minimum=0.1
)
SCHEDULER_ADMISSION_BACKLOG_MIN = env_int("SCHEDULER_ADMISSION_BACKLOG_MIN", 20, minimum=1)
SCHEDULER_INFLIGHT_RECOUNT_SECONDS = env_float(
    "SCHEDULER_INFLIGHT_RECOUNT_SECONDS", 5.0, minimum=0.1
)
# What a new tenant gets unless provision_tenant says otherwise.
SCHEDULER_TENANT_DEFAULT_MAX_CONCURRENCY = env_int(
    "SCHEDULER_TENANT_DEFAULT_MAX_CONCURRENCY", 100, minimum=1
)
SCHEDULER_TENANT_DEFAULT_WEIGHT = env_int("SCHEDULER_TENANT_DEFAULT_WEIGHT", 1, minimum=1)
# Run history (beat/retention.py): ended runs older than this many days are deleted by the
# leader, unless the tenant has its own `run_retention_days`; 0 keeps history for ever.
RUN_RETENTION_DAYS = env_int("RUN_RETENTION_DAYS", 30, minimum=0)
if RUN_RETENTION_DAYS > 3650:
    raise ImproperlyConfigured(f"RUN_RETENTION_DAYS={RUN_RETENTION_DAYS}: at most 3650 (or 0: off)")
RUN_RETENTION_BATCH = env_int("RUN_RETENTION_BATCH", 5000, minimum=1)  # runs per transaction
RUN_RETENTION_INTERVAL_SECONDS = env_float("RUN_RETENTION_INTERVAL_SECONDS", 300.0, minimum=1)
SCHEDULER_DB_STATEMENT_TIMEOUT_SECONDS = env_float(
    "SCHEDULER_DB_STATEMENT_TIMEOUT_SECONDS", 10.0, minimum=0.5
)
SCHEDULER_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS = env_float(
    "SCHEDULER_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS",
    max(SCHEDULER_LEASE_SECONDS, 1.0),
    minimum=0.5,
)
# How long a new leader waits for the previous one's fenced transactions before ending
# their sessions (a frozen leader must not hold up the takeover).
SCHEDULER_TAKEOVER_LOCK_WAIT_SECONDS = env_float(
    "SCHEDULER_TAKEOVER_LOCK_WAIT_SECONDS", 0.5, minimum=0.05
)

# --- alerts (docs/alerts.md) -------------------------------------------------------------
# How often the leader evaluates the alert conditions of every tenant with a channel, and how
# far back each pass reads again (attempts a worker committed late are not missed).
ALERTS_EVALUATE_SECONDS = env_float("ALERTS_EVALUATE_SECONDS", 5.0, minimum=0.1)
ALERTS_OVERLAP_SECONDS = env_float("ALERTS_OVERLAP_SECONDS", 30.0, minimum=0)
# Delivery: attempts per notification, the backoff between them, each call's bound, and the
# claim's lease (a sender that crashed mid-send is retried once it expires).
ALERTS_DELIVERY_MAX_ATTEMPTS = env_int("ALERTS_DELIVERY_MAX_ATTEMPTS", 8, minimum=1)
ALERTS_DELIVERY_BACKOFF_SECONDS = env_float("ALERTS_DELIVERY_BACKOFF_SECONDS", 10.0, minimum=0)
ALERTS_DELIVERY_BACKOFF_MAX_SECONDS = env_float(
    "ALERTS_DELIVERY_BACKOFF_MAX_SECONDS", 3600.0, minimum=0
)
ALERTS_HTTP_TIMEOUT_SECONDS = env_float("ALERTS_HTTP_TIMEOUT_SECONDS", 10.0, minimum=0.1)
ALERTS_DELIVERY_LEASE_SECONDS = env_float(
    "ALERTS_DELIVERY_LEASE_SECONDS", max(60.0, 3 * ALERTS_HTTP_TIMEOUT_SECONDS), minimum=1
)
# Email channels go through Django's mail backend.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10.0, minimum=0.1)
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", "") or None
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "tickwork@localhost")

# --- Celery ------------------------------------------------------------------------------
from core.amqp_urls import amqp_nodes, is_amqp_url, split_urls  # noqa: E402 (beside its use)

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
if CELERY_BROKER_URL != REDIS_URL and not is_amqp_url(CELERY_BROKER_URL):
    # The leader pushes pre-built messages onto REDIS_URL's lists (ADR 0003) or publishes
    # them to RabbitMQ (ADR 0019): workers listening on another broker would never see a run.
    raise ImproperlyConfigured(
        "CELERY_BROKER_URL must be REDIS_URL (or unset) or a RabbitMQ URL (amqp://...):"
        " the scheduler publishes runs to one of those, and another broker (another Redis,"
        " SQS, ...) is not supported"
    )
if is_amqp_url(CELERY_BROKER_URL):
    # One URL or a cluster's nodes, `;`-separated (ADR 0026): every element is checked
    # here, not when the leader first fails over to it.
    try:
        _amqp_nodes = amqp_nodes(CELERY_BROKER_URL)
    except ValueError as error:
        raise ImproperlyConfigured(f"CELERY_BROKER_URL: {error}") from None
    # kombu does not strip the elements (" amqp://h2//" would be a URL without a host):
    # the workers get the list as the leader reads it.
    CELERY_BROKER_URL = ";".join(split_urls(CELERY_BROKER_URL))
# RabbitMQ run queues: `classic` priority queues on one node, `quorum` (replicated, served
# while a majority of a cluster's nodes is up; no priorities on RabbitMQ 3.x) on a cluster.
SCHEDULER_AMQP_QUEUE_TYPE = env_str("SCHEDULER_AMQP_QUEUE_TYPE", "classic")
if SCHEDULER_AMQP_QUEUE_TYPE not in ("classic", "quorum"):
    raise ImproperlyConfigured(
        f"SCHEDULER_AMQP_QUEUE_TYPE={SCHEDULER_AMQP_QUEUE_TYPE!r}: classic or quorum"
    )
if (
    is_amqp_url(CELERY_BROKER_URL)
    and len(_amqp_nodes) > 1
    and SCHEDULER_AMQP_QUEUE_TYPE != "quorum"
):
    # A classic queue lives on one node; once it dies the queue cannot even be declared
    # through another (ADR 0026), and the leader would publish to no shard at all.
    raise ImproperlyConfigured(
        "CELERY_BROKER_URL lists several RabbitMQ nodes: set SCHEDULER_AMQP_QUEUE_TYPE=quorum"
        " (classic run queues stop every shard's publishing when one node dies)"
    )
if REDIS_CLUSTER and not is_amqp_url(CELERY_BROKER_URL):
    # Celery's Redis transport (kombu) talks to one Redis server, not to a cluster.
    raise ImproperlyConfigured(
        "REDIS_CLUSTER=1 needs CELERY_BROKER_URL=amqp://... (RabbitMQ): Celery's Redis"
        " transport does not run on a Redis Cluster"
    )
if REDIS_CLUSTER and urlsplit(REDIS_URL).path.strip("/") not in ("", "0"):
    raise ImproperlyConfigured(
        f"REDIS_URL={REDIS_URL!r}: a Redis Cluster has database 0 only (drop the /<db>)"
    )
# RabbitMQ (ADR 0019): the bound on the leader's connect, each read and write, and the wait
# for a chunk's publisher confirms; also the bound on the depth reads (admission, metrics).
SCHEDULER_AMQP_TIMEOUT_SECONDS = env_float("SCHEDULER_AMQP_TIMEOUT_SECONDS", 5.0, minimum=0.1)
# RabbitMQ: the heartbeat the leader's publishing connection negotiates (0: none). With it,
# a connection whose far end went silent while something still holds the TCP connection (a
# frozen node, a proxy forwarding nothing) is found dead between fires (two intervals
# without a frame from the broker) instead of by the next fire's confirm timeout, and the
# broker closes the connections of a leader that vanished.
SCHEDULER_AMQP_HEARTBEAT_SECONDS = env_int("SCHEDULER_AMQP_HEARTBEAT_SECONDS", 60, minimum=0)
if not (SCHEDULER_AMQP_HEARTBEAT_SECONDS == 0 or 5 <= SCHEDULER_AMQP_HEARTBEAT_SECONDS <= 3600):
    # Below 5 s a busy or briefly paused leader is declared dead by RabbitMQ; the protocol's
    # field is 16 bits, and an hour is past any use.
    raise ImproperlyConfigured(
        f"SCHEDULER_AMQP_HEARTBEAT_SECONDS={SCHEDULER_AMQP_HEARTBEAT_SECONDS}:"
        " 0 (no heartbeats) or 5 to 3600"
    )
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery's Django fixup closes database connections around every task unless this is set;
# scheduler_site/celery.py recycles them the way Django does around requests instead.
CELERY_DB_REUSE_MAX = 1_000_000_000
SCHEDULER_VISIBILITY_TIMEOUT_SECONDS = env_int(
    "SCHEDULER_VISIBILITY_TIMEOUT_SECONDS", 300, minimum=10
)
# The broker re-delivers an unacknowledged message after this long; it must exceed the
# scheduler's own visibility timeout so that the reaper, not the broker, decides retries.
CELERY_BROKER_VISIBILITY_TIMEOUT = SCHEDULER_VISIBILITY_TIMEOUT_SECONDS * 2
SCHEDULER_TASK_MODULES = env_list("SCHEDULER_TASK_MODULES", [])
SCHEDULER_MAX_PAYLOAD_BYTES = env_int("SCHEDULER_MAX_PAYLOAD_BYTES", 65536, minimum=1024)
SCHEDULER_MAX_HEADERS_BYTES = env_int("SCHEDULER_MAX_HEADERS_BYTES", 8192, minimum=256)
SCHEDULER_HTTP_ALLOW_NETWORKS = env_list("SCHEDULER_HTTP_ALLOW_NETWORKS", [])
SCHEDULER_MAX_BACKFILL_RUNS = env_int("SCHEDULER_MAX_BACKFILL_RUNS", 1000, minimum=1)
# A dependency graph (the jobs connected to one another through depends_on, in either
# direction) stays within these: jobs, dependencies, and dependencies on its longest chain.
SCHEDULER_DAG_MAX_NODES = env_int("SCHEDULER_DAG_MAX_NODES", 2000, minimum=2)
SCHEDULER_DAG_MAX_EDGES = env_int("SCHEDULER_DAG_MAX_EDGES", 10_000, minimum=1)
SCHEDULER_DAG_MAX_DEPTH = env_int("SCHEDULER_DAG_MAX_DEPTH", 1000, minimum=1)
SCHEDULER_HEARTBEAT_SECONDS = env_float("SCHEDULER_HEARTBEAT_SECONDS", 10.0, minimum=0.1)
SCHEDULER_HTTP_MAX_RESPONSE_BYTES = env_int(
    "SCHEDULER_HTTP_MAX_RESPONSE_BYTES", 1 << 20, minimum=1024
)
# How a worker process executes HTTP targets: `sync` in the pool's own slot (one slot per
# run in flight), or `async`: handed to the process's asyncio executor, which holds up to
# TICKWORK_HTTP_MAX_INFLIGHT requests at once (runs/http_executor.py, ADR 0018).
TICKWORK_HTTP_EXECUTION = env_str("TICKWORK_HTTP_EXECUTION", "sync").strip().lower()
if TICKWORK_HTTP_EXECUTION not in ("sync", "async"):
    raise ImproperlyConfigured(
        f"TICKWORK_HTTP_EXECUTION={TICKWORK_HTTP_EXECUTION!r}: expected sync or async"
    )
TICKWORK_HTTP_MAX_INFLIGHT = env_int("TICKWORK_HTTP_MAX_INFLIGHT", 10_000, minimum=1)
# How long a rotated-out signing secret keeps signing beside the new one (by default; a
# rotation may name its own overlap).
SCHEDULER_SIGNING_SECRET_OVERLAP_SECONDS = env_int(
    "SCHEDULER_SIGNING_SECRET_OVERLAP_SECONDS", 86400, minimum=0
)

# --- REST API (issue 5) ---------------------------------------------------------------------
SCHEDULER_API_MAX_BODY_BYTES = env_int("SCHEDULER_API_MAX_BODY_BYTES", 1_048_576, minimum=1024)
SCHEDULER_MANUAL_TRIGGERS_PER_MINUTE = env_int(
    "SCHEDULER_MANUAL_TRIGGERS_PER_MINUTE", 60, minimum=1
)
SCHEDULER_API_PAGE_SIZE = env_int("SCHEDULER_API_PAGE_SIZE", 50, minimum=1)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "scheduler_site.api.authentication.BearerTokenAuthentication",
        "scheduler_site.api.authentication.TenantSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["scheduler_site.api.parsers.CappedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "scheduler_site.api.schema.ApiAutoSchema",
    "DEFAULT_METADATA_CLASS": None,  # no OPTIONS introspection: the schema is /api/v1/openapi.json
    "EXCEPTION_HANDLER": "scheduler_site.api.problems.problem_exception_handler",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Tickwork API",
    "DESCRIPTION": (
        "Jobs, runs, DAG runs, the dead-letter queue, exclusion calendars and schedule "
        "previews of one tenant.\n\n"
        "**Authentication:** `Authorization: Bearer <token>` (tokens start with `tw_`; the "
        "token selects the tenant). Press *Authorize* to try the operations here.\n\n"
        "**Errors** are `application/problem+json` (RFC 9457): `type`, `title`, `status`, "
        "`detail`, and for invalid input `errors`, which names each field (nested ones "
        "dotted: `schedule.cron`, `jobs.517.name`).\n\n"
        "**Lists** return `{next, results}`: follow `next` until it is null.\n\n"
        "**Request bodies** are strict: an unknown key, or a value of another JSON type, is "
        "a 400. Strings must be valid Unicode without NUL characters. A few rules are "
        "beyond what this schema can state (the fields of a cron expression, an `end` "
        "after its `start`, calendars and upstream jobs that exist): those are 400s too, "
        "naming the field.\n\n"
        "The full guide, with every rule and limit: [the API guide](/api/v1/guide); "
        "schedules and their DST rules: [schedules](/api/v1/guide/schedules)."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Ids beyond PostgreSQL's bigint do not match the route (404), so the schema says so.
    "PATH_CONVERTER_OVERRIDES": {
        "job_id": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 2**63 - 1},
    },
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "scheduler_site.api.schema.strict_request_bodies",
        "scheduler_site.api.schema.front_server_limits",
        "scheduler_site.api.schema.registered_tasks",
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"persistAuthorization": True},
    "ENUM_GENERATE_CHOICE_DESCRIPTION": False,
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "runs.states.ALL",
        "DagRunStatusEnum": "runs.states.DAG_STATUSES",
        "AlertChannelKindEnum": "alerts.states.CHANNEL_KINDS",
        "AlertIncidentKindEnum": "alerts.states.KINDS",
        "AlertEventEnum": "alerts.states.EVENTS",
        "AlertDeliveryStateEnum": "alerts.states.DELIVERY_STATES",
        "SkipReasonEnum": [
            "",
            "overlap",
            "misfire",
            "dst",
            "paused",
            "upstream_failed",
            "excluded",
        ],
        "HttpTargetTypeEnum": ["http"],
        "TaskTargetTypeEnum": ["task"],
    },
}
