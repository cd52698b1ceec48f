"""Gauges that are facts of PostgreSQL and Redis, read when /metrics is scraped rather than
pushed: the due backlog, the DLQ, heartbeat age, queue depths, the leader and its admission
queue. They are right whichever process leads and whatever restarted.

A refresh reads every tenant schema: one UNION ALL statement per 100 tenants (on the runs
and jobs tables' partial indexes), each bounded by `METRICS_STATEMENT_TIMEOUT_SECONDS`; a
source that cannot be read is reported (`tickwork_metrics_source_up{source} 0`), never
waited for. The result is shared by every web process through Redis and refreshed in the
background at most every `METRICS_CACHE_SECONDS` (see `FactsCollector`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, connection
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.samples import Sample
from psycopg import sql

from beat.lease import current_epoch
from beat.status import merged_admission, overdue_query, partition_views
from core.broker import broker_queue_names, is_amqp, queue_depths
from core.clock import SystemClock
from core.keys import (
    metrics_facts_key,
    schedulers_key,
    workers_key,
)
from core.metrics import tenant_label
from core.redis import REDIS_ERRORS, get_redis
from core.sql import table
from runs.status_sql import STATUS

SCHEMAS_PER_STATEMENT = 100
CLOCK = SystemClock()
log = logging.getLogger("scheduler_site.metrics")


def _gauge(name: str, help_text: str, value: float | None, **labels: str) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=list(labels))
    if value is not None:
        family.add_metric(list(labels.values()), float(value))
    return family


def _per_tenant(name: str, help_text: str, values: dict[str, float], *, combine=sum) -> Metric:
    """One sample per tenant label (`METRICS_TENANTS`), slugs sharing a label combined."""
    grouped: dict[str, list[float]] = defaultdict(list)
    for slug, value in values.items():
        grouped[tenant_label(slug)].append(value)
    family = GaugeMetricFamily(name, help_text, labels=["tenant"])
    for label, items in sorted(grouped.items()):
        family.add_metric([label], float(combine(items)))
    return family


@contextlib.contextmanager
def bounded_statements(seconds: float) -> Iterator[None]:
    """This connection's statements end after `seconds` until the block ends."""
    if connection.transaction_pooling:
        with connection.statement_timeout_for_block(seconds):
            yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        previous = cursor.fetchone()[0]
        cursor.execute(
            "SELECT set_config('statement_timeout', %s, false)", [f"{seconds * 1000:.0f}"]
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('statement_timeout', %s, false)", [previous])


# --- PostgreSQL ------------------------------------------------------------------------------


def _tenants() -> list[tuple[int, str, str, bool]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, slug, schema_name, suspended_at IS NOT NULL FROM public.tenants_tenant"
            " WHERE schema_name <> 'public' ORDER BY id"
        )
        return cursor.fetchall()


_RUNS_SQL = (
    "SELECT (SELECT count(*) FROM {runs} WHERE status = {dead}),"
    " (SELECT count(*) FROM {runs} WHERE status = {running}),"
    " (SELECT extract(epoch FROM now() - min(heartbeat_at)) FROM {runs} WHERE status = {running})"
)


def _schema_query(slug: str, schema: str) -> sql.Composed:
    """One row of a schema: its slug, the overdue figures (beat/status.py, the same as
    `scheduler_status`), then dead runs, running runs and the oldest heartbeat's age."""
    return sql.SQL("(SELECT {slug}::text, o.*, r.* FROM ({overdue}) o, ({runs}) r)").format(
        slug=sql.Literal(slug),
        overdue=overdue_query(schema),
        runs=sql.SQL(_RUNS_SQL).format(runs=table(schema, "runs_run"), **STATUS),
    )


def schema_rows(tenants: list[tuple], now, *, prepared: bool = False) -> dict[str, tuple]:
    """Per tenant slug: (due runs, oldest due run, due jobs, first next_run_at, dead runs,
    running runs, oldest heartbeat age), a statement per SCHEMAS_PER_STATEMENT tenants. A
    statement that fails for a broken schema is done again one schema at a time (that
    tenant is left out: `tickwork_unreadable_schemas`); a timeout is not retried."""
    out: dict[str, tuple] = {}
    for start in range(0, len(tenants), SCHEMAS_PER_STATEMENT):
        chunk = tenants[start : start + SCHEMAS_PER_STATEMENT]
        query = sql.SQL(" UNION ALL ").join(_schema_query(t[1], t[2]) for t in chunk)
        try:
            with connection.cursor() as cursor:
                _execute(cursor, query, [now, now, now] * len(chunk), prepared)
                rows = cursor.fetchall()
        except DatabaseError as exc:
            if _is_timeout(exc) or len(chunk) == 1:
                raise
            rows = []
            for one in chunk:
                with contextlib.suppress(DatabaseError):
                    rows += [(slug, *r) for slug, r in schema_rows([one], now).items()]
        for slug, *values in rows:
            out[slug] = tuple(values)
    return out


def _can_prepare() -> bool:
    """Not behind a transaction-pooling PgBouncer (DB_PREPARE_THRESHOLD=0)."""
    return bool(connection.settings_dict.get("OPTIONS", {}).get("server_side_binding"))


def _execute(cursor, query, params: list, prepared: bool) -> None:
    """`prepared`: on the refresher's long-lived connection, the statement is prepared and
    its plan kept (planning one statement of 100 schemas costs about five times running it)."""
    if prepared and _can_prepare():
        cursor.cursor.execute(query, params, prepare=True)  # psycopg's own cursor
    else:
        cursor.execute(query, params)


def generic_plans() -> None:
    """The refresher's session keeps one plan per prepared statement: the statements only
    differ by the instant they compare with, and a plan per instant would be planned
    anew at each refresh (PostgreSQL's default when the first custom plans look cheaper).
    Measured with 2,000 tenants: 0.6 ms a tenant once planned, 5 ms while planning."""
    if _can_prepare():
        with connection.cursor() as cursor:
            cursor.execute("SET plan_cache_mode = force_generic_plan")


def _is_timeout(exc: BaseException) -> bool:
    return getattr(exc.__cause__, "sqlstate", None) == "57014"  # query_canceled


def database_facts(*, prepared: bool = False) -> list[Metric]:
    now = CLOCK.now()
    tenants = _tenants()
    epoch = current_epoch()
    rows = schema_rows(tenants, now, prepared=prepared)
    served = {slug for _id, slug, _schema, suspended in tenants if not suspended}
    due = [r for slug, r in rows.items() if slug in served]  # the leader skips suspended ones
    oldest = [r[1] for r in due if r[1] is not None] + [r[3] for r in due if r[2] and r[3]]
    ages = [float(r[6]) for r in rows.values() if r[6] is not None]
    return [
        _gauge(
            "tickwork_leader_epoch",
            "The fencing epoch of the last lease taken.",
            epoch[0] if epoch else 0,
        ),
        _gauge("tickwork_tenants", "Tenants provisioned (suspended ones included).", len(tenants)),
        _gauge(
            "tickwork_due_backlog_runs",
            "Runs past their due time and not yet published "
            "(waiting for admission included), counted from PostgreSQL.",
            sum(r[0] for r in due),
        ),
        _gauge(
            "tickwork_due_backlog_jobs",
            "Schedulable jobs whose next slot passed without "
            "being materialised, counted from PostgreSQL.",
            sum(r[2] for r in due),
        ),
        _gauge(
            "tickwork_due_backlog_oldest_seconds",
            "How late the oldest due-but-unfired run or unmaterialised slot is (0 when none).",
            max((now - t).total_seconds() for t in oldest) if oldest else 0.0,
        ),
        _gauge(
            "tickwork_unreadable_schemas",
            "Tenant schemas whose figures could not be read.",
            len(tenants) - len(rows),
        ),
        _per_tenant(
            "tickwork_dlq_runs",
            "Runs in the dead-letter queue (tenants with none are left out).",
            {slug: r[4] for slug, r in rows.items() if r[4]},
        ),
        _gauge(
            "tickwork_running_runs",
            "Runs a worker is executing now.",
            sum(r[5] for r in rows.values()),
        ),
        _gauge(
            "tickwork_heartbeat_age_seconds",
            "The oldest heartbeat of a running run: reaped "
            "past SCHEDULER_VISIBILITY_TIMEOUT_SECONDS (0 when nothing runs).",
            max(ages) if ages else 0.0,
        ),
        _gauge(
            "tickwork_visibility_timeout_seconds",
            "SCHEDULER_VISIBILITY_TIMEOUT_SECONDS, to compare the heartbeat age with.",
            settings.SCHEDULER_VISIBILITY_TIMEOUT_SECONDS,
        ),
    ]


# --- Redis -----------------------------------------------------------------------------------


def _depth_family(depths: dict[str, int]) -> Metric:
    depth = GaugeMetricFamily(
        "tickwork_queue_depth",
        "Messages waiting in each run queue of the broker.",
        labels=["queue"],
    )
    for name, length in depths.items():
        depth.add_metric([name], length)
    return depth


def broker_facts() -> list[Metric]:
    """RabbitMQ's run queue depths (passive declarations, bounded): a source of its own, so
    that a broker away costs the depths, not the Redis facts."""
    return [_depth_family(queue_depths(get_redis()))]


def redis_facts(slugs: dict[int, str]) -> list[Metric]:
    client = get_redis()
    amqp = is_amqp()
    queues = broker_queue_names()
    pipe = client.pipeline(transaction=False)
    if not amqp:
        for name in queues:
            pipe.llen(name)
    pipe.zrangebyscore(workers_key(), time.time(), "+inf")
    pipe.zcount(schedulers_key(), time.time(), "+inf")
    results = pipe.execute()
    depths = results[: len(queues)] if not amqp else []
    workers, schedulers = results[len(depths) :]
    parts = partition_views(client)
    count = len(parts)
    led = sum(1 for p in parts if p["leader"])
    admission = merged_admission(parts)
    faults = [f for p in parts for f in p["failing_tenants"]]
    index_size = sum(p["index_size"] for p in parts)
    runs_index = sum(p["runs_index_size"] for p in parts)
    rebuilding = any(p["index_rebuilding"] for p in parts)
    slots = sum(_slots(member) for member in workers)
    return [
        *([] if amqp else [_depth_family(dict(zip(queues, depths, strict=True)))]),
        _gauge(
            "tickwork_leader_up",
            "1 while every partition's lease is held by a scheduler (one, by default).",
            int(led == count),
        ),
        _gauge(
            "tickwork_partitions_led",
            "Partitions whose lease a scheduler holds (of SCHEDULER_PARTITIONS).",
            led,
        ),
        _gauge(
            "tickwork_schedulers",
            "Live runscheduler processes, the leader and its standbys.",
            schedulers,
        ),
        _gauge(
            "tickwork_failing_tenants",
            "Tenants the leader skips now after failures.",
            len(faults),
        ),
        _gauge("tickwork_workers", "Live Celery worker processes (registered).", len(workers)),
        _gauge("tickwork_worker_slots", "Run slots of the live workers.", slots),
        _gauge("tickwork_index_jobs", "Jobs in the time index.", index_size),
        _gauge(
            "tickwork_index_runs", "Runs in the runs index (manual, retries, replays).", runs_index
        ),
        _gauge(
            "tickwork_index_rebuilding", "1 while the time index is being rebuilt.", int(rebuilding)
        ),
        *admission_facts(admission, slugs),
    ]


def _slots(member: bytes) -> int:
    try:
        return int(member.decode().rsplit(":", 1)[1])
    except (ValueError, IndexError):
        return 0


def admission_facts(stats: dict | None, slugs: dict[int, str]) -> list[Metric]:
    """The leader's fair queue as it published it (at most a minute old; none without a
    leader): runs waiting per tenant, the oldest wait, runs in flight, the broker's room."""
    tenants = (stats or {}).get("tenants", {})
    by_slug = {slugs.get(int(t), f"id-{t}"): v for t, v in tenants.items()}
    room = (stats or {}).get("room")
    return [
        _per_tenant(
            "tickwork_admission_waiting_runs",
            "Due runs waiting in the leader's fair "
            "queue (their tenant at max_concurrency, or the broker full).",
            {s: v["waiting"] for s, v in by_slug.items() if v["waiting"]},
        ),
        _per_tenant(
            "tickwork_admission_oldest_wait_seconds",
            "How long the oldest run waiting for admission has waited.",
            {s: v["oldest_wait_seconds"] for s, v in by_slug.items() if v["waiting"]},
            combine=max,
        ),
        _per_tenant(
            "tickwork_admission_in_flight_runs",
            "Runs the leader counts in flight "
            "(queued or running) against the tenant's max_concurrency.",
            {s: v["in_flight"] for s, v in by_slug.items() if v["in_flight"]},
        ),
        _gauge(
            "tickwork_admission_broker_room",
            "Messages the broker may still take before the watermark (absent without a leader).",
            room,
        ),
    ]


# --- the collector ---------------------------------------------------------------------------

REFRESH_LOCK_SECONDS = 300  # a refresh that never ends lets another process try after this
KEEP_SECONDS = 3600  # old facts are still served (with their age) while none newer exist
IDLE_CLOSE_SECONDS = 60.0  # the refresher's connection goes after this long without a refresh


@dataclass
class Cached:
    at: float
    families: list[Metric]


class FactsCollector:
    """A prometheus_client collector whose facts are shared by every web process through
    Redis: the scrape that finds them older than METRICS_CACHE_SECONDS takes a lock and
    has them refreshed by this process's refresher thread, and every scrape answers at once
    with the latest (`tickwork_metrics_facts_age_seconds` says how old). With thousands of
    tenants a refresh takes seconds; a scrape never waits for it, and the database pays for
    one refresh per interval, not one per scrape per process."""

    def __init__(self) -> None:
        self._generation = 0  # bumped by clear(): a refresh begun before is not stored
        self._refresher = Refresher(self)
        self.last_refresh: threading.Event | None = None  # set when the refresh asked ends

    def clear(self) -> None:
        """Forget the shared facts (tests): the next scrape computes them anew."""
        self._generation += 1
        with contextlib.suppress(*REDIS_ERRORS):
            get_redis().delete(metrics_facts_key(), _lock_key())

    def collect(self) -> list[Metric]:
        client = get_redis()
        try:
            cached = _load(client.get(metrics_facts_key()))
        except REDIS_ERRORS:
            return compute()  # no shared cache: computed here, bounded
        age = time.time() - cached.at if cached else float("inf")
        if age >= settings.METRICS_CACHE_SECONDS and _claim(client):
            if cached is None:  # nothing to serve yet: compute it now
                cached = self.refresh(client, self._generation)
            else:
                self.last_refresh = self._refresher.ask(client, self._generation)
        elif cached is None:  # another process computes the first facts: not stored here
            cached = Cached(time.time(), compute())
        age = max(time.time() - cached.at, 0.0)
        return [
            *cached.families,
            _gauge(
                "tickwork_metrics_facts_age_seconds",
                "How old the facts of PostgreSQL and Redis in this scrape are (one web process "
                "refreshes them for all every METRICS_CACHE_SECONDS).",
                age,
            ),
        ]

    def refresh(self, client, generation: int, *, prepared: bool = False) -> Cached:
        try:
            cached = Cached(time.time(), compute(prepared=prepared))
            if generation == self._generation:
                client.set(metrics_facts_key(), _dump(cached), ex=KEEP_SECONDS)
            return cached
        finally:
            client.delete(_lock_key())

    def close(self) -> None:
        """The refresher lets its connection go (tests, before the database is dropped)."""
        self._refresher.close()


class Refresher:
    """One thread per web process, started the first time it is asked, that refreshes the
    facts on its own connection. The connection is kept while refreshes keep coming (so
    its statements stay prepared) and closed after IDLE_CLOSE_SECONDS without one: a web
    process holds one more PostgreSQL connection only while it is the one refreshing."""

    def __init__(self, collector: FactsCollector) -> None:
        self.collector = collector
        self._asked: list[tuple[object, int, threading.Event]] = []
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def ask(self, client, generation: int) -> threading.Event:
        done = threading.Event()
        with self._lock:
            self._asked.append((client, generation, done))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="metrics-facts", daemon=True
                )
                self._thread.start()
        self._wake.set()
        return done

    def close(self) -> None:
        self.ask(None, -1).wait(30)

    def _loop(self) -> None:
        while True:
            if not self._wake.wait(IDLE_CLOSE_SECONDS):
                connection.close()
                continue
            self._wake.clear()
            with self._lock:
                asked, self._asked = self._asked, []
            for client, generation, done in asked:
                try:
                    if client is None:
                        connection.close()
                    else:
                        self.collector.refresh(client, generation, prepared=True)
                except Exception:  # the next scrape asks again; the old facts are served
                    log.exception("refreshing the metrics facts failed")
                    connection.close()
                finally:
                    done.set()


