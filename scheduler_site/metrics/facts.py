"""Gauges that are facts of PostgreSQL and Redis, computed when /metrics is scraped: the due
backlog, the DLQ, heartbeat age, queue depths, the leader and its admission queue.

Nothing pushes them, so they are right whichever process leads and whatever restarted.
Each scrape costs a few statements per 100-200 tenants (the partial indexes of the runs
table), so the result is cached for `METRICS_CACHE_SECONDS` per web process, and every
statement is bounded by `METRICS_STATEMENT_TIMEOUT_SECONDS`: a slow database makes the
scrape report `tickwork_metrics_source_up{source="postgresql"} 0`, never hang it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator

from django.conf import settings
from django.db import DatabaseError, connection
from prometheus_client.core import GaugeMetricFamily, Metric
from psycopg import sql

from beat.lease import current_epoch
from beat.status import overdue_work
from core.clock import SystemClock
from core.keys import (
    admission_stats_key,
    faults_key,
    index_key,
    leader_info_key,
    rebuild_state_key,
    runs_index_key,
    schedulers_key,
    workers_key,
)
from core.metrics import tenant_label
from core.redis import get_redis
from core.sql import table
from runs.status_sql import STATUS
from scheduler_site.celery import run_queue_names

SCHEMAS_PER_STATEMENT = 200
CLOCK = SystemClock()


def _gauge(name: str, help_text: str, value: float | None, **labels: str) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=list(labels))
    if value is not None:
        family.add_metric(list(labels.values()), value)
    return family


def _per_tenant(name: str, help_text: str, values: dict[str, float], *, combine=sum) -> Metric:
    """One sample per tenant label (`METRICS_TENANTS`), slugs sharing a label combined."""
    grouped: dict[str, list[float]] = defaultdict(list)
    for slug, value in values.items():
        grouped[tenant_label(slug)].append(value)
    family = GaugeMetricFamily(name, help_text, labels=["tenant"])
    for label, items in sorted(grouped.items()):
        family.add_metric([label], combine(items))
    return family


@contextlib.contextmanager
def bounded_statements(seconds: float) -> Iterator[None]:
    """This connection's statements end after `seconds` until the block ends."""
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


