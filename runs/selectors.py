"""Reads of a tenant's runs for the API and the dashboard (the current tenant schema).

Lists order by (-scheduled_for, -id). A list filtered by job or status walks the
(job, -scheduled_for) or (status, -scheduled_for) index; an unfiltered one fans out over
the status index (`newest_runs`), so no list sorts the whole run table. Attempts come in
one prefetch per page.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery, prefetch_related_objects

from . import states
from .models import Run
from .services import RunNotFound

LAST_RUN_FIELDS = ("id", "status", "finished_at")


def with_last_run(jobs: QuerySet, now: datetime) -> QuerySet:
    """Jobs annotated with their last run (`last_run_id`, `_status`, `_finished_at`): three
    correlated subqueries, each an index probe of (job, -scheduled_for). The last run is the
    latest one due by now: runs materialised ahead of time have not happened yet."""
    latest = Run.objects.filter(job=OuterRef("pk"), scheduled_for__lte=now).order_by(
        "-scheduled_for", "-id"
    )
    return jobs.annotate(
        **{f"last_run_{name}": Subquery(latest.values(name)[:1]) for name in LAST_RUN_FIELDS}
    )


def run_list(
    *,
    job_id: int | None = None,
    status: str | None = None,
    trigger: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[Run]:
    """Runs with scheduled_for in [since, until), filtered; the caller orders and pages."""
    runs = Run.objects.all()
    if job_id is not None:
        runs = runs.filter(job_id=job_id)
    if status is not None:
        runs = runs.filter(status=status)
    if trigger is not None:
        runs = runs.filter(trigger=trigger)
    if since is not None:
        runs = runs.filter(scheduled_for__gte=since)
    if until is not None:
        runs = runs.filter(scheduled_for__lt=until)
    return runs


def dlq_list(*, job_id: int | None = None) -> QuerySet[Run]:
    """The dead-letter queue: runs that failed max_attempts times."""
    return run_list(job_id=job_id, status=states.DEAD)


RUN_ORDER = ("-scheduled_for", "-id")


def newest_runs(runs: QuerySet[Run], limit: int) -> list[Run]:
    """The first `limit` of `runs` in RUN_ORDER, with their attempts.

    Without a job or status filter no index leads with the filter, and PostgreSQL would sort
    every run (about 0.3 s per million). Instead: one (status, -scheduled_for) index range
    scan per status, `limit` rows each, merged: 9 small scans whatever the table's size.
    """
    parts = [runs.filter(status=status).order_by(*RUN_ORDER)[:limit] for status in states.ALL]
    rows = list(parts[0].union(*parts[1:], all=True).order_by(*RUN_ORDER)[:limit])
    prefetch_related_objects(rows, "attempts")
    return rows


def run_get(*, run_id: Any) -> Run:
    run = Run.objects.prefetch_related("attempts").filter(id=run_id).first()
    if run is None:
        raise RunNotFound(run_id)
    return run
