"""DAG runs of 1,000 jobs end to end: a wide fan-out (a root and 999 jobs below it) and a
deep chain (1,000 jobs one after the other), `builtin.noop` everywhere, with a real leader
(in this process) and one Celery worker of two prefork processes.

Figures per shape, median over the repeats: the time from the root's start to the last
job's end, and the overhead per edge: that time less the time the jobs themselves ran,
over the number of edges. For the chain every edge is a hop through the whole path (the
worker's settle creates the run, the leader admits and publishes it, a worker claims it);
for the fan-out the 999 runs go through in parallel, so its figure is throughput-bound.
Each DAG run is checked: every job ran exactly once and succeeded.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

from django.db import connection
from django_tenants.utils import schema_context

from beat.loop import SchedulerProcess
from core.clock import SystemClock
from core.redis import get_redis
from jobs.services import Actor, job_create
from runs import states
from runs.models import DagRun, Run
from runs.services import job_trigger

from .processes import start_worker, stop, wait_until
from .world import bench_tenants, drop_bench_data

ACTOR = Actor("bench")
NOOP = {"type": "task", "task": "builtin.noop"}


def _create(tenant, name: str, upstreams: list[int]) -> int:
    data = {"name": name, "schedule": None, "target": NOOP}
    if upstreams:
        data["depends_on"] = upstreams
    return job_create(tenant=tenant, actor=ACTOR, data=data, clock=SystemClock()).id


def build(tenant, shape: str, size: int) -> int:
    """The jobs of one shape; returns the root's id."""
    with schema_context(tenant.schema_name):
        root = _create(tenant, f"{shape}-0", [])
        previous = root
        for n in range(1, size):
            upstream = previous if shape == "chain" else root
            previous = _create(tenant, f"{shape}-{n}", [upstream])
    return root


def _one_dag_run(tenant, root: int, size: int, timeout: float) -> dict:
    with schema_context(tenant.schema_name):
        run, _ = job_trigger(tenant=tenant, actor=ACTOR, job_id=root, clock=SystemClock())

        ended: list[DagRun] = []

        def finished() -> bool:
            dag_run_id = Run.objects.filter(id=run.id).values_list("dag_run", flat=True).first()
            if dag_run_id is not None:
                dag_run = DagRun.objects.get(id=dag_run_id)
                if dag_run.status != states.DAG_RUNNING:
                    ended.append(dag_run)
            return bool(ended)

        assert wait_until(finished, timeout, 0.25), f"the DAG run did not end within {timeout}s"
        dag_run = ended[0]
        runs = list(
            Run.objects.filter(dag_run=dag_run.id).values_list(
                "job_id", "status", "started_at", "finished_at"
            )
        )
    jobs = [r[0] for r in runs]
    assert len(jobs) == size == len(set(jobs)), (len(jobs), size, len(set(jobs)))
    assert {r[1] for r in runs} == {states.SUCCEEDED}, {r[1] for r in runs}
    start = min(r[2] for r in runs)
    end = max(r[3] for r in runs)
    total = (end - start).total_seconds()
    executing = sum((r[3] - r[2]).total_seconds() for r in runs)
    return {"total_s": total, "executing_s": executing}


def _leader() -> tuple[threading.Event, threading.Thread]:
    stop_event = threading.Event()
    process = SchedulerProcess(client=get_redis(), clock=SystemClock(), holder="bench-dag")

    def lead() -> None:
        try:
            process.run(stop_event)
        finally:
            connection.close()

    thread = threading.Thread(target=lead, name="leader", daemon=True)
    thread.start()
    return stop_event, thread


def run(size: int = 1000, repeats: int = 3, timeout: float = 600.0) -> dict:
    client = get_redis()
    [tenant] = bench_tenants(1)
    drop_bench_data(client, [tenant])
    built = time.perf_counter()
    roots = {shape: build(tenant, shape, size) for shape in ("fan-out", "chain")}
    build_seconds = time.perf_counter() - built
    worker = start_worker("-c", "2", log=Path("bench/results/dag-worker.log"))
    stop_leader, leader = _leader()
    result: dict = {"jobs_per_shape": size, "repeats": repeats, "create_s": build_seconds}
    try:
        for shape, root in roots.items():
            rounds = [_one_dag_run(tenant, root, size, timeout) for _ in range(repeats)]
            edges = size - 1
            totals = [r["total_s"] for r in rounds]
            overheads = [(r["total_s"] - r["executing_s"]) / edges for r in rounds]
            if shape == "fan-out":  # in parallel: the jobs' own time overlaps
                overheads = [r["total_s"] / edges for r in rounds]
            result[shape] = {
                "root_to_last_leaf_s": [round(t, 2) for t in totals],
                "median_s": round(statistics.median(totals), 2),
                "per_edge_ms": round(statistics.median(overheads) * 1000, 2),
            }
            print(
                f"DAG of {size:,} jobs, {shape}: root to last leaf "
                f"{', '.join(f'{t:.2f}' for t in totals)} s (median {statistics.median(totals):.2f}"
                f" s); per edge {result[shape]['per_edge_ms']:.2f} ms; every job ran once",
                flush=True,
            )
    finally:
        stop_leader.set()
        leader.join(30)
        stop(worker)
    print(f"(creating the {2 * size:,} jobs with their edges took {build_seconds:.1f} s)")
    return result
