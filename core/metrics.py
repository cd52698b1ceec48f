"""Metric definitions: what each process records, under Prometheus names (ADR 0013).

Two routes, one per kind of process:

- **Workers and web processes** record events with prometheus_client's counters and
  histograms below. With `PROMETHEUS_MULTIPROC_DIR` set (it must be in the environment
  before prometheus_client is imported), each process (gunicorn worker, Celery pool child)
  writes its values to a file there, and the web's `/metrics` adds up every file of the host.
- **The leader** keeps its counters and histograms in memory (`LEADER`, a `RedisMetrics`)
  and adds them to one Redis hash about once a second. The web's `/metrics` reads the hash,
  so it shows the leader's figures on any host, whichever scheduler process leads, and the
  counters survive a change of leader (each adds only what it did).

The web merges the two routes by name (`tickwork_runs_finished` is counted by workers,
the leader and the API alike). Labels are bounded: priorities, statuses, outcomes, status
classes, and the tenant slug (capped by `METRICS_TENANTS`); never a job or run id.
"""

from __future__ import annotations

import json
import threading
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django.conf import settings
from prometheus_client import Counter, Histogram, disable_created_metrics
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from .keys import metrics_leader_key

# Seconds. Fire within 1 s is the target: fine buckets below it, coarse ones for outages.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
ITERATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
HTTP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)

# `_created` samples cannot be added up across processes and leaders; rate() needs none.
disable_created_metrics()

OTHER_TENANTS = "other"
ALL_TENANTS = "all"


def tenant_label(slug: str) -> str:
    """The `tenant` label value for `slug` under `METRICS_TENANTS`: `all` keeps every slug
    (series grow with tenants); `none` puts every tenant under `all`; a list of slugs keeps
    those and puts the others under `other`. Every process applies the same rule, so a
    tenant's series are the same whichever process records them."""
    policy = settings.METRICS_TENANTS
    if policy == [ALL_TENANTS]:
        return slug
    if policy == ["none"]:
        return ALL_TENANTS
    return slug if slug in policy else OTHER_TENANTS


def status_class(*, status_code: int | None, refused: bool = False, timed_out: bool = False) -> str:
    """`2xx`..`5xx` for a response, else `refused` (the SSRF guard), `timeout`, `error`."""
    if refused:
        return "refused"
    if status_code is not None and 100 <= status_code < 600:
        return f"{status_code // 100}xx"
    return "timeout" if timed_out else "error"


# --- workers and web processes (prometheus_client, multiprocess-safe) -----------------------

RUNS_FINISHED = Counter(
    "tickwork_runs_finished",
    "Runs that reached an end status (succeeded, dead, skipped, cancelled), by tenant. A dead "
    "run replayed and then succeeded counts once for each.",
    ["tenant", "status"],
)
ATTEMPTS_FINISHED = Counter(
    "tickwork_attempts_finished",
    "Attempts a worker finished, by tenant and outcome (succeeded or failed).",
    ["tenant", "outcome"],
)
START_LAG = Histogram(
    "tickwork_start_lag_seconds",
    "From a run's due instant to a worker starting it, by job priority.",
    ["priority"],
    buckets=LAG_BUCKETS,
)
ATTEMPT_DURATION = Histogram(
    "tickwork_attempt_duration_seconds",
    "How long an attempt's target ran on the worker, by target type (http or task).",
    ["target"],
    buckets=DURATION_BUCKETS,
)
HTTP_TARGET = Histogram(
    "tickwork_http_target_duration_seconds",
    "HTTP target calls (every hop and redirect), by the status class of their end: 2xx, "
    "3xx, 4xx, 5xx, or refused, timeout, error when no response ended the call.",
    ["status_class"],
    buckets=HTTP_BUCKETS,
)
HEARTBEAT_STOPPED = Counter(
    "tickwork_heartbeat_stopped_attempts",
    "Attempts a worker's heartbeat found moved on (cancelled, reaped, superseded): their "
    "target was told to stop.",
)
HEARTBEAT_FAILURES = Counter(
    "tickwork_heartbeat_failures", "Heartbeat rounds that failed (the database did not answer)."
)
API_PROBLEMS = Counter(
    "tickwork_api_problems",
    "API requests answered with a problem (an error), by HTTP status.",
    ["status"],
)


# --- the leader (in memory, added to Redis) -------------------------------------------------


@dataclass(frozen=True)
class Spec:
    name: str  # a counter's without `_total`
    kind: str  # "counter" or "histogram"
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


LEADER_SPECS = (
    Spec(
        "tickwork_fire_lag_seconds",
        "histogram",
        "From a run's due instant to the leader publishing it to the broker, by job priority.",
        ("priority",),
        LAG_BUCKETS,
    ),
    Spec(
        "tickwork_leader_iteration_duration_seconds",
        "histogram",
        "How long one leader iteration took (the work, not the sleep after it).",
        (),
        ITERATION_BUCKETS,
    ),
    Spec(
        "tickwork_runs_reaped",
        "counter",
        "Running runs whose heartbeat went stale, reaped by the leader, by what came next "
        "(retrying or dead).",
        ("outcome",),
    ),
    Spec(
        "tickwork_queued_runs_republished",
        "counter",
        "Queued runs unclaimed past the visibility timeout, published again by the leader.",
    ),
    Spec(
        "tickwork_runs_relayed",
        "counter",
        "Waiting runs the leader found in PostgreSQL but not in its memory (after a takeover, "
        "or a lost index write).",
    ),
    Spec(
        "tickwork_alert_incidents_opened",
        "counter",
        "Alert incidents the leader opened, by tenant and kind (dead_letter, failures, missed).",
        ("tenant", "kind"),
    ),
    Spec(
        "tickwork_alert_deliveries",
        "counter",
        "Alert notification delivery attempts, by channel kind (webhook, email) and result "
        "(sent, retry, given_up).",
        ("channel", "result"),
    ),
    Spec(
        "tickwork_runs_pruned",
        "counter",
        "Ended runs (with their attempts) the leader deleted because they were older than "
        "their tenant's retention.",
    ),
    Spec(
        "tickwork_runs_finished",
        "counter",
        RUNS_FINISHED._documentation,
        ("tenant", "status"),
    ),
)


