"""What /metrics shows, and who may read it.

The registry adds up three sources (ADR 0013):

1. the event counters and histograms of this host's processes: every file in
   `PROMETHEUS_MULTIPROC_DIR` (gunicorn workers, Celery pool children on the same host),
   or, without it, this process's own (`runserver`, tests);
2. the leader's figures, from the Redis hash every leader adds to (`core.metrics.LEADER`);
3. the facts of PostgreSQL and Redis, computed now (`facts.py`, cached a few seconds).

Families of the same name from 1 and 2 are merged, samples with the same labels added up
(`tickwork_runs_finished` is counted by workers and by the leader).
"""

from __future__ import annotations

import hmac
import os

from django.conf import settings
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.samples import Sample

from core.keys import metrics_leader_key
from core.metrics import LEADER
from core.redis import REDIS_ERRORS, get_redis

from .facts import FactsCollector


def merge(families: list[Metric]) -> list[Metric]:
    """Families with the same name become one; samples with the same name and labels
    are added up (counters and histogram buckets, sums and counts add)."""
    merged: dict[str, Metric] = {}
    for family in families:
        seen = merged.get(family.name)
        if seen is None:
            merged[family.name] = family
            continue
        totals: dict[tuple, float] = {}
        order: list[tuple] = []
        for sample in [*seen.samples, *family.samples]:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if key not in totals:
                order.append(key)
                totals[key] = 0.0
            totals[key] += sample.value
        seen.samples = [
            Sample(name, dict(labels), totals[(name, labels)]) for name, labels in order
        ]
    return list(merged.values())


def host_families() -> list[Metric]:
    """This host's processes (the multiprocess files) or this process alone."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        return list(MultiProcessCollector(None, path=path).collect())
    return list(REGISTRY.collect())


def leader_families(client=None) -> list[Metric]:
    try:
        raw = (client or get_redis()).hgetall(metrics_leader_key())
    except REDIS_ERRORS:
        return []
    return LEADER.families(raw)


class EventsCollector:
    def __init__(self, *, with_leader: bool = True) -> None:
        self.with_leader = with_leader

    def collect(self) -> list[Metric]:
        families = host_families()
        if self.with_leader:
            families += leader_families()
        return merge(families)


FACTS = FactsCollector()


def web_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EventsCollector())
    registry.register(FACTS)
    return registry


def host_registry() -> CollectorRegistry:
    """A worker host's own figures, for WORKER_METRICS_BIND (no facts, no leader)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EventsCollector(with_leader=False))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def authorised(header: str | None) -> bool:
    """No METRICS_TOKEN: anyone who reaches the public host; else `Bearer <token>` only."""
    token = settings.METRICS_TOKEN
    if not token:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )
