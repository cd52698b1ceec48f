"""CI runs the benchmarks at a small size: they must work; their figures are printed, never
asserted (speed stays out of pass/fail tests)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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
    assert figures["retention"]["pruned"] == figures["retention"]["expected"]
    assert figures["retention"]["old_runs_left"] == 20_000 - figures["retention"]["expected"]
