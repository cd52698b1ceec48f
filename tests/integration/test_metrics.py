"""GET /metrics after real runs, parsed by prometheus_client's own parser: the leader's
figures (through Redis), the worker's (this process), the facts of PostgreSQL and Redis;
where it is served and to whom; the tenant label's cap."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client, override_settings
from django_tenants.utils import schema_context
from prometheus_client.parser import text_string_to_metric_families

from beat import metrics as leader_metrics
from core.clock import FakeClock
from core.metrics import tenant_label
from runs import states
from runs.execution import run_execute
from runs.services import job_trigger
from scheduler_site.metrics.exposition import FACTS

from .helpers import ACTOR, make_job, new_engine, runs_of, utc
from .receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]
START = utc(2026, 6, 1, 12, 0, 0)
Samples = dict[tuple[str, frozenset], float]


@pytest.fixture(autouse=True, scope="module")
def _refresher_lets_its_connection_go():
    """The facts' refresher thread keeps its connection between refreshes: not past these
    tests (the test database is dropped at the end)."""
    yield
    FACTS.close()


def scrape(client: Client | None = None, *, fresh: bool = True, **headers: str) -> Samples:
    """/metrics now (`fresh`: the facts computed anew), with what this process's leader code
    recorded (in this test or, not yet flushed, in earlier ones) added to Redis first."""
    from core.redis import get_redis

    leader_metrics.flush(get_redis())
    if fresh:
        FACTS.clear()
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"{key} twice"
            samples[key] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def _execute(tenant, run, clock) -> str:
    with schema_context(tenant.schema_name):
        return run_execute(
            schema=tenant.schema_name, run_id=str(run.id), attempt=run.attempt, worker="w1",
            clock=clock,
        )  # fmt: skip


@override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"])
def test_metrics_after_real_runs_have_the_expected_series_and_values(live, redis_client):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    before = scrape()
    every_minute = make_job(alpha, clock, name="minutely", schedule={"cron": "* * * * *"})
    poison = make_job(
        alpha, clock, name="poison", schedule={"cron": "* * * * *"}, priority="high",
        target={"type": "task", "task": "builtin.fail"}, payload={"times": 5},
        retry={"max_attempts": 1},
    )  # fmt: skip
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 31))
    assert engine.materialise() == 2
    clock.set(utc(2026, 6, 1, 12, 1, 0, 300_000))  # 0.3 s after the instant
    assert engine.fire().published == 2
    leader_metrics.flush(redis_client)

    published = scrape()
    assert delta(before, published, "tickwork_fire_lag_seconds_count", priority="normal") == 1
    assert delta(before, published, "tickwork_fire_lag_seconds_count", priority="high") == 1
    for bucket, expected in (("0.25", 0), ("0.5", 1), ("+Inf", 1)):
        got = delta(
            before, published, "tickwork_fire_lag_seconds_bucket", priority="high", le=bucket
        )
        assert got == expected, bucket
    assert delta(before, published, "tickwork_fire_lag_seconds_sum", priority="high") == (
        pytest.approx(0.3)
    )
    assert sum(v for (n, _), v in published.items() if n == "tickwork_queue_depth") == 2
    assert value(published, "tickwork_leader_up") == 1
    assert value(published, "tickwork_leader_epoch") == engine.epoch
    assert value(published, "tickwork_due_backlog_runs") == 0
    assert value(published, "tickwork_leader_last_flush_timestamp_seconds") > 0

    clock.advance(2)  # the worker starts both 2.3 s after their instant
    [minutely] = runs_of(alpha, job_id=every_minute.id)
    [dead] = runs_of(alpha, job_id=poison.id)
    assert _execute(alpha, minutely, clock) == states.SUCCEEDED
    assert _execute(alpha, dead, clock) == states.DEAD
    with Receiver() as receiver:
        target = {"type": "http", "url": receiver.url("/hook"), "method": "POST"}
        hook = make_job(beta, clock, schedule=None, target=target)
        with schema_context(beta.schema_name):
            manual, _ = job_trigger(tenant=beta, actor=ACTOR, job_id=hook.id, clock=clock)
        assert _execute(beta, manual, clock) == states.SUCCEEDED

    after = scrape()
    finished = "tickwork_runs_finished_total"
    assert delta(before, after, finished, tenant="alpha", status=states.SUCCEEDED) == 1
    assert delta(before, after, finished, tenant="alpha", status=states.DEAD) == 1
    assert delta(before, after, finished, tenant="beta", status=states.SUCCEEDED) == 1
    attempts = "tickwork_attempts_finished_total"
    assert delta(before, after, attempts, tenant="alpha", outcome="failed") == 1
    assert delta(before, after, "tickwork_start_lag_seconds_count", priority="high") == 1
    assert delta(before, after, "tickwork_start_lag_seconds_bucket", priority="high", le="2.5") == 1
    assert delta(before, after, "tickwork_start_lag_seconds_bucket", priority="high", le="1.0") == 0
    assert delta(before, after, "tickwork_attempt_duration_seconds_count", target="task") == 2
    http = "tickwork_http_target_duration_seconds_count"
    assert delta(before, after, http, status_class="2xx") == 1
    assert value(after, "tickwork_dlq_runs", tenant="alpha") == 1
    assert ("tickwork_dlq_runs", frozenset({("tenant", "beta")})) not in after  # none: no series
    assert value(after, "tickwork_running_runs") == 0
    assert value(after, "tickwork_metrics_source_up", source="postgresql") == 1
    assert value(after, "tickwork_metrics_source_up", source="redis") == 1
    # No label anywhere names a job or a run.
    labels = {k for (_name, pairs) in after for k, _v in pairs}
    assert labels <= {"tenant", "status", "outcome", "priority", "le", "queue", "source",
                      "status_class", "target", "implementation", "major", "minor",
                      "patchlevel", "version", "generation"}  # fmt: skip


def test_reaped_runs_and_iterations_are_counted_through_redis(live, redis_client):
    """The leader's figures reach /metrics through Redis: nothing of the leader's process
    is read by the web."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, retry={"max_attempts": 1})
    with schema_context(alpha.schema_name):
        run, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
        from runs.models import Run

        Run.objects.filter(pk=run.pk).update(status=states.RUNNING, attempt=1, worker="gone")
    from django.db import connection

    with connection.cursor() as cursor:  # its worker went silent ten minutes ago
        cursor.execute(
            f'UPDATE "{alpha.schema_name}"."runs_run" SET heartbeat_at = now() - interval '
            "'10 minutes' WHERE id = %s",
            [run.id],
        )
    before = scrape()
    assert value(before, "tickwork_heartbeat_age_seconds") >= 600
    assert value(before, "tickwork_running_runs") == 1
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=60)
    assert engine.reap(force=True) == 1
    leader_metrics.iteration_done(redis_client, started=time.monotonic(), force_flush=True)
    after = scrape()
    assert delta(before, after, "tickwork_runs_reaped_total", outcome=states.DEAD) == 1
    assert delta(before, after, "tickwork_runs_finished_total", tenant="alpha", status="dead") == 1
    assert delta(before, after, "tickwork_leader_iteration_duration_seconds_count") == 1
    assert 0 <= delta(before, after, "tickwork_leader_iteration_duration_seconds_sum") < 1
    assert value(after, "tickwork_running_runs") == 0


