"""Job actions used alike by the API, the dashboard and management commands.

Each runs in the current tenant schema (the caller's request or `schema_context`), takes
its clock as an argument, writes an audit record, and keeps the Redis time index in step
after the transaction commits (the index is a cache of PostgreSQL, never ahead of it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
from django.conf import settings
from django.db import IntegrityError, transaction

from beat import index
from beat.clock import Clock
from beat.keys import wake_key
from beat.rebuild import mark_indexed
from runs import states
from runs.models import Run
from scheduler_site.redis_client import get_redis
from tenants.models import Tenant

from .dag import find_cycle, replace_upstreams
from .models import AuditEvent, Dependency, Job, new_hash_seed
from .schedule_fields import schedule_of
from .schedules import next_slot
from .validation import (
    SCHEDULE_FIELDS,
    Errors,
    JobValidationError,
    clean_job_input,
    validate_payload,
)

log = logging.getLogger("jobs.services")


class JobNotFound(Exception):
    pass


class QuotaExceeded(Exception):
    pass


@dataclass(frozen=True)
class Actor:
    """Who acts: `user:<name>`, `token:<prefix>` or `system`."""

    label: str


SYSTEM = Actor("system")


def _audit(
    actor: Actor, action: str, job: Job | None, changes: dict | None = None, run_id: Any = None
) -> None:
    AuditEvent.objects.create(
        actor=actor.label, action=action, job=job, run_id=run_id, changes=changes or {}
    )


def first_slot_after(job: Job, now: datetime) -> datetime | None:
    schedule = schedule_of(job)
    return next_slot(schedule, now).at if schedule is not None else None


def _save_and_index(tenant: Tenant, job: Job, *, creating: bool = False) -> None:
    """Save a changed job, flagged `index_dirty` in the same transaction; after the commit,
    write its index entry and clear the flag. If Redis does not answer, or the process dies
    in between, the flag stays and the leader's sync (`beat.rebuild.sync_index`) writes the
    entry: an edit can never be lost to the index, and the sync reads only flagged jobs."""
    if not creating:
        job.version += 1
    job.index_dirty = True
    job.save()
    schedulable = job.deleted_at is None and not job.paused and job.next_run_at is not None
    schema, tenant_id, job_id = tenant.schema_name, tenant.id, job.id
    when, version = job.next_run_at, job.version

    def sync() -> None:
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        if schedulable:
            index.put_jobs(pipe, [(tenant_id, job_id, when)])
        else:
            index.remove_jobs(pipe, [(tenant_id, job_id)])
        pipe.rpush(wake_key(), "index")
        pipe.execute()
        mark_indexed(schema, [(job_id, version)])

    transaction.on_commit(lambda: _best_effort(sync))


def _set_dependencies(job: Job, upstream_ids: list[int]) -> None:
    found = set(
        Job.objects.filter(id__in=upstream_ids, deleted_at__isnull=True).values_list(
            "id", flat=True
        )
    )
    missing = [i for i in upstream_ids if i not in found]
    if missing:
        raise JobValidationError({"depends_on": [f"no such job: {', '.join(map(str, missing))}"]})
    edges = list(Dependency.objects.values_list("upstream_id", "downstream_id"))
    cycle = find_cycle(replace_upstreams(edges, job.id, upstream_ids))
    if cycle:
        names = dict(Job.objects.filter(id__in=cycle).values_list("id", "name"))
        path = " -> ".join(f"{names.get(i, i)} ({i})" for i in cycle)
        raise JobValidationError({"depends_on": [f"would create a cycle: {path}"]})
    Dependency.objects.filter(downstream=job).exclude(upstream_id__in=upstream_ids).delete()
    have = set(Dependency.objects.filter(downstream=job).values_list("upstream_id", flat=True))
    Dependency.objects.bulk_create(
        [Dependency(upstream_id=u, downstream=job) for u in upstream_ids if u not in have]
    )


def job_create(*, tenant: Tenant, actor: Actor, data: dict, clock: Clock) -> Job:
    now = clock.now()
    seed = new_hash_seed()
    clean = clean_job_input(data, existing=None, seed=seed, now=now)
    with transaction.atomic():
        if Job.objects.filter(deleted_at__isnull=True).count() >= tenant_job_limit():
            raise QuotaExceeded(f"this tenant already has {tenant_job_limit()} jobs, the limit")
        job = Job(hash_seed=seed, created_by=actor.label, **clean.fields)
        job.next_run_at = first_slot_after(job, now)
        _save_and_index(tenant, job, creating=True)
        if clean.depends_on:
            _set_dependencies(job, clean.depends_on)
        _audit(actor, "create", job, {"fields": sorted(clean.fields)})
    return job


def tenant_job_limit() -> int:
    return settings.SCHEDULER_MAX_JOBS_PER_TENANT


def job_update(*, tenant: Tenant, actor: Actor, job_id: int, data: dict, clock: Clock) -> Job:
    now = clock.now()
    with transaction.atomic():
        job = _locked(job_id)
        clean = clean_job_input(data, existing=job, seed=job.hash_seed, now=now)
        changed = {k: v for k, v in clean.fields.items() if getattr(job, k) != v}
        for key, value in changed.items():
            setattr(job, key, value)
        if any(k in SCHEDULE_FIELDS for k in changed):
            job.next_run_at = first_slot_after(job, now)
            # Runs materialised for the old schedule must not fire.
            Run.objects.filter(job=job, trigger="schedule", status=states.SCHEDULED).update(
                status=states.CANCELLED, error="schedule changed", finished_at=now
            )
        if clean.depends_on is not None:
            _set_dependencies(job, clean.depends_on)
        _save_and_index(tenant, job)
        _audit(actor, "update", job, {"fields": sorted(changed)})
    return job


def _locked(job_id: int) -> Job:
    job = Job.objects.select_for_update().filter(id=job_id, deleted_at__isnull=True).first()
    if job is None:
        raise JobNotFound(job_id)
    return job


def job_pause(*, tenant: Tenant, actor: Actor, job_id: int, reason: str = "", clock: Clock) -> Job:
    with transaction.atomic():
        job = _locked(job_id)
        if not job.paused:
            job.paused, job.paused_at = True, clock.now()
        job.paused_reason = reason[:500]
        _save_and_index(tenant, job)
        _audit(actor, "pause", job, {"reason": job.paused_reason})
    return job


def job_resume(*, tenant: Tenant, actor: Actor, job_id: int, clock: Clock) -> Job:
    """Slots missed while paused are handled by the job's misfire policy (reason `paused`)."""
    now = clock.now()
    with transaction.atomic():
        job = _locked(job_id)
        if job.paused:
            job.paused, job.resumed_at, job.paused_reason = False, now, ""
            if job.next_run_at is None:
                job.next_run_at = first_slot_after(job, now)
            _save_and_index(tenant, job)
        _audit(actor, "resume", job)
    return job


