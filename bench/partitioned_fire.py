"""Fire lag with real `runscheduler` processes and partitioned leadership: `count` jobs of
`tenant_count` tenants due in the same second, for each partition count P and each
number of scheduler processes. The broker's run queues are polled every 2 ms from this
process (no worker drains them): the k-th message's arrival is the first poll that sees k
messages, and its lag is that time minus the due instant. Fair admission is on, with room
for every run (no quota or watermark holds one back)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.test import override_settings

from core.broker import redis_queue_names
from core.keys import index_built_key
from core.partitions import partition_of
from core.redis import get_redis

from . import fire_profile
from .processes import start_scheduler, stop
from .world import bench_tenants, copy_jobs, drop_all_bench_data, index_jobs

RESULTS = Path(__file__).resolve().parent / "results"


def _arrivals(client, count: int, until: float) -> list[float]:
    """Wall-clock time at which the queues first held 1, 2, ... `count` messages."""
    seen: list[float] = []
    while len(seen) < count and time.time() < until:
        pipe = client.pipeline(transaction=False)
        for name in redis_queue_names(settings.SCHEDULER_SHARD_COUNT):
            pipe.llen(name)
        total = sum(pipe.execute())
        now = time.time()
        while len(seen) < min(total, count):
            seen.append(now)
        time.sleep(0.002)
    return seen


def _one(
    count: int,
    partitions: int,
    processes: int,
    tenant_count: int,
    lookahead: float,
    profile: bool = False,
) -> dict:
    lead = lookahead + 10  # the processes start, take their leases, then the window opens
    client = get_redis()
    tenants = bench_tenants(tenant_count)
    drop_all_bench_data(client)  # another benchmark's queued runs would be republished
    now = datetime.now(UTC)
    # Hourly interval jobs all anchored on one whole second (`spread_seconds=1`).
    due = (now + timedelta(seconds=lead + 1)).replace(microsecond=0)
    with override_settings(SCHEDULER_PARTITIONS=partitions):
        for tenant in tenants:
            copy_jobs(tenant, count // tenant_count, due, spread_seconds=1, name="plag")
            index_jobs(client, tenant)
        for p in range(partitions):
            client.set(index_built_key(p), "bench")
    env = {
        "SCHEDULER_PARTITIONS": str(partitions),
        "SCHEDULER_ADMISSION_BACKLOG_MIN": str(10**9),
        "SCHEDULER_LEASE_SECONDS": "5",
        "SCHEDULER_LOOKAHEAD_SECONDS": str(lookahead),
    }
    procs = [
        start_scheduler(log=RESULTS / f"plag-p{partitions}-s{n}.log", **env)
        for n in range(processes)
    ]
    spies = []
    if profile:  # from now until a few seconds after the instant
        seconds = due.timestamp() - time.time() + 5
        for n, proc in enumerate(procs):
            raw = RESULTS / f"plag-p{partitions}-s{n}.spy"
            raw.unlink(missing_ok=True)
            spies.append((raw, fire_profile.start(proc.pid, raw, seconds)))
    try:
        wait = due.timestamp() - time.time() - 1
        time.sleep(max(wait, 0))
        arrivals = _arrivals(client, count, due.timestamp() + 120)
        for _, spy in spies:
            if spy is not None:
                spy.wait(60)
    finally:
        for proc in procs:
            stop(proc)
    lags = sorted(t - due.timestamp() for t in arrivals)

    def pct(p: float) -> float:
        return lags[min(len(lags) - 1, int(len(lags) * p / 100))] * 1000 if lags else float("nan")

    spread = [0] * partitions
    for tenant in tenants:
        spread[partition_of(tenant.id, partitions)] += count // tenant_count
    row = {
        "partitions": partitions,
        "processes": processes,
        "jobs": count,
        "fired": len(lags),
        "lag_p50_ms": round(pct(50)),
        "lag_p99_ms": round(pct(99)),
        "lag_max_ms": round(lags[-1] * 1000) if lags else None,
        "jobs_per_partition": spread,
    }
    print(
        f"P={partitions} processes={processes}: fired {len(lags):,} of {count:,}; lag p50 "
        f"{row['lag_p50_ms']} ms, p99 {row['lag_p99_ms']} ms, max {row['lag_max_ms']} ms "
        f"(jobs per partition {spread})",
        flush=True,
    )
    for n, (raw, _) in enumerate(spies):
        fire_profile.report(fire_profile.summarise(raw), f"  process {n}")
    return row


def run(
    count: int,
    partitions: list[int],
    processes: list[int],
    tenant_count: int = 8,
    lookahead: float = 30.0,
    profile: bool = False,
) -> list[dict]:
    rows = []
    for p in partitions:
        for n in processes:
            rows.append(_one(count, p, n, tenant_count, lookahead, profile))
    return rows
