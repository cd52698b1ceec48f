"""Fire lag (publish time minus the run's due instant) with a real leader loop on the
system clock: `count` jobs due in the same second (spread 0) or spread over a window.
Fair admission is on, with room for every run (`UNBOUNDED_ADMISSION`: its cost is in the
figures, no quota or watermark holds a run back); `admission=False` (`--no-admission`)
turns it off, plain FIFO as with `SCHEDULER_FAIR_ADMISSION=0`, for comparison."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from beat.admission_control import AdmissionConfig
from beat.engine import EngineConfig
from beat.loop import SchedulerProcess
from core.clock import SystemClock
from core.redis import get_redis

from .breakdown import Breakdown
from .world import (
    UNBOUNDED_ADMISSION,
    bench_tenants,
    copy_jobs,
    drop_all_bench_data,
    index_jobs,
    percentile,
)


def run(
    count: int,
    spread_seconds: int = 0,
    tenant_count: int = 10,
    lead_seconds: int = 40,
    lookahead: float = 30.0,
    *,
    admission: bool = True,
) -> dict:
    client = get_redis()
    tenants = bench_tenants(tenant_count)
    drop_all_bench_data(client)  # another benchmark's queued runs would be republished
    now = datetime.now(UTC)
    if spread_seconds:  # interval jobs: any whole second will do
        first = (now + timedelta(seconds=lead_seconds + 1)).replace(microsecond=0)
    else:  # minutely cron jobs: the first minute boundary at least `lead_seconds` away
        first = (now + timedelta(seconds=lead_seconds + 60)).replace(second=0, microsecond=0)
    for tenant in tenants:
        copy_jobs(tenant, count // tenant_count, first, spread_seconds=spread_seconds, name="lag")
        index_jobs(client, tenant)
    client.set("tw:index:built", "bench")
    process = SchedulerProcess(
        client=client,
        clock=SystemClock(),
        config=EngineConfig(
            lookahead_seconds=lookahead,
            admission=UNBOUNDED_ADMISSION if admission else AdmissionConfig(enabled=False),
        ),
        lease_seconds=5,
    )
    assert process.try_lead()
    engine = process.engine
    engine.lag_log = lags = []
    parts = Breakdown()
    for name in ("materialise", "fire"):
        parts.wrap(engine, name, name)
    totals = parts.totals
    deadline = time.monotonic() + (first - now).total_seconds() + spread_seconds + 60
    while len(lags) < count and time.monotonic() < deadline:
        process.wait(process.lead_once())
    process.lease.release()
    result = {
        "jobs": count,
        "spread_seconds": spread_seconds,
        "fair_admission": engine.admission is not None,
        "fired": len(lags),
        "lag_p50_ms": percentile(lags, 50) * 1000,
        "lag_p99_ms": percentile(lags, 99) * 1000,
        "lag_max_ms": max(lags) * 1000 if lags else float("nan"),
        "materialise_runs_per_s": count / totals["materialise"] if totals.get("materialise") else 0,
        "publish_msgs_per_s": len(lags) / totals["fire"] if totals.get("fire") else 0,
    }
    print(
        f"{count:,} jobs due within {spread_seconds or 1}s"
        f" (fair admission {'on' if admission else 'off'}): fired {len(lags):,}; lag p50 "
        f"{result['lag_p50_ms']:.0f} ms, p99 {result['lag_p99_ms']:.0f} ms, max "
        f"{result['lag_max_ms']:.0f} ms; materialise {result['materialise_runs_per_s']:,.0f} "
        f"runs/s; publish {result['publish_msgs_per_s']:,.0f} msgs/s",
        flush=True,
    )
    return result
