"""The leader with thousands of tenants: iteration length, lease renewal gaps, fire lag, and
failover time.

Relay, reap, index sync and reconciliation each query every tenant schema once per pass.
With the passes sliced by a time budget (and the lease renewed between tenants), a leader
with thousands of tenants keeps its iterations short; with unbounded passes and no renewal
in between (the engine before issue 8), one iteration holds the lease for the whole pass.

Tenants (`bench-m-*`) are provisioned by `tenant_provision` (cloned from the template
schema) from a few threads, and stay in the benchmark database only with `--keep`. Each
has `jobs` jobs firing every `interval` seconds, their instants spread evenly over `spread`
seconds (0: every job of every tenant due at the same instant). A real leader
(`SchedulerProcess`, system clock, default settings) runs for `seconds` in each mode, and
every lease renewal is timed. With `failover`, two real `runscheduler` processes then run
the same world; the leader is killed with SIGKILL, and the benchmark reports when the
standby took the lease and the fire lag of the runs due after the kill.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.db import connection
from psycopg import sql

from beat.engine import EngineConfig
from beat.lease import Lease, LeaseLost
from beat.loop import SchedulerProcess
from core.clock import SystemClock
from core.keys import index_built_key, leader_info_key
from core.redis import get_redis
from core.sql import table
from tenants.models import Tenant

from .processes import kill9, start_scheduler, stop, wait_until
from .provisioning import drop_tenants
from .tenant_upgrade import bench_m_tenants
from .world import (
    BENCH_QUOTA,
    UNBOUNDED_ADMISSION,
    copy_jobs,
    drop_all_bench_data,
    index_jobs,
    percentile,
)

RESULTS = Path(__file__).resolve().parent / "results"
# The first instants are this far ahead: the leader starts with all ahead. A mode runs for
# `seconds` from then, so it fires only for `seconds - lead_in` (CI's small size: the last 4 of 12).
LEAD_IN_SECONDS = 35


def _ensure_jobs(tenants: list[Tenant], jobs: int) -> None:
    with connection.cursor() as cursor:
        for tenant in tenants:
            cursor.execute(
                sql.SQL("SELECT count(*) FROM {}").format(table(tenant.schema_name, "jobs_job"))
            )
            have = cursor.fetchone()[0]
            if have > jobs:
                cursor.execute(
                    sql.SQL("DELETE FROM {t} WHERE id > (SELECT min(id) + %s - 1 FROM {t})").format(
                        t=table(tenant.schema_name, "jobs_job")
                    ),
                    [jobs],
                )
            elif have < jobs:
                copy_jobs(tenant, jobs - have, datetime.now(UTC), name=f"every-x-{have}")


def _pause_others(tenants: list[Tenant]) -> None:
    """Kept tenants beyond the ones measured (an earlier, larger run's) must not fire
    meanwhile: their jobs paused, and their runs gone (a run left queued would be
    published again by the leader's reaper in the window measured)."""
    ids = {t.id for t in tenants}
    with connection.cursor() as cursor:
        for other in Tenant.objects.filter(slug__startswith="bench-m-").exclude(id__in=ids):
            cursor.execute(
                sql.SQL("UPDATE {} SET paused = true WHERE NOT paused").format(
                    table(other.schema_name, "jobs_job")
                )
            )
            for name in ("runs_attempt", "runs_run"):
                cursor.execute(sql.SQL("DELETE FROM {}").format(table(other.schema_name, name)))


def _run_leader(config: EngineConfig, seconds: float, checkpoints: bool) -> dict:
    client = get_redis()
    process = SchedulerProcess(client=client, clock=SystemClock(), config=config, holder="bench")
    renewals: list[float] = []
    original = Lease.renew

    def timed_renew(lease: Lease) -> None:
        renewals.append(time.monotonic())
        original(lease)

    Lease.renew = timed_renew  # type: ignore[method-assign]
    iterations: list[float] = []
    lost = 0
    try:
        assert process.try_lead()
        if not checkpoints:
            process.engine.checkpoint = lambda: None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                pause = process.lead_once()
            except LeaseLost:
                lost += 1
                process.step_down("bench: lease lost")
                assert process.try_lead()
                if not checkpoints:
                    process.engine.checkpoint = lambda: None
                continue
            iterations.append(time.monotonic() - started)
            process.wait(min(pause, 0.05))
    finally:
        Lease.renew = original  # type: ignore[method-assign]
        process.lease.release()
    gaps = [b - a for a, b in itertools.pairwise(renewals)]
    return {
        "iterations": len(iterations),
        "iteration_ms_p50": round(statistics.median(iterations) * 1000, 1),
        "iteration_ms_p99": round(percentile(iterations, 99) * 1000, 1),
        "iteration_ms_max": round(max(iterations) * 1000, 1),
        "renewal_gap_ms_max": round(max(gaps) * 1000, 1) if gaps else None,
        "lease_ms": process.lease.expire_seconds * 1000,
        "leases_lost": lost,
    }


def _lags(tenants: list[Tenant], since: datetime, until: datetime) -> list[float]:
    """Fire lag (queued - due) of the runs due in [since, until); a run due in that span
    and never queued counts as infinitely late."""
    lags = []
    with connection.cursor() as cursor:
        for tenant in tenants:
            cursor.execute(
                sql.SQL(
                    "SELECT extract(epoch FROM queued_at - scheduled_for) FROM {} "
                    "WHERE scheduled_for >= %s AND scheduled_for < %s"
                ).format(table(tenant.schema_name, "runs_run")),
                [since, until],
            )
            lags += [float("inf") if r[0] is None else float(r[0]) for r in cursor.fetchall()]
    return lags


def _expected_slots(tenants: list[Tenant], since: datetime, until: datetime) -> int:
    """How many (job, slot) pairs fall in [since, until): every one must have a run."""
    total = 0
    with connection.cursor() as cursor:
        for tenant in tenants:
            cursor.execute(
                sql.SQL(
                    "SELECT coalesce(sum(greatest(0, ceil(extract(epoch FROM %(b)s - anchor_at)"
                    " / interval_seconds)) - greatest(0, ceil(extract(epoch FROM %(a)s - "
                    "anchor_at) / interval_seconds))), 0) FROM {}"
                ).format(table(tenant.schema_name, "jobs_job")),
                {"a": since, "b": until},
            )
            total += int(cursor.fetchone()[0])
    return total


def _lag_figures(tenants: list[Tenant], since: datetime, until: datetime) -> dict:
    lags = _lags(tenants, since, until)
    fired = [lag for lag in lags if lag != float("inf")]
    return {
        "slots_due": _expected_slots(tenants, since, until),
        "runs_fired": len(fired),
        "runs_not_fired": len(lags) - len(fired),
        "fire_lag_ms_p50": round(percentile(fired, 50) * 1000, 1) if fired else None,
        "fire_lag_ms_p99": round(percentile(fired, 99) * 1000, 1) if fired else None,
        "fire_lag_ms_max": round(max(fired) * 1000, 1) if fired else None,
    }


def _reset(
    client, tenants: list[Tenant], interval: int, spread: float, lead_in: float = LEAD_IN_SECONDS
) -> datetime:
    """Clear runs and Redis; every job fires every `interval` s, the first instants spread
    evenly over `spread` s. Returns the first instant once it is `lead_in` s ahead (with
    10,000 tenants, writing the schedules takes minutes: they are written that far ahead)."""
    client.flushdb()
    started = time.monotonic()
    with connection.cursor() as cursor:
        for tenant in tenants:
            for name in ("runs_attempt", "runs_run"):
                cursor.execute(sql.SQL("DELETE FROM {}").format(table(tenant.schema_name, name)))
        cursor.execute(
            sql.SQL("SELECT count(*) FROM {}").format(table(tenants[0].schema_name, "jobs_job"))
        )
        per_tenant = cursor.fetchone()[0]
    # Writing and indexing the schedules costs a few times what clearing the runs did.
    ahead = lead_in + 5 + 4 * (time.monotonic() - started)
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=round(ahead))
    total = max(1, per_tenant * len(tenants))
    with connection.cursor() as cursor:
        for n, tenant in enumerate(tenants):
            # Job k of tenant n is the (n * per_tenant + k)-th of `total` evenly spread.
            cursor.execute(
                sql.SQL(
                    "UPDATE {t} j SET schedule_kind = 'interval', interval_seconds = %(interval)s, "
                    "cron_expression = '', cron_resolved = '', paused = false, deleted_at = NULL, "
                    "anchor_at = %(first)s + make_interval(secs => floor((%(base)s + r.k) "
                    "* %(spread)s / %(total)s)), next_run_at = %(first)s + make_interval(secs => "
                    "floor((%(base)s + r.k) * %(spread)s / %(total)s)) FROM (SELECT id, "
                    "row_number() OVER (ORDER BY id) - 1 AS k FROM {t}) r WHERE r.id = j.id"
                ).format(t=table(tenant.schema_name, "jobs_job")),
                {
                    "interval": interval,
                    "first": first,
                    "base": n * per_tenant,
                    "spread": spread,
                    "total": total,
                },
            )
    for tenant in tenants:
        index_jobs(client, tenant)
    client.set(index_built_key(), "bench")
    lead = (first - datetime.now(UTC)).total_seconds()
    time.sleep(max(0.0, lead - lead_in))
    print(f"schedules written; the first instant was {lead:.1f} s ahead", flush=True)
    return first


def _failover(
    client, tenants: list[Tenant], interval: int, spread: float, seconds: float, lead_in: float
) -> dict:
    """Two runscheduler processes; the leader is killed with SIGKILL once it has fired for
    a while; the standby's takeover and the lag of what fell due after the kill."""
    first = _reset(client, tenants, interval, spread, lead_in)
    env = {"SCHEDULER_ADMISSION_BACKLOG_MIN": str(10**9)}  # no workers: room for every run
    procs = [start_scheduler(log=RESULTS / f"failover-{n}.log", **env) for n in (1, 2)]
    try:
        assert wait_until(lambda: client.get(leader_info_key()), timeout=60)
        # Steady state: the first instants have passed and been fired.
        time.sleep(max(0.0, (first - datetime.now(UTC)).total_seconds()) + seconds / 2)
        holder = client.get(leader_info_key()).decode()
        leader = next(p for p in procs if holder.endswith(f":{p.pid}"))
        standby = next(p for p in procs if p is not leader)
        killed = datetime.now(UTC)
        started = time.monotonic()
        kill9(leader)
        took = wait_until(
            lambda: (client.get(leader_info_key()) or b"").decode().endswith(f":{standby.pid}"),
            timeout=60,
            interval=0.01,
        )
        takeover = time.monotonic() - started
        time.sleep(seconds)
        stopped = datetime.now(UTC)
    finally:
        for proc in procs:
            stop(proc)
    settled = stopped - timedelta(seconds=5)  # what fell due later may not be fired yet
    return {
        "standby_took_lease_s": round(takeover, 2) if took else None,
        "due_after_kill": _lag_figures(tenants, killed, settled),
        "before_kill": _lag_figures(tenants, first, killed),
    }


def run(
    tenant_count: int = 2000,
    seconds: float = 60.0,
    keep: bool = False,
    *,
    jobs: int = 1,
    interval: int = 10,
    spread: float = 0.0,
    modes: tuple[str, ...] = ("bounded", "unbounded"),
    failover: bool = False,
    threads: int = 4,
    lead_in: float = LEAD_IN_SECONDS,
) -> dict:
    client = get_redis()
    started = time.perf_counter()
    tenants, made = bench_m_tenants(tenant_count, threads)
    Tenant.objects.filter(slug__startswith="bench-m-").update(max_concurrency=BENCH_QUOTA)
    # The other benchmarks' tenants (fire-lag, partitioned-fire) may have left up to
    # 100,000 runs queued with no worker: the leader's reaper would publish them again
    # in the window measured here.
    drop_all_bench_data(client, keep_prefix="bench-m-")
    _ensure_jobs(tenants, jobs)
    _pause_others(tenants)
    results = {
        "tenants": tenant_count,
        "jobs_per_tenant": jobs,
        "interval_s": interval,
        "spread_s": spread,
        "provisioning": made,
        "setup_seconds": round(time.perf_counter() - started, 1),
        "modes": {},
    }
    print("setup", results, flush=True)
    base = replace(
        EngineConfig.from_settings(),
        visibility_timeout_seconds=60,
        admission=UNBOUNDED_ADMISSION,
    )
    configs = {
        "bounded": (base, True),
        "unbounded": (replace(base, sweep_budget_seconds=1e9, rebuild_budget_seconds=1e9), False),
    }
    for mode in modes:
        config, checkpoints = configs[mode]
        since = _reset(client, tenants, interval, spread, lead_in)
        figures = _run_leader(config, seconds, checkpoints)
        settled = datetime.now(UTC) - timedelta(seconds=2)
        figures.update(_lag_figures(tenants, since, settled))
        results["modes"][mode] = figures
        print(mode, figures, flush=True)
    if failover:
        results["failover"] = _failover(client, tenants, interval, spread, seconds, lead_in)
        print("failover", results["failover"], flush=True)
    client.flushdb()
    if not keep:
        drop_tenants("bench-m-")
    return results