def test_leader_figures_survive_a_change_of_leader(live, redis_client):
    """Each leader adds what it did to the same hash: a counter never goes back when
    another process leads."""
    from core.metrics import LEADER_SPECS, RedisMetrics

    first, second = RedisMetrics(LEADER_SPECS), RedisMetrics(LEADER_SPECS)
    first.inc("tickwork_runs_relayed", 3)
    first.flush(redis_client)
    second.inc("tickwork_runs_relayed", 2)
    second.flush(redis_client)
    assert value(scrape(), "tickwork_runs_relayed_total") == 5


def test_schedulers_alive_are_counted(live, redis_client):
    from beat.metrics import announce

    announce(redis_client, "host-a:1", 2)
    announce(redis_client, "host-b:2", 2)
    announce(redis_client, "host-a:1", 2)  # the same process again: still one
    assert value(scrape(), "tickwork_schedulers") == 2
    redis_client.zadd("tw:schedulers", {"host-b:2": 1.0})  # its announcement expired
    assert value(scrape(), "tickwork_schedulers") == 1


def test_metrics_are_served_on_the_public_host_only(live, redis_client):
    assert Client().get("/metrics").status_code == 200
    response = Client(HTTP_HOST=live["alpha"].domain).get("/metrics")
    assert response.status_code == 404
    assert b"tickwork_" not in response.content


@override_settings(METRICS_TOKEN="s3cret-metrics-token")
def test_a_metrics_token_is_required_when_set(live, redis_client):
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="s3cret-metrics-token").status_code == 401
    samples = scrape(HTTP_AUTHORIZATION="Bearer s3cret-metrics-token")
    assert value(samples, "tickwork_metrics_source_up", source="redis") == 1
    assert Client().post("/metrics").status_code in (401, 405)


def _dead_run(tenant, clock) -> None:
    job = make_job(tenant, clock, schedule=None, target={"type": "task", "task": "builtin.fail"},
                   payload={"times": 5}, retry={"max_attempts": 1})  # fmt: skip
    with schema_context(tenant.schema_name):
        run, _ = job_trigger(tenant=tenant, actor=ACTOR, job_id=job.id, clock=clock)
    assert _execute(tenant, run, clock) == states.DEAD


def test_tenant_label_can_be_capped_or_turned_off(live, redis_client):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    _dead_run(alpha, clock)
    _dead_run(beta, clock)
    assert value(scrape(), "tickwork_dlq_runs", tenant="beta") == 1
    with override_settings(METRICS_TENANTS=["none"]):
        assert tenant_label("alpha") == "all"
        samples = scrape()
        assert value(samples, "tickwork_dlq_runs", tenant="all") == 2
        assert not [k for k in samples if k[0] == "tickwork_dlq_runs" and len(k[1]) and
                    dict(k[1])["tenant"] != "all"]  # fmt: skip
    with override_settings(METRICS_TENANTS=["alpha"]):
        assert (tenant_label("alpha"), tenant_label("beta")) == ("alpha", "other")
        samples = scrape()
        assert value(samples, "tickwork_dlq_runs", tenant="alpha") == 1
        assert value(samples, "tickwork_dlq_runs", tenant="other") == 1


