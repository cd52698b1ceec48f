"""Reads of dependency graphs and DAG runs for the API and the portal (the current tenant
schema)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from operator import or_
from typing import Any

from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet

from jobs.dag import component
from jobs.models import Dependency, Job
from jobs.services import JobNotFound

from . import states
from .models import DagRun, Run


class DagRunNotFound(Exception):
    pass


@dataclass(frozen=True)
class GraphNode:
    job: Job
    last_run: Run | None  # the job's latest run that has begun or ended


@dataclass(frozen=True)
class JobGraph:
    job_id: int
    nodes: list[GraphNode]
    edges: list[tuple[int, int]]
    truncated: bool  # more jobs are connected than `limit`


def _latest_runs(job_ids: list[int], now: datetime) -> dict[int, Run]:
    """Each job's latest run due by now, one index probe of (job, -scheduled_for) each."""
    latest: dict[int, Run] = {}
    for job_id in job_ids:
        run = (
            Run.objects.filter(job_id=job_id, scheduled_for__lte=now)
            .order_by("-scheduled_for", "-id")
            .only("id", "status", "skip_reason", "scheduled_for", "started_at", "finished_at")
            .first()
        )
        if run is not None:
            latest[job_id] = run
    return latest


def job_graph(*, job_id: int, now: datetime, limit: int = 500) -> JobGraph:
    """The jobs connected to `job_id` through dependencies (either direction), nearest
    first up to `limit`, with the edges among them and each job's latest run."""
    if not Job.objects.filter(id=job_id, deleted_at__isnull=True).exists():
        raise JobNotFound(job_id)
    edges = list(Dependency.objects.values_list("upstream_id", "downstream_id"))
    nodes, own = component(edges, job_id)
    truncated = len(nodes) > limit
    if truncated:
        nodes = _nearest(own, job_id, limit)
        own = [(u, d) for u, d in own if u in nodes and d in nodes]
    jobs = {j.id: j for j in Job.objects.filter(id__in=nodes, deleted_at__isnull=True)}
    own = [(u, d) for u, d in own if u in jobs and d in jobs]
    latest = _latest_runs(sorted(jobs), now)
    return JobGraph(
        job_id,
        [GraphNode(jobs[i], latest.get(i)) for i in sorted(jobs)],
        sorted(own),
        truncated,
    )


def _nearest(edges: list[tuple[int, int]], start: int, limit: int) -> set[int]:
    from collections import defaultdict, deque

    neighbours: dict[int, list[int]] = defaultdict(list)
    for u, d in edges:
        neighbours[u].append(d)
        neighbours[d].append(u)
    seen, todo = {start}, deque([start])
    while todo and len(seen) < limit:
        for other in neighbours[todo.popleft()]:
            if other not in seen and len(seen) < limit:
                seen.add(other)
                todo.append(other)
    return seen