def _tenants() -> list[tuple[int, str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, slug, schema_name FROM public.tenants_tenant"
            " WHERE schema_name <> 'public' ORDER BY id"
        )
        return cursor.fetchall()


_RUNS_SQL = (
    "SELECT (SELECT count(*) FROM {runs} WHERE status = {dead}),"
    " (SELECT count(*) FROM {runs} WHERE status = {running}),"
    " (SELECT extract(epoch FROM now() - min(heartbeat_at)) FROM {runs} WHERE status = {running})"
)


def _run_rows(tenants: list[tuple[int, str, str]]) -> dict[str, tuple]:
    """Per tenant slug: (dead runs, running runs, oldest heartbeat age); a tenant whose
    tables cannot be read is left out (and counted by `unreadable`)."""
    out: dict[str, tuple] = {}
    for start in range(0, len(tenants), SCHEMAS_PER_STATEMENT):
        chunk = tenants[start : start + SCHEMAS_PER_STATEMENT]
        query = sql.SQL(" UNION ALL ").join(
            sql.SQL("(SELECT {slug}::text, q.* FROM ({q}) q)").format(
                slug=sql.Literal(slug),
                q=sql.SQL(_RUNS_SQL).format(runs=table(schema, "runs_run"), **STATUS),
            )
            for _id, slug, schema in chunk
        )
        try:
            with connection.cursor() as cursor:
                cursor.execute(query)
                rows = cursor.fetchall()
        except DatabaseError as exc:
            if _is_timeout(exc) or len(chunk) == 1:
                raise
            rows = []
            for one in chunk:  # find the broken schema; the others are still reported
                with contextlib.suppress(DatabaseError):
                    rows += [(slug, *r) for slug, r in _run_rows([one]).items()]
        for slug, *values in rows:
            out[slug] = tuple(values)
    return out


def _is_timeout(exc: BaseException) -> bool:
    return getattr(exc.__cause__, "sqlstate", None) == "57014"  # query_canceled


def database_facts() -> list[Metric]:
    now = CLOCK.now()
    tenants = _tenants()
    epoch = current_epoch()
    overdue = overdue_work(now)
    rows = _run_rows(tenants)
    oldest = [t for t in (overdue["oldest_run"], overdue["oldest_job"]) if t is not None]
    ages = [age for _dead, _running, age in rows.values() if age is not None]
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
            overdue["runs"],
        ),
        _gauge(
            "tickwork_due_backlog_jobs",
            "Schedulable jobs whose next slot passed without "
            "being materialised, counted from PostgreSQL.",
            overdue["jobs"],
        ),
        _gauge(
            "tickwork_due_backlog_oldest_seconds",
            "How late the oldest due-but-unfired run or unmaterialised slot is (0 when none).",
            max((now - t).total_seconds() for t in oldest) if oldest else 0.0,
        ),
        _gauge(
            "tickwork_unreadable_schemas",
            "Tenant schemas the backlog count could not read.",
            len(overdue["unreadable"]) + len(tenants) - len(rows),
        ),
        _per_tenant(
            "tickwork_dlq_runs",
            "Runs in the dead-letter queue (tenants with none are left out).",
            {s: r[0] for s, r in rows.items() if r[0]},
        ),
        _gauge(
            "tickwork_running_runs",
            "Runs a worker is executing now.",
            sum(r[1] for r in rows.values()),
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


def redis_facts(slugs: dict[int, str]) -> list[Metric]:
    client = get_redis()
    queues = run_queue_names(settings.SCHEDULER_SHARD_COUNT)
    pipe = client.pipeline(transaction=False)
    for name in queues:
        pipe.llen(name)
    pipe.exists(leader_info_key())
    pipe.get(admission_stats_key())
    pipe.get(faults_key())
    pipe.zrangebyscore(workers_key(), time.time(), "+inf")
    pipe.zcard(index_key())
    pipe.zcard(runs_index_key())
    pipe.exists(rebuild_state_key())
    pipe.zcount(schedulers_key(), time.time(), "+inf")
    *depths, leader, admission, faults, workers, index_size, runs_index, rebuilding, schedulers = (
        pipe.execute()
    )
    depth = GaugeMetricFamily(
        "tickwork_queue_depth",
        "Messages waiting in each run queue of the broker.",
        labels=["queue"],
    )
    for name, length in zip(queues, depths, strict=True):
        depth.add_metric([name], length)
    slots = sum(_slots(member) for member in workers)
    return [
        depth,
        _gauge("tickwork_leader_up", "1 while a scheduler holds the leader lease.", int(leader)),
        _gauge(
            "tickwork_schedulers",
            "Live runscheduler processes, the leader and its standbys.",
            schedulers,
        ),
        _gauge(
            "tickwork_failing_tenants",
            "Tenants the leader skips now after failures.",
            len(json.loads(faults)) if faults else 0,
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
        *admission_facts(json.loads(admission) if admission else None, slugs),
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


class FactsCollector:
    """A prometheus_client collector; one per process, its result cached."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._families: list[Metric] = []

    def clear(self) -> None:
        with self._lock:
            self._at = float("-inf")

    def collect(self) -> list[Metric]:
        with self._lock:
            if time.monotonic() - self._at >= settings.METRICS_CACHE_SECONDS:
                self._families = self._compute()
                self._at = time.monotonic()
            return list(self._families)

    def _compute(self) -> list[Metric]:
        families, up = [], {}
        slugs: dict[int, str] = {}
        try:
            with bounded_statements(settings.METRICS_STATEMENT_TIMEOUT_SECONDS):
                slugs = {tenant_id: slug for tenant_id, slug, _ in _tenants()}
                families += database_facts()
            up["postgresql"] = 1
        except DatabaseError:
            up["postgresql"] = 0
            with contextlib.suppress(Exception):
                connection.close()  # a connection a timeout left unusable is not reused
        try:
            families += redis_facts(slugs)
            up["redis"] = 1
        except Exception:  # redis.RedisError, or a value that does not parse
            up["redis"] = 0
        source = GaugeMetricFamily(
            "tickwork_metrics_source_up",
            "1 when /metrics could read the source of its facts this time, else 0.",
            labels=["source"],
        )
        for name, value in up.items():
            source.add_metric([name], value)
        return [*families, source]