def test_facts_are_shared_and_refreshed_in_the_background(live, redis_client):
    """A scrape within METRICS_CACHE_SECONDS serves the shared facts; the first one after
    answers at once with them and refreshes them in a thread for the next scrapes."""
    alpha = live["alpha"].tenant
    first = scrape()
    assert ("tickwork_dlq_runs", frozenset({("tenant", "alpha")})) not in first
    _dead_run(alpha, FakeClock(START))
    cached = scrape(fresh=False)
    assert value(cached, "tickwork_dlq_runs", tenant="alpha") == 0  # the shared facts
    assert value(cached, "tickwork_metrics_facts_age_seconds") < 60
    with override_settings(METRICS_CACHE_SECONDS=0):
        stale = scrape(fresh=False)
        assert value(stale, "tickwork_dlq_runs", tenant="alpha") == 0  # no wait for it
        assert FACTS.last_refresh.wait(30)
    assert value(scrape(fresh=False), "tickwork_dlq_runs", tenant="alpha") == 1
    assert not redis_client.exists("tw:metrics:facts:lock")  # released after the refresh


def test_a_statement_timeout_reports_the_source_down_and_the_rest(live, redis_client):
    schema = live["alpha"].schema
    with override_settings(METRICS_STATEMENT_TIMEOUT_SECONDS=0.1), _locked_runs(schema):
        samples = scrape()
    assert value(samples, "tickwork_metrics_source_up", source="postgresql") == 0
    assert value(samples, "tickwork_metrics_source_up", source="redis") == 1
    assert ("tickwork_due_backlog_runs", frozenset()) not in samples
    assert value(scrape(), "tickwork_metrics_source_up", source="postgresql") == 1


class _locked_runs:
    """Another session holds a tenant's runs table locked: a read of it waits, then its
    statement times out."""

    def __init__(self, schema: str) -> None:
        self.schema = schema

    def __enter__(self):
        import psycopg

        from ..scenarios.procs import test_database_url

        self.conn = psycopg.connect(test_database_url())
        self.conn.execute(f'LOCK TABLE "{self.schema}".runs_run IN ACCESS EXCLUSIVE MODE')
        return self

    def __exit__(self, *exc):
        self.conn.rollback()
        self.conn.close()


def test_multiprocess_mode_adds_up_the_processes_of_the_host(live, redis_client, tmp_path):
    """Two processes (as two gunicorn workers or two Celery pool children) write their
    figures to the directory; /metrics adds them up."""
    code = textwrap.dedent(
        """
        import sys
        from core.metrics import RUNS_FINISHED, START_LAG
        RUNS_FINISHED.labels(tenant="alpha", status="succeeded").inc(int(sys.argv[1]))
        START_LAG.labels(priority="normal").observe(float(sys.argv[2]))
        """
    )
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for count, lag in (("3", "0.02"), ("4", "7")):
        subprocess.run([sys.executable, "-c", code, count, lag], cwd=ROOT, env=env, check=True)
    pids = {path.stem.rsplit("_", 1)[1] for path in tmp_path.glob("counter_*.db")}
    assert len(pids) == 2  # the files of two processes
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
        samples = scrape()
    finished = (
        "tickwork_runs_finished_total",
        frozenset({("tenant", "alpha"), ("status", "succeeded")}),
    )
    assert samples[finished] == 7
    assert value(samples, "tickwork_start_lag_seconds_count", priority="normal") == 2
    assert value(samples, "tickwork_start_lag_seconds_bucket", priority="normal", le="0.025") == 1
    assert value(samples, "tickwork_start_lag_seconds_bucket", priority="normal", le="10.0") == 2
    assert value(samples, "tickwork_start_lag_seconds_sum", priority="normal") == pytest.approx(
        7.02
    )


def test_retry_start_lag_is_measured_from_the_retry_instant(live, redis_client):
    """A retry's lag starts at its backoff's end, not at the slot it belongs to."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, target={"type": "task", "task": "builtin.fail"},
                   payload={"times": 1}, retry={"max_attempts": 2, "backoff_seconds": 600,
                                                "jitter": False})  # fmt: skip
    with schema_context(alpha.schema_name):
        run, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
    assert _execute(alpha, run, clock) == states.RETRYING
    clock.advance(600 + 0.04)
    [retry] = runs_of(alpha, id=run.id)
    before = scrape()
    with schema_context(alpha.schema_name):
        from runs.models import Run

        Run.objects.filter(pk=run.pk).update(status=states.QUEUED)
    assert _execute(alpha, retry, clock) == states.SUCCEEDED
    after = scrape()
    lag = delta(before, after, "tickwork_start_lag_seconds_sum", priority="normal")
    assert lag == pytest.approx(0.04, abs=0.01)
    assert retry.due_at == START + timedelta(seconds=600)
