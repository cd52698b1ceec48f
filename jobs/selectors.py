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
