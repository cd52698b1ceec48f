"""The leader's in-memory figures as the web reads them back (RedisMetrics), the merge of
two sources of one family, and the bounded labels."""

from __future__ import annotations

import pytest
from django.test import override_settings
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from core.metrics import LEADER_SPECS, RedisMetrics, status_class, tenant_label
from scheduler_site.metrics.exposition import merge


class FakeRedis:
    """Just what `flush` uses: a pipeline of HINCRBYFLOAT/HSET into one hash."""

    def __init__(self) -> None:
        self.hash: dict[str, float] = {}

    def pipeline(self, transaction: bool = False):
        return self

    def hincrbyfloat(self, key: str, field: str, amount: float) -> None:
        self.hash[field] = self.hash.get(field, 0.0) + amount

    def hset(self, key: str, field: str, value: str) -> None:
        self.hash[field] = value

    def execute(self) -> None:
        pass


def _samples(families) -> dict:
    registry = CollectorRegistry(auto_describe=False)

    class Collector:
        def collect(self):
            return families

    registry.register(Collector())
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_histogram_buckets_are_cumulative_when_read_back():
    store, redis = RedisMetrics(LEADER_SPECS), FakeRedis()
    store.observe_many("tickwork_fire_lag_seconds", [0.003, 0.3, 0.3, 500], priority="high")
    store.flush(redis)
    samples = _samples(store.families(redis.hash))
    bucket = "tickwork_fire_lag_seconds_bucket"
    assert samples[(bucket, (("le", "0.005"), ("priority", "high")))] == 1
    assert samples[(bucket, (("le", "0.25"), ("priority", "high")))] == 1
    assert samples[(bucket, (("le", "0.5"), ("priority", "high")))] == 3
    assert samples[(bucket, (("le", "300.0"), ("priority", "high")))] == 3
    assert samples[(bucket, (("le", "+Inf"), ("priority", "high")))] == 4
    assert samples[("tickwork_fire_lag_seconds_count", (("priority", "high"),))] == 4
    assert samples[("tickwork_fire_lag_seconds_sum", (("priority", "high"),))] == 500.603


def test_a_flush_adds_to_what_is_there_and_starts_over():
    store, redis = RedisMetrics(LEADER_SPECS), FakeRedis()
    store.inc("tickwork_runs_reaped", 2, outcome="dead")
    store.flush(redis)
    assert store.flush(redis) == 0  # nothing new: nothing written twice
    store.inc("tickwork_runs_reaped", 1, outcome="dead")
    store.flush(redis)
    samples = _samples(store.families(redis.hash))
    assert samples[("tickwork_runs_reaped_total", (("outcome", "dead"),))] == 3


def test_a_failed_flush_keeps_the_figures():
    store = RedisMetrics(LEADER_SPECS)
    store.inc("tickwork_runs_relayed", 5)

    class Down(FakeRedis):
        def execute(self) -> None:
            raise ConnectionError("redis is away")

    with pytest.raises(ConnectionError):
        store.flush(Down())
    redis = FakeRedis()
    store.flush(redis)
    assert _samples(store.families(redis.hash))[("tickwork_runs_relayed_total", ())] == 5


def test_merge_adds_up_samples_of_the_same_family_and_labels():
    one, two = RedisMetrics(LEADER_SPECS), RedisMetrics(LEADER_SPECS)
    a, b = FakeRedis(), FakeRedis()
    one.inc("tickwork_runs_finished", 2, tenant="acme", status="dead")
    two.inc("tickwork_runs_finished", 3, tenant="acme", status="dead")
    two.inc("tickwork_runs_finished", 1, tenant="zeta", status="dead")
    one.flush(a)
    two.flush(b)
    merged = merge([*one.families(a.hash), *two.families(b.hash)])
    assert len(merged) == 1
    samples = _samples(merged)
    assert samples[("tickwork_runs_finished_total", (("status", "dead"), ("tenant", "acme")))] == 5
    assert samples[("tickwork_runs_finished_total", (("status", "dead"), ("tenant", "zeta")))] == 1


def test_status_classes_are_a_few_words():
    assert status_class(status_code=204) == "2xx"
    assert status_class(status_code=503) == "5xx"
    assert status_class(status_code=None, refused=True) == "refused"
    assert status_class(status_code=None, timed_out=True) == "timeout"
    assert status_class(status_code=None) == "error"


def test_tenant_label_policies():
    with override_settings(METRICS_TENANTS=["all"]):
        assert tenant_label("acme") == "acme"
    with override_settings(METRICS_TENANTS=["none"]):
        assert tenant_label("acme") == "all"
    with override_settings(METRICS_TENANTS=["acme", "big-co"]):
        assert [tenant_label(s) for s in ("acme", "big-co", "zeta")] == ["acme", "big-co", "other"]