def dag_run_list(
    *,
    job_id: int | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[DagRun]:
    """DAG runs started in [since, until), of a status, and with a run of `job_id` (its
    root or any job inside it); the caller orders and pages."""
    dag_runs = DagRun.objects.all()
    if job_id is not None:
        inside = Run.objects.filter(dag_run=OuterRef("id"), job_id=job_id)
        dag_runs = dag_runs.filter(Exists(inside))
    if status is not None:
        dag_runs = dag_runs.filter(status=status)
    if since is not None:
        dag_runs = dag_runs.filter(started_at__gte=since)
    if until is not None:
        dag_runs = dag_runs.filter(started_at__lt=until)
    return dag_runs


@dataclass(frozen=True)
class DagRunNode:
    job_id: int
    name: str
    deleted: bool
    run: Run | None  # None: not reached yet (its upstreams have not all succeeded)


@dataclass(frozen=True)
class DagRunDetail:
    dag_run: DagRun
    nodes: list[DagRunNode]
    edges: list[tuple[int, int]]


def dag_run_get(*, dag_run_id: Any) -> DagRunDetail:
    dag_run = DagRun.objects.filter(id=dag_run_id).first()
    if dag_run is None:
        raise DagRunNotFound(dag_run_id)
    runs = {r.job_id: r for r in Run.objects.filter(dag_run=dag_run.id)}
    jobs = dict(
        (j.id, j) for j in Job.objects.filter(id__in=dag_run.nodes).only("id", "name", "deleted_at")
    )
    nodes = [
        DagRunNode(
            job_id,
            jobs[job_id].name if job_id in jobs else f"job {job_id}",
            job_id not in jobs or jobs[job_id].deleted_at is not None,
            runs.get(job_id),
        )
        for job_id in dag_run.nodes
    ]
    return DagRunDetail(dag_run, nodes, [tuple(e) for e in dag_run.edges])


def latest_dag_run_of(job_id: int) -> DagRun | None:
    """The latest DAG run with a run of the job (for the portal's graph colours)."""
    return dag_run_list(job_id=job_id).order_by("-started_at", "-id").first()


# --- per job: the DAG runs that include it (the portal's graph colours and lists) ----------

RUNNING_SCAN = 500  # running DAG runs read per graph, to find those not at a job yet

_LATEST_DAG_RUN_SQL = """
SELECT r.id FROM unnest(%s::bigint[]) AS j(id)
CROSS JOIN LATERAL (
    SELECT id FROM runs_run WHERE job_id = j.id AND dag_run IS NOT NULL
    ORDER BY scheduled_for DESC, id DESC LIMIT %s
) AS r
"""


@dataclass(frozen=True)
class JobInDagRun:
    dag_run: DagRun
    run: Run | None  # None: the DAG run has not reached the job yet


def _runs_in_dag_runs(job_ids: list[int], per_job: int) -> list[Run]:
    """Each job's newest `per_job` runs that belong to a DAG run (by scheduled time): one
    statement, an index probe of (job, -scheduled_for) per job."""
    with connection.cursor() as cursor:
        cursor.execute(_LATEST_DAG_RUN_SQL, [job_ids, per_job])
        ids = [row[0] for row in cursor.fetchall()]
    return list(Run.objects.filter(id__in=ids))


def _running_with(job_ids: set[int]) -> list[DagRun]:
    """Running DAG runs whose snapshot holds one of the jobs (jsonb containment, so only
    those DAG runs' node lists are read), newest first, at most RUNNING_SCAN."""
    if not job_ids:
        return []
    holds = reduce(or_, (Q(nodes__contains=[job_id]) for job_id in sorted(job_ids)))
    running = DagRun.objects.filter(holds, status=states.DAG_RUNNING)
    return list(running.order_by("-started_at", "-id")[:RUNNING_SCAN])


def latest_dag_run_per_job(job_ids: list[int]) -> dict[int, JobInDagRun]:
    """For each job, the latest DAG run that includes it and its run there: a DAG run with
    a run of the job, or a running one that will reach it (no run yet). Bounded by the
    jobs' own histories, not by how many DAG runs the tenant has."""
    job_ids = list(job_ids)
    if not job_ids:
        return {}
    own = {run.job_id: run for run in _runs_in_dag_runs(job_ids, 1)}
    running = _running_with(set(job_ids))
    in_running = {
        (run.dag_run, run.job_id): run
        for run in Run.objects.filter(dag_run__in=[d.id for d in running], job_id__in=job_ids)
    }
    dag_runs = {d.id: d for d in DagRun.objects.filter(id__in={r.dag_run for r in own.values()})}
    dag_runs.update({d.id: d for d in running})
    out: dict[int, JobInDagRun] = {}
    for job_id in job_ids:
        candidates = [
            JobInDagRun(d, in_running.get((d.id, job_id))) for d in running if job_id in d.nodes
        ]
        mine = own.get(job_id)
        if mine is not None and mine.dag_run in dag_runs:
            candidates.append(JobInDagRun(dag_runs[mine.dag_run], mine))
        if candidates:
            out[job_id] = max(candidates, key=lambda c: (c.dag_run.started_at, str(c.dag_run.id)))
    return out


def dag_runs_including(*, job_id: int, limit: int = 10) -> list[DagRun]:
    """The newest `limit` DAG runs that include the job (with a run of it, or running
    towards it), newest first."""
    ids = {run.dag_run for run in _runs_in_dag_runs([job_id], limit)}
    found = {d.id: d for d in DagRun.objects.filter(id__in=ids)}
    found.update({d.id: d for d in _running_with({job_id})})
    return sorted(found.values(), key=lambda d: (d.started_at, str(d.id)), reverse=True)[:limit]