def job_delete(*, tenant: Tenant, actor: Actor, job_id: int, clock: Clock) -> None:
    """Soft delete: no future runs; history and audit stay."""
    now = clock.now()
    with transaction.atomic():
        job = _locked(job_id)
        job.deleted_at = now
        _save_and_index(tenant, job)
        Dependency.objects.filter(upstream=job).delete()
        Run.objects.filter(job=job, status=states.SCHEDULED).update(
            status=states.CANCELLED, error="job deleted", finished_at=now
        )
        _audit(actor, "delete", job)


def enqueue_runs_on_commit(tenant: Tenant, runs: list[Run]) -> None:
    """Runs admitted on their own (manual, backfill, replay, dependency) go to the runs
    index once the transaction that created them commits."""
    entries = [(tenant.id, run.id, run.due_at) for run in runs]

    def push() -> None:
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        index.put_runs(pipe, entries)
        pipe.rpush(wake_key(), "run")
        pipe.execute()

    transaction.on_commit(lambda: _best_effort(push))


def _best_effort(write_index: Callable[[], None]) -> None:
    """The change is committed in PostgreSQL, the truth. If Redis does not answer now, the
    leader's periodic sync (jobs) and relay (runs) bring the index up to date later: the
    request must not fail for it."""
    try:
        write_index()
    except redis.RedisError as exc:
        log.warning("time index not updated now (%s); the leader's sync will catch up", exc)


def job_trigger(
    *,
    tenant: Tenant,
    actor: Actor,
    job_id: int,
    clock: Clock,
    payload: Any = None,
    idempotency_key: str | None = None,
) -> tuple[Run, bool]:
    """A manual run. The same idempotency key returns the same run (created = False)."""
    if payload is not None and validate_payload(errors := Errors(), payload) is None:
        raise JobValidationError(errors.items)
    if idempotency_key is not None and not 1 <= len(idempotency_key) <= 200:
        raise JobValidationError({"Idempotency-Key": ["must be 1 to 200 characters"]})
    now = clock.now()
    job = Job.objects.filter(id=job_id, deleted_at__isnull=True).first()
    if job is None:
        raise JobNotFound(job_id)
    if idempotency_key:
        existing = Run.objects.filter(job=job, idempotency_key=idempotency_key).first()
        if existing:
            return existing, False
    try:
        with transaction.atomic():
            run = Run.objects.create(
                job=job,
                trigger=Run.Trigger.MANUAL,
                scheduled_for=now,
                due_at=now,
                payload_override=payload,
                idempotency_key=idempotency_key,
            )
            _audit(actor, "trigger", job, {"idempotency_key": idempotency_key}, run_id=run.id)
            enqueue_runs_on_commit(tenant, [run])
    except IntegrityError:  # the same key raced us
        return Run.objects.get(job=job, idempotency_key=idempotency_key), False
    return run, True
