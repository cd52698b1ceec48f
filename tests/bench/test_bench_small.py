"""CI runs the benchmarks at a small size: they must work; their figures are printed, never
asserted (speed stays out of pass/fail tests)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django_tenants.utils import schema_context

from ..scenarios.procs import ROOT, process_env

pytestmark = pytest.mark.slow


@pytest.fixture
def bench_cleanup(live, redis_client):
    """The benchmark provisions its own tenants in the test database: drop them after."""
    yield
    from tenants.models import Tenant

    for tenant in Tenant.objects.filter(slug__startswith="bench-"):
        tenant.delete(force_drop=True)
    redis_client.flushdb()


@pytest.mark.timeout(1200)  # every benchmark in turn: 3 to 4 minutes here, more when loaded
def test_benchmarks_run_at_a_small_size(bench_cleanup):
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--json", "small"],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    print(result.stdout)
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert [row["registered"] for row in figures["leader_cost"]] == [1000, 5000]
    assert figures["fire_lag"]["fired"] == figures["fire_lag"]["jobs"] == 2000
    scale = figures["partitioned_scale"]
    assert scale["memory"]["index_members"] == scale["registered"] == 20_000
    assert len(scale["takeover_s"]) == 1
    assert figures["retention"]["pruned"] == figures["retention"]["expected"]
    assert figures["retention"]["old_runs_left"] == 20_000 - figures["retention"]["expected"]
    assert figures["throughput"]["runs"] == 200 and figures["throughput"]["tickwork_per_s"] > 0
    from devstack.pgbouncer import unavailable

    if unavailable() is None:  # the worker behind a transaction-pooling PgBouncer ran too
        assert figures["throughput"]["tickwork_pgbouncer_per_s"] > 0


def test_fire_lag_can_run_with_fair_admission_off_for_comparison(bench_cleanup):
    """docs/benchmarks.md compares the fire lag with fair admission on and off: the
    benchmark must be able to turn it off (`fire-lag --no-admission`)."""
    from bench import fire_lag

    off = fire_lag.run(100, 2, tenant_count=1, lead_seconds=2, lookahead=10, admission=False)
    assert off["fair_admission"] is False and off["fired"] == 100
    on = fire_lag.run(100, 2, tenant_count=1, lead_seconds=2, lookahead=10)
    assert on["fair_admission"] is True and on["fired"] == 100


def test_a_benchmark_starts_without_what_other_benchmarks_left(bench_cleanup, redis_client):
    """Found when the fair-share benchmark ran after fire-lag: the leader's index rebuild
    published fire-lag's 8,000 queued runs (of other bench tenants) again, ahead of the
    flood being measured, and B's p99 start lag read 26 s."""
    from bench.world import bench_tenants, drop_all_bench_data
    from core.clock import SystemClock
    from runs import states
    from runs.models import Run

    from ..integration.helpers import make_job

    tenants = bench_tenants(3)
    for tenant in tenants:
        job = make_job(tenant, SystemClock(), schedule=None)
        with schema_context(tenant.schema_name):
            Run.objects.create(
                job_id=job.id,
                trigger=Run.Trigger.MANUAL,
                status=states.QUEUED,
                scheduled_for=job.created_at,
                due_at=job.created_at,
            )
    drop_all_bench_data(redis_client)
    for tenant in tenants:
        with schema_context(tenant.schema_name):
            assert not Run.objects.exists()


def test_the_fire_profile_sums_samples_by_step(tmp_path):
    """`partitioned-fire --profile` reads py-spy's raw output: each stack inside the fire
    step counts for the first step it names, the pusher thread's stacks apart."""
    from bench import fire_profile

    fire = "main (manage.py:1);fire (beat/fire.py:120)"
    raw = tmp_path / "s.spy"
    raw.write_text(
        f"{fire};publish_first (beat/fire.py:150);publishable_runs (beat/store.py:1) 7\n"
        f"{fire};_admit_all (beat/fire.py:300);execute (psycopg/cursor.py:1) 5\n"
        f"{fire};somewhere (beat/fire.py:99) 2\n"
        "_bootstrap (threading.py:1);_push (beat/fire.py:260);execute (redis/client.py:1) 4\n"
        "main (manage.py:1);materialise (beat/materialise.py:1) 9\n"
    )
    steps = fire_profile.summarise(raw)
    assert steps == {
        "early publication: read runs and jobs": 7,
        "chunks: mark queued / admit (PostgreSQL)": 5,
        "other": 2,
        "pusher thread: pushing (alongside the reads)": 4,
        "total": 14,
    }