class RedisMetrics:
    """Counters and histograms kept in memory and added to one Redis hash by `flush()`:
    one round trip, whatever was recorded. Thread-safe."""

    def __init__(self, specs: Iterable[Spec]) -> None:
        self.specs = {spec.name: spec for spec in specs}
        self._pending: dict[str, float] = defaultdict(float)
        self._fields: dict[tuple, str] = {}  # (name, labels, part, le) -> the hash field
        self._lock = threading.Lock()

    def inc(self, name: str, amount: float = 1, **labels: str) -> None:
        if amount:
            field = self._field(name, labels, "total")
            with self._lock:
                self._pending[field] += amount

    def observe(self, name: str, value: float, **labels: str) -> None:
        self.observe_many(name, [value], **labels)

    def observe_many(self, name: str, values: Iterable[float], **labels: str) -> None:
        """Counted into buckets here, then one update per bucket: the leader records every
        run it publishes (tens of thousands a second), so a value costs a bisect."""
        buckets = self.specs[name].buckets
        counts = [0] * (len(buckets) + 1)
        total, n = 0.0, 0
        for value in values:
            counts[bisect_left(buckets, value)] += 1  # the first bound >= value (le)
            total += value
            n += 1
        if not n:
            return
        bounds = (*buckets, float("inf"))
        updates = [
            (self._field(name, labels, "bucket", bounds[i]), c) for i, c in enumerate(counts) if c
        ]
        updates += [
            (self._field(name, labels, "sum"), total),
            (self._field(name, labels, "count"), n),
        ]
        with self._lock:
            for field, amount in updates:
                self._pending[field] += amount

    def _field(
        self, name: str, labels: Mapping[str, str], part: str, le: float | None = None
    ) -> str:
        key = (name, tuple(sorted(labels.items())), part, le)
        field = self._fields.get(key)
        if field is None:
            field = self._fields[key] = json.dumps([name, list(key[1]), part, le])
        return field

    def flush(self, client, *, at: float | None = None) -> int:
        """Add what was recorded since the last flush; kept for the next one if Redis
        fails. Returns how many fields were written."""
        with self._lock:
            pending, self._pending = self._pending, defaultdict(float)
        try:
            pipe = client.pipeline(transaction=False)
            key = metrics_leader_key()
            for name, amount in pending.items():
                pipe.hincrbyfloat(key, name, amount)
            if at is not None:
                pipe.hset(key, "_flushed_at", repr(at))
            pipe.execute()
        except Exception:
            with self._lock:
                for name, amount in pending.items():
                    self._pending[name] += amount
            raise
        return len(pending)

    def families(self, raw: Mapping[bytes | str, bytes | str]) -> list[Metric]:
        """The metric families in a hash as Redis returns it (`HGETALL`)."""
        values: dict[str, dict[tuple, dict]] = defaultdict(lambda: defaultdict(dict))
        flushed: list[Metric] = []
        for field, value in raw.items():
            field = field.decode() if isinstance(field, bytes) else field
            if field == "_flushed_at":
                flushed.append(
                    GaugeMetricFamily(
                        "tickwork_leader_last_flush_timestamp_seconds",
                        "When a leader last added its figures (Unix time); about every second.",
                        value=float(value),
                    )
                )
                continue
            try:
                name, labels, part, le = json.loads(field)
            except ValueError:
                continue
            if name in self.specs:
                values[name][tuple(map(tuple, labels))][(part, le)] = float(value)
        return [
            *(self._family(self.specs[n], series) for n, series in sorted(values.items())),
            *flushed,
        ]

    def _family(self, spec: Spec, series: dict[tuple, dict]) -> Metric:
        if spec.kind == "counter":
            family = CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
            for labels, parts in sorted(series.items()):
                family.add_metric(_label_values(spec, labels), parts.get(("total", None), 0.0))
            return family
        family = HistogramMetricFamily(spec.name, spec.help, labels=spec.labels)
        for labels, parts in sorted(series.items()):
            cumulative, buckets = 0.0, []
            for le in (*spec.buckets, float("inf")):
                cumulative += parts.get(("bucket", le), 0.0)
                buckets.append((_le(le), cumulative))
            family.add_metric(
                _label_values(spec, labels), buckets, sum_value=parts.get(("sum", None), 0.0)
            )
        return family


def _label_values(spec: Spec, labels: tuple) -> list[str]:
    given = {k: v for k, v in labels}
    return [str(given.get(name, "")) for name in spec.labels]


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


# The leader's figures (one per process: only the leading one records and flushes).
LEADER = RedisMetrics(LEADER_SPECS)
