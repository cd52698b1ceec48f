"""Reads of a tenant's jobs for the API and the dashboard (the current tenant schema).

The upstream ids come in one prefetch; what a job's runs say (its last run) is added by
`runs.selectors.with_last_run`, since jobs know nothing of runs.
"""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from .models import Dependency, Job
from .services import JobNotFound


def _with_relations(queryset: QuerySet[Job]) -> QuerySet[Job]:
    upstreams = Prefetch(
        "upstream_links", queryset=Dependency.objects.order_by("upstream_id"), to_attr="upstreams"
    )
    return queryset.prefetch_related(upstreams, "calendars")


def job_list(
    *, state: str | None = None, priority: str | None = None, q: str | None = None
) -> QuerySet[Job]:
    """Live (not deleted) jobs, filtered; the caller orders and pages."""
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
    return _with_relations(jobs)


def job_get(*, job_id: int, queryset: QuerySet[Job] | None = None) -> Job:
    base = queryset if queryset is not None else Job.objects.all()
    job = _with_relations(base.filter(id=job_id, deleted_at__isnull=True)).first()
    if job is None:
        raise JobNotFound(job_id)
    return job
