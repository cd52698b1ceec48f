"""Reads of a tenant's jobs for the API and the dashboard (the current tenant schema).

The upstream ids come in one prefetch; what a job's runs say (its last run) is added by
`runs.selectors.with_last_run`, since jobs know nothing of runs.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Prefetch, QuerySet
from django.db.models.expressions import RawSQL

from .models import Dependency, Job
from .services import JobNotFound


def _with_relations(queryset: QuerySet[Job]) -> QuerySet[Job]:
    upstreams = Prefetch(
        "upstream_links", queryset=Dependency.objects.order_by("upstream_id"), to_attr="upstreams"
    )
    return queryset.prefetch_related(upstreams, "calendars")


# Correlated to the outer job (`jobs_job`, the alias Django gives a Job queryset's table).
_UPSTREAM_IDS = (
    "ARRAY(SELECT d.upstream_id FROM jobs_dependency d WHERE d.downstream_id = jobs_job.id"
    " ORDER BY d.upstream_id)"
)
_CALENDAR_NAMES = (
    "ARRAY(SELECT c.name FROM jobs_job_calendars jc JOIN jobs_exclusioncalendar c"
    " ON c.id = jc.exclusioncalendar_id WHERE jc.job_id = jobs_job.id ORDER BY c.name)"
)


def with_relation_ids(queryset: QuerySet[Job]) -> QuerySet[Job]:
    """Jobs annotated with `upstream_ids` and `calendar_names` (each sorted), in the same
    statement: what the API shows of a job's relations. Two prefetch queries per page, and
    Django's prefetch machinery, cost more than the rest of a page of 50 together; the
    subqueries are SQL, which Django does not have to compile. They name the job's table
    `jobs_job`, as Django does in a top-level query: not for a nested queryset."""
    return queryset.annotate(
        upstream_ids=RawSQL(_UPSTREAM_IDS, (), output_field=ArrayField(models.BigIntegerField())),
        calendar_names=RawSQL(_CALENDAR_NAMES, (), output_field=ArrayField(models.CharField())),
    )


def job_list(
    *, state: str | None = None, priority: str | None = None, q: str | None = None
) -> QuerySet[Job]:
    """Live (not deleted) jobs, filtered, with their upstreams and calendars prefetched;
    the caller orders and pages."""
    return _with_relations(job_filter(state=state, priority=priority, q=q))


def job_filter(
    *, state: str | None = None, priority: str | None = None, q: str | None = None
) -> QuerySet[Job]:
    """Live (not deleted) jobs, filtered."""
    jobs = Job.objects.filter(deleted_at__isnull=True)
    if state == "paused":
        jobs = jobs.filter(paused=True)
    elif state == "parked":
        jobs = jobs.filter(paused=False).exclude(fault_code="")
    elif state == "active":
        jobs = jobs.filter(paused=False, fault_code="", completed_at__isnull=True)
    elif state == "completed":
        jobs = jobs.filter(paused=False, fault_code="", completed_at__isnull=False)
    if priority is not None:
        jobs = jobs.filter(priority=priority)
    if q:
        jobs = jobs.filter(name__icontains=q)
    return jobs


def job_get(*, job_id: int, queryset: QuerySet[Job] | None = None, prefetch: bool = True) -> Job:
    """A live job; `prefetch`: with its upstreams and calendars prefetched (else the caller's
    queryset says what it needs, e.g. `with_relation_ids`)."""
    base = queryset if queryset is not None else Job.objects.all()
    base = base.filter(id=job_id, deleted_at__isnull=True)
    job = (_with_relations(base) if prefetch else base).first()
    if job is None:
        raise JobNotFound(job_id)
    return job


# --- the graph around a job, read without loading the tenant's whole edge set -------------

_COMPONENT_SQL = """
WITH RECURSIVE near(id) AS (
    SELECT %(job)s::bigint
    UNION
    SELECT CASE WHEN d.upstream_id = near.id THEN d.downstream_id ELSE d.upstream_id END
    FROM jobs_dependency d JOIN near ON d.upstream_id = near.id OR d.downstream_id = near.id
)
SELECT id FROM near LIMIT %(limit)s
"""

_DESCENDANTS_SQL = """
WITH RECURSIVE down(id) AS (
    SELECT downstream_id FROM jobs_dependency WHERE upstream_id = %(job)s
    UNION
    SELECT d.downstream_id FROM jobs_dependency d JOIN down ON d.upstream_id = down.id
)
SELECT id FROM down WHERE id = ANY(%(among)s)
"""


def job_component(*, job_id: int, limit: int) -> tuple[set[int], list[tuple[int, int]], bool]:
    """The jobs connected to `job_id` through dependencies either way, nearest first up to
    `limit` (a recursive walk that stops there), the edges among them, and whether more
    are connected. Deleting a job removes its edges, so every node is a live job."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_COMPONENT_SQL, {"job": job_id, "limit": limit + 1})
        ids = [row[0] for row in cursor.fetchall()]
    truncated = len(ids) > limit
    nodes = set(ids[:limit])
    edges = sorted(
        Dependency.objects.filter(upstream_id__in=nodes, downstream_id__in=nodes).values_list(
            "upstream_id", "downstream_id"
        )
    )
    return nodes, edges, truncated


def downstream_among(*, job_id: int, among: list[int]) -> set[int]:
    """Which of `among` are downstream of `job_id` (so an edge from them to it would close
    a cycle): one recursive walk down from the job."""
    from django.db import connection

    if not among:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(_DESCENDANTS_SQL, {"job": job_id, "among": list(among)})
        return {row[0] for row in cursor.fetchall()}


def job_search(*, q: str, exclude: set[int], limit: int = 10) -> list[Job]:
    """Live jobs for a picker: the job with that id (`12`; `#12` asks for the id alone),
    then names containing `q` (prefix matches first); `exclude` left out. No trigram
    index: a name that matches nothing reads the whole jobs table (docs/benchmarks.md)."""
    q = q.strip()
    live = Job.objects.filter(deleted_at__isnull=True).exclude(id__in=exclude).only("id", "name")
    found: list[Job] = []
    digits = q.removeprefix("#")
    if digits.isdigit() and int(digits) < 2**63:
        found = list(live.filter(id=int(digits)))
        if q.startswith("#"):
            return found
    if q:
        named = live.filter(name__icontains=q).exclude(id__in=[j.id for j in found])
        found += list(named.order_by("id")[: limit - len(found)])
    lowered = q.lower()
    return sorted(
        found, key=lambda j: (str(j.id) != digits, not j.name.lower().startswith(lowered))
    )
