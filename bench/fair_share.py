"""Fair share under a flood, with fair admission on and off, side by side in one run.

Tenant A enqueues `count` `builtin.sleep` runs of 50 ms at once (over 100 jobs, so every
run-queue shard holds some); tenant B has a job that
fires every second. One Celery worker (`--workers` prefork processes) drains them, led by
a real leader loop in this process. Reported per mode: B's start lag (start minus
scheduled instant) p50/p99/max while A's flood drains, and A's throughput (runs per
second, first start to last end). Then, fair admission on, both tenants flood with
weights 3:1: the share of admissions (by `queued_at`) while both were backlogged.
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection
from django_tenants.utils import schema_context

from beat.admission_control import AdmissionConfig
from beat.engine import EngineConfig
from beat.loop import SchedulerProcess
from core import index
from core.clock import SystemClock
from core.keys import partition_count
from core.redis import get_redis
from jobs.services import Actor, job_create
from runs import states
from runs.ids import uuid7
from runs.models import Run
from tenants.models import Tenant

from .processes import start_worker, stop, wait_until
from .world import bench_tenants, drop_all_bench_data, drop_bench_data, percentile

ACTOR = Actor("bench")
SLEEP = {"type": "task", "task": "builtin.sleep"}
FLOOD_JOBS = 100  # A's flood spans many jobs, hence every run queue shard


def _flood(tenant: Tenant, job_id: int, count: int, due: datetime) -> None:
    """`count` manual runs due at `due`, written at once and put in the runs index."""
    client = get_redis()
    with schema_context(tenant.schema_name):
        for start in range(0, count, 5000):
            runs = [
                Run(
                    id=uuid7(),
                    job_id=job_id,
                    trigger=Run.Trigger.MANUAL,
                    scheduled_for=due,
                    due_at=due,
                )
                for _ in range(min(5000, count - start))
            ]
            Run.objects.bulk_create(runs)
            pipe = client.pipeline(transaction=False)
            index.put_runs(pipe, [(tenant.id, r.id, due) for r in runs])
            pipe.execute()
    index.wake(client, "run", partitions=range(partition_count()))


def _leader(admission: AdmissionConfig) -> tuple[threading.Event, threading.Thread]:
    stop_event = threading.Event()
    config = replace(EngineConfig.from_settings(), admission=admission)
    process = SchedulerProcess(
        client=get_redis(), clock=SystemClock(), config=config, holder="bench-fair"
    )

    def lead() -> None:
        try:
            process.run(stop_event)
        finally:
            connection.close()

    thread = threading.Thread(target=lead, name="leader", daemon=True)
    thread.start()
    return stop_event, thread


def _jobs(tenant: Tenant, name: str, **data) -> int:
    with schema_context(tenant.schema_name):
        return job_create(
            tenant=tenant,
            actor=ACTOR,
            data={"name": name, "target": SLEEP, **data},
            clock=SystemClock(),
        ).id


def _done(tenant: Tenant, job_ids: list[int]) -> int:
    with schema_context(tenant.schema_name):
        return Run.objects.filter(job_id__in=job_ids, status__in=states.TERMINAL).count()


def _flood_phase(a: Tenant, b: Tenant, count: int, fair: bool, timeout: float) -> dict:
    client = get_redis()
    drop_bench_data(client, [a, b])
    floods = [
        _jobs(a, f"flood-{n}", schedule=None, payload={"seconds": 0.05}) for n in range(FLOOD_JOBS)
    ]
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    tick = _jobs(
        b,
        "tick",
        schedule={"interval_seconds": 1, "start_at": start.isoformat()},
        payload={"seconds": 0.0},
    )
    stop_leader, leader = _leader(AdmissionConfig(enabled=fair))
    try:
        wait_until(lambda: datetime.now(UTC) >= start, 10, 0.05)
        for n, job_id in enumerate(floods):
            _flood(a, job_id, count // FLOOD_JOBS + (n < count % FLOOD_JOBS), start)
        finished = wait_until(lambda: _done(a, floods) >= count, timeout, 0.5)
    finally:
        stop_leader.set()
        leader.join(30)
    with schema_context(a.schema_name):
        times = list(
            Run.objects.filter(job_id__in=floods, status=states.SUCCEEDED).values_list(
                "started_at", "finished_at"
            )
        )
    first = min(t[0] for t in times)
    last = max(t[1] for t in times)
    with schema_context(b.schema_name):
        ticks = list(
            Run.objects.filter(
                job_id=tick, scheduled_for__gte=start, scheduled_for__lte=last
            ).values_list("scheduled_for", "started_at")
        )
    lags = [
        (started - scheduled).total_seconds() if started else (last - scheduled).total_seconds()
        for scheduled, started in ticks
    ]
    return {
        "finished": finished,
        "a_runs": len(times),
        "a_runs_per_second": round(len(times) / (last - first).total_seconds(), 1),
        "b_runs": len(ticks),
        "b_not_started": sum(1 for _, started in ticks if started is None),
        "b_start_lag_p50_s": round(percentile(lags, 50), 3),
        "b_start_lag_p99_s": round(percentile(lags, 99), 3),
        "b_start_lag_max_s": round(max(lags), 3) if lags else None,
    }


def _weights_phase(a: Tenant, b: Tenant, count: int, timeout: float) -> dict:
    client = get_redis()
    drop_bench_data(client, [a, b])
    Tenant.objects.filter(id=a.id).update(weight=3)
    jobs = {t.id: _jobs(t, "flood", schedule=None, payload={"seconds": 0.05}) for t in (a, b)}
    due = datetime.now(UTC)
    for tenant in (a, b):  # both waiting before the leader starts: a fair race
        _flood(tenant, jobs[tenant.id], count, due)
    stop_leader, leader = _leader(AdmissionConfig(enabled=True))
    try:
        # half of each flood admitted: both were backlogged all that time
        wait_until(lambda: _done(a, [jobs[a.id]]) + _done(b, [jobs[b.id]]) >= count, timeout, 0.5)
    finally:
        stop_leader.set()
        leader.join(30)
        Tenant.objects.filter(id=a.id).update(weight=1)
    admissions = []
    for tenant in (a, b):
        with schema_context(tenant.schema_name):
            admissions += [
                (queued_at, tenant.slug)
                for queued_at in Run.objects.filter(queued_at__isnull=False).values_list(
                    "queued_at", flat=True
                )
            ]
    admissions.sort()
    window = admissions[: count // 2]  # neither flood had run dry by then
    share_a = sum(1 for _, slug in window if slug == a.slug) / len(window)
    return {"admissions_counted": len(window), "share_a": round(share_a, 3)}


def run(count: int = 20_000, workers: int = 4, repeats: int = 1, timeout: float = 1800.0) -> dict:
    settings.SCHEDULER_MIN_INTERVAL_SECONDS = 1  # B's job fires every second
    a, b = bench_tenants(2)
    drop_all_bench_data(get_redis())  # what other benchmarks left (see drop_all_bench_data)
    Tenant.objects.filter(id__in=[a.id, b.id]).update(max_concurrency=1000, weight=1)
    worker = start_worker("-c", str(workers), log=Path("bench/results/fair-share-worker.log"))
    result: dict = {"flood": count, "worker_processes": workers, "modes": {}}
    try:
        for mode, fair in (("fair", True), ("fifo", False)) * repeats:
            figures = _flood_phase(a, b, count, fair, timeout)
            result["modes"].setdefault(mode, []).append(figures)
            print(
                f"{mode:>4}: B start lag p50 {figures['b_start_lag_p50_s']:.3f} s,"
                f" p99 {figures['b_start_lag_p99_s']:.3f} s, max {figures['b_start_lag_max_s']} s"
                f" ({figures['b_runs']} runs, {figures['b_not_started']} not started);"
                f" A {figures['a_runs_per_second']} runs/s",
                flush=True,
            )
        fair_rates = [f["a_runs_per_second"] for f in result["modes"]["fair"]]
        fifo_rates = [f["a_runs_per_second"] for f in result["modes"]["fifo"]]
        result["a_throughput_ratio"] = round(
            statistics.median(fair_rates) / statistics.median(fifo_rates), 3
        )
        print(f"A's throughput, fair / FIFO: {result['a_throughput_ratio']}", flush=True)
        result["weights_3_to_1"] = _weights_phase(a, b, max(count // 4, 200), timeout)
        print(
            f"weights 3:1, both flooding: A's share of admissions"
            f" {result['weights_3_to_1']['share_a']:.3f} (goal 0.75 +- 0.05)",
            flush=True,
        )
    finally:
        stop(worker)
        Tenant.objects.filter(id__in=[a.id, b.id]).update(max_concurrency=100, weight=1)
    return result
