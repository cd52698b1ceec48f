"""Reads of a tenant's jobs for the API and the dashboard (the current tenant schema).

A job's list row carries everything its JSON needs: the last run as three correlated
subqueries (each an index probe of (job, -scheduled_for)) and the upstream ids in one
prefetch, so a page costs two queries whatever its size.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import OuterRef, Prefetch, QuerySet, Subquery

from runs.models import Run

from .models import Dependency, Job
from .services import JobNotFound

LAST_RUN_FIELDS = ("id", "status", "finished_at")


def _with_relations(queryset: QuerySet[Job], now: datetime) -> QuerySet[Job]:
    # The last run is the latest one due by now: runs the leader materialised ahead of
    # time (its lookahead window) have not happened yet.
    latest = Run.objects.filter(job=OuterRef("pk"), scheduled_for__lte=now).order_by(
        "-scheduled_for", "-id"
    )
    annotations = {
        f"last_run_{name}": Subquery(latest.values(name)[:1]) for name in LAST_RUN_FIELDS
    }
    upstreams = Prefetch(
        "upstream_links", queryset=Dependency.objects.order_by("upstream_id"), to_attr="upstreams"
    )
    return queryset.annotate(**annotations).prefetch_related(upstreams)


def job_list(
    *, now: datetime, state: str | None = None, priority: str | None = None, q: str | None = None
) -> QuerySet[Job]:
    """Live (not deleted) jobs, filtered; the caller orders and pages."""
    jobs = Job.objects.filter(deleted_at__isnull=True)
    if state is not None:
        jobs = jobs.filter(paused=(state == "paused"))
    if priority is not None:
        jobs = jobs.filter(priority=priority)
    if q:
        jobs = jobs.filter(name__icontains=q)
    return _with_relations(jobs, now)


def job_get(*, job_id: int, now: datetime) -> Job:
    job = _with_relations(Job.objects.filter(id=job_id, deleted_at__isnull=True), now).first()
    if job is None:
        raise JobNotFound(job_id)
    return job
