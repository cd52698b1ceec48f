"""Actions on many jobs in one request, all or nothing: create, pause, resume, delete.

Each job goes through the same steps as the single actions in `jobs/services.py` (the
input's rules, the schedule's first slot, the DAG rules, the audit record, the index write
after the commit), inside one transaction: one bad job refuses the lot, and every error
names its item (`jobs.517.schedule.cron`, `ids.3`). What is batched is only the plumbing:
one INSERT for the new jobs, one for their audit records, and one Redis round trip after
the commit for all their index entries.
"""

from __future__ import annotations

import graphlib
from collections.abc import Callable
from typing import Any

from django.db import transaction

from core.clock import Clock
from tenants.models import Tenant

from .indexing import batched_index_writes, create_and_index
from .models import AuditEvent, Dependency, Job
from .services import (
    Actor,
    HasDownstreams,
    JobNotFound,
    NewJob,
    check_quota,
    job_delete,
    job_pause,
    job_resume,
)
from .validation import JobValidationError

MAX_BULK_JOBS = 1000
ACTIONS = ("create", "pause", "resume", "delete")
NOT_FOUND = "no such job in this tenant (or it was deleted)"


class BulkError(JobValidationError):
    """Some items cannot be carried out: nothing was. `errors` keys name each item and
    field (`jobs.517.schedule.cron`, `ids.3`)."""


def _item_errors(prefix: str, errors: dict[str, list[str]]) -> dict[str, list[str]]:
    return {
        prefix if key == "non_field_errors" else f"{prefix}.{key}": messages
        for key, messages in errors.items()
    }


def jobs_create_bulk(*, tenant: Tenant, actor: Actor, items: list[Any], clock: Clock) -> list[Job]:
    """Create up to MAX_BULK_JOBS jobs (in the order given) or none."""
    now = clock.now()
    errors: dict[str, list[str]] = {}
    new: list[tuple[int, NewJob]] = []
    for number, data in enumerate(items):
        try:
            new.append((number, NewJob.check(actor, data, now)))
        except JobValidationError as exc:
            errors.update(_item_errors(f"jobs.{number}", exc.errors))
    if errors:
        raise BulkError(errors)
    with transaction.atomic():
        check_quota(adding=len(new))
        planned = _each(new, lambda item: item.plan(now), errors)
        create_and_index(tenant, [item.job for _, item in planned])
        # A JobValidationError here is raised before its job's rows are written, so the
        # transaction stays usable and every item's error is collected before the rollback.
        _each(planned, NewJob.attach, errors)
        if errors:
            raise BulkError(dict(sorted(errors.items(), key=lambda kv: _number(kv[0]))))
        AuditEvent.objects.bulk_create([item.audit(actor) for _, item in new])
    return [item.job for _, item in new]


def _each(
    items: list[tuple[int, NewJob]], step: Callable[[NewJob], None], errors: dict
) -> list[tuple[int, NewJob]]:
    """`step` on each item; the items it refused leave the list, their errors go to `errors`."""
    done = []
    for number, item in items:
        try:
            step(item)
        except JobValidationError as exc:
            errors.update(_item_errors(f"jobs.{number}", exc.errors))
        else:
            done.append((number, item))
    return done


def _number(key: str) -> int:
    """`jobs.517.schedule.cron` -> 517, to list errors in the order of the items."""
    return int(key.split(".")[1])


def jobs_apply_bulk(
    *,
    tenant: Tenant,
    actor: Actor,
    action: str,
    ids: list[int],
    clock: Clock,
    reason: str = "",
    cascade_edges: bool = False,
) -> None:
    """Pause, resume or delete each job of `ids` with the single action's service, in one
    transaction: all of them, or (any error, each named `ids.<n>`) none."""
    errors = _unknown_or_repeated(ids)
    if errors:
        raise BulkError(errors)
    services: dict[str, Callable[[int], Any]] = {
        "pause": lambda job_id: job_pause(
            tenant=tenant, actor=actor, job_id=job_id, reason=reason, clock=clock
        ),
        "resume": lambda job_id: job_resume(tenant=tenant, actor=actor, job_id=job_id, clock=clock),
        "delete": lambda job_id: job_delete(
            tenant=tenant, actor=actor, job_id=job_id, clock=clock, cascade_edges=cascade_edges
        ),
    }
    order = _downstreams_first(ids) if action == "delete" else range(len(ids))
    with transaction.atomic(), batched_index_writes(tenant):
        for number in order:
            try:
                services[action](ids[number])
            except JobValidationError as exc:
                errors[f"ids.{number}"] = [m for messages in exc.errors.values() for m in messages]
            except HasDownstreams as exc:
                errors[f"ids.{number}"] = [str(exc)]
            except JobNotFound:  # deleted meanwhile by another request
                errors[f"ids.{number}"] = [NOT_FOUND]
        if errors:
            raise BulkError(dict(sorted(errors.items(), key=lambda kv: _number(kv[0]))))


def _unknown_or_repeated(ids: list[int]) -> dict[str, list[str]]:
    live = set(Job.objects.filter(id__in=ids, deleted_at__isnull=True).values_list("id", flat=True))
    errors: dict[str, list[str]] = {}
    first: dict[int, int] = {}
    for number, job_id in enumerate(ids):
        if job_id in first:
            errors[f"ids.{number}"] = [f"the same job as ids.{first[job_id]}"]
        elif job_id not in live:
            errors[f"ids.{number}"] = [NOT_FOUND]
        first.setdefault(job_id, number)
    return errors


def _downstreams_first(ids: list[int]) -> list[int]:
    """Item numbers in an order that deletes a job's downstreams (among `ids`) before it,
    so that deleting a whole DAG needs no cascade."""
    number = {job_id: n for n, job_id in enumerate(ids)}
    graph: dict[int, set[int]] = {job_id: set() for job_id in ids}
    for upstream, downstream in Dependency.objects.filter(
        upstream_id__in=ids, downstream_id__in=ids
    ).values_list("upstream_id", "downstream_id"):
        graph[upstream].add(downstream)  # the upstream comes after its downstream
    return [number[job_id] for job_id in graphlib.TopologicalSorter(graph).static_order()]