def _lock_key() -> str:
    return metrics_facts_key() + ":lock"


def _claim(client) -> bool:
    return bool(client.set(_lock_key(), str(os.getpid()), nx=True, ex=REFRESH_LOCK_SECONDS))


def _dump(cached: Cached) -> str:
    return json.dumps(
        {
            "at": cached.at,
            "families": [
                [f.name, f.documentation, f.type, [[s.name, s.labels, s.value] for s in f.samples]]
                for f in cached.families
            ],
        }
    )


def _load(raw: bytes | None) -> Cached | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
        families = []
        for name, documentation, kind, samples in data["families"]:
            family = Metric(name, documentation, kind)
            family.samples = [Sample(n, labels, value) for n, labels, value in samples]
            families.append(family)
        return Cached(float(data["at"]), families)
    except (ValueError, KeyError, TypeError):
        return None


def compute(*, prepared: bool = False) -> list[Metric]:
    """Every fact, now: each source on its own, its statements bounded."""
    families, up = [], {}
    slugs: dict[int, str] = {}
    try:
        with bounded_statements(settings.METRICS_STATEMENT_TIMEOUT_SECONDS):
            if prepared:
                generic_plans()
            slugs = {t[0]: t[1] for t in _tenants()}
            families += database_facts(prepared=prepared)
        up["postgresql"] = 1
    except Exception as exc:  # a timeout, the database away, or a bug: reported, not raised
        if not isinstance(exc, DatabaseError):
            log.exception("reading the metrics facts from PostgreSQL failed")
        up["postgresql"] = 0
        with contextlib.suppress(Exception):
            connection.close()  # a connection a timeout left unusable is not reused
    try:
        families += redis_facts(slugs)
        up["redis"] = 1
    except Exception:  # a Redis error, or a value that does not parse
        up["redis"] = 0
    if is_amqp():
        try:
            families += broker_facts()
            up["rabbitmq"] = 1
        except Exception:  # unreachable, or a timeout
            up["rabbitmq"] = 0
    source = GaugeMetricFamily(
        "tickwork_metrics_source_up",
        "1 when the facts could be read from the source at their last refresh, else 0.",
        labels=["source"],
    )
    for name, value in up.items():
        source.add_metric([name], value)
    return [*families, source]
