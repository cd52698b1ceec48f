"""Registered jobs at scale with partitioned leadership (`SCHEDULER_PARTITIONS = P`).

The world: `size` jobs over `tenant_count` tenants, spread over the P partitions by tenant
(crc32 of the tenant id), bulk-loaded (COPY) and indexed once; `due` of them (the same in
every repeat) made due at X.

1. Iteration cost, per partition: a fresh leader of that partition materialises its share
   of the due jobs (the clock at X - 10 s) and fires them (at X); median of `repeats`.
2. Memory: Redis `used_memory` and each partition's index (members, bytes), PostgreSQL's
   database size, and the resident memory of each `runscheduler` process leading.
3. Takeover: two real `runscheduler` processes share the partitions; the one leading
   partition 0 is killed with SIGKILL, `kills` times (a new process started each time);
   takeover is the time until every partition it led is led by the survivor.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from django.test import override_settings

from core.keys import index_built_key, leader_info_key
from core.partitions import partition_of
from core.redis import get_redis

from .leader_cost import X, _grow, measure, storage_figures
from .processes import kill9, start_scheduler, stop, tree_rss_bytes, wait_until
from .world import bench_tenants, copy_jobs, drop_bench_data, job_count

RESULTS = Path(__file__).resolve().parent / "results"
LEASE_SECONDS = 2


def _holders(client, partitions: int) -> dict[int, str | None]:
    pipe = client.pipeline(transaction=False)
    for n in range(partitions):
        pipe.get(leader_info_key(n))
    return {
        n: (raw.decode().split(" ", 1)[0] if raw else None) for n, raw in enumerate(pipe.execute())
    }


def _pid_of(holder: str | None) -> int | None:
    """`host:pid` (what `leader_info_key` starts with) -> pid."""
    if not holder:
        return None
    try:
        return int(holder.rsplit(":", 1)[1].split()[0])
    except (IndexError, ValueError):
        return None


def _takeovers(client, partitions: int, kills: int) -> dict:
    env = {
        "SCHEDULER_PARTITIONS": str(partitions),
        "SCHEDULER_LEASE_SECONDS": str(LEASE_SECONDS),
        "SCHEDULER_ADMISSION_BACKLOG_MIN": str(10**9),
    }
    made = 0

    def start():
        nonlocal made
        made += 1
        return start_scheduler(log=RESULTS / f"pscale-{made}.log", **env)

    procs = [start(), start()]
    takeovers, rss = [], []
    try:
        for _ in range(kills):
            pids = {p.pid for p in procs if p.poll() is None}

            def settled(pids=pids) -> bool:
                # every partition led, and by both processes (the survivor alone would
                # make the next kill a whole-fleet restart, not a takeover)
                owners = {_pid_of(h) for h in _holders(client, partitions).values()}
                return owners == pids

            if not wait_until(settled, timeout=120, interval=0.1):
                raise RuntimeError(f"the partitions did not spread over {sorted(pids)}")
            time.sleep(2 * LEASE_SECONDS)  # a few iterations of each leader
            rss.extend(tree_rss_bytes(p.pid) for p in procs)
            victim_pid = _pid_of(_holders(client, partitions)[0])
            victim = next(p for p in procs if p.pid == victim_pid)
            survivor = next(p for p in procs if p is not victim)
            lost = [n for n, h in _holders(client, partitions).items() if _pid_of(h) == victim_pid]
            killed_at = time.monotonic()
            kill9(victim)

            def taken(lost=lost, survivor=survivor) -> bool:
                holders = _holders(client, partitions)
                return all(_pid_of(holders[n]) == survivor.pid for n in lost)

            if not wait_until(taken, timeout=60, interval=0.01):
                raise RuntimeError(f"partitions {lost} not led again within 60 s")
            takeovers.append(time.monotonic() - killed_at)
            print(
                f"  killed the leader of partitions {lost}: led again after {takeovers[-1]:.2f} s",
                flush=True,
            )
            procs = [survivor, start()]
    finally:
        for proc in procs:
            stop(proc)
    return {
        "takeover_s": [round(t, 2) for t in takeovers],
        "takeover_median_s": round(statistics.median(takeovers), 2) if takeovers else None,
        "takeover_max_s": round(max(takeovers), 2) if takeovers else None,
        "scheduler_rss_bytes_max": max(rss) if rss else None,
    }


def run(
    size: int,
    partitions: int = 4,
    tenant_count: int = 40,
    due: int = 1000,
    repeats: int = 5,
    kills: int = 5,
    keep: bool = False,
) -> dict:
    with override_settings(SCHEDULER_PARTITIONS=partitions):
        client = get_redis()
        tenants = bench_tenants(tenant_count)
        per_tenant_due = due // tenant_count
        if not keep or any(job_count(t) == 0 for t in tenants):
            drop_bench_data(client, tenants)
            for tenant in tenants:
                copy_jobs(tenant, per_tenant_due, X, name="due")
        load_seconds = _grow(client, tenants, size)
        # what is there, not what was asked for: `--keep` reuses a larger load as it is
        registered = sum(job_count(t) for t in tenants)
        for n in range(partitions):
            client.set(index_built_key(n), "bench")
        by_partition: dict[int, list] = {n: [] for n in range(partitions)}
        for tenant in tenants:
            by_partition[partition_of(tenant.id, partitions)].append(tenant)
        print(
            f"{registered:,} jobs over {tenant_count} tenants, P={partitions}: tenants per "
            f"partition {[len(v) for v in by_partition.values()]} (load {load_seconds:.1f} s)",
            flush=True,
        )
        iterations = []
        for n, members in by_partition.items():
            if not members:
                continue
            row = measure(registered, members, per_tenant_due * len(members), repeats, partition=n)
            row["partition"] = n
            iterations.append(row)
            print(
                f"  partition {n}: {row['due']:,} due: materialise {row['materialise_ms']:.1f}"
                f" ms, fire {row['fire_ms']:.1f} ms, iteration {row['iteration_ms']:.1f} ms",
                flush=True,
            )
        memory = storage_figures(client, tenants, partitions)
        print(
            f"  Redis used_memory {memory['redis_used_memory_bytes'] / 2**20:,.0f} MiB, index "
            f"{memory['redis_index_bytes_per_job']} B/job over {memory['index_members']:,} members "
            f"({[p['members'] for p in memory['per_partition']]} per partition); PostgreSQL "
            f"{memory['pg_database_bytes'] / 2**30:.2f} GiB",
            flush=True,
        )
        takeover = _takeovers(client, partitions, kills) if kills else {}
        if takeover:
            print(
                f"  takeover after SIGKILL: median {takeover['takeover_median_s']} s, max "
                f"{takeover['takeover_max_s']} s over {kills}; scheduler RSS at most "
                f"{takeover['scheduler_rss_bytes_max'] / 2**20:.0f} MiB",
                flush=True,
            )
    return {
        "registered": registered,
        "partitions": partitions,
        "tenants": tenant_count,
        "load_seconds": round(load_seconds, 1),
        "iterations": iterations,
        "memory": memory,
        **takeover,
    }
