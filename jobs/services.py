"""Job actions used alike by the API, the dashboard and management commands.

Each runs in the current tenant schema (the caller's request or `schema_context`), takes
its clock as an argument, writes an audit record, and keeps the Redis time index in step
after the transaction commits (the index is a cache of PostgreSQL, never ahead of it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from core.clock import Clock
from tenants.models import Tenant

from .dag import GraphLimits, find_cycle, limit_error, replace_upstreams
from .indexing import save_and_index
from .models import AuditEvent, Dependency, ExclusionCalendar, Job, new_hash_seed
from .schedule_fields import calendar_value, job_calendars, schedule_of
from .schedules import ScheduleError, next_slot_or_none
from .signals import job_deleted, job_resumed, schedule_changed
from .validation import SCHEDULE_FIELDS, CleanJob, JobValidationError, clean_job_input

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
    audit_event(actor, action, job, changes, run_id).save()


def audit_event(
    actor: Actor, action: str, job: Job | None, changes: dict | None = None, run_id: Any = None
) -> AuditEvent:
    """The audit record of an action (unsaved: a bulk action saves many at once)."""
    return AuditEvent(
        actor=actor.label, action=action, job=job, run_id=run_id, changes=changes or {}
    )


def audit_record(
    *, actor: Actor, action: str, job_id: int | None = None, changes: dict | None = None
) -> None:
    """An audit event for an action that is no job's own (tokens, members, a tenant's
    suspension), in the current tenant schema."""
    AuditEvent.objects.create(
        actor=actor.label, action=action, job_id=job_id, changes=changes or {}
    )


def first_slot_after(job: Job, now: datetime, calendars=None) -> datetime | None:
    """The job's first slot after `now` (None: on demand, or the schedule has ended).
    `calendars`: its exclusion calendars as values (default: read from the job)."""
    if calendars is None:
        calendars = job_calendars(job) if job.pk else []
    schedule = schedule_of(job, calendars)
    if schedule is None:
        return None
    slot = next_slot_or_none(schedule, now)
    return slot.at if slot is not None else None


def _calendars_named(names: list[str]) -> list[ExclusionCalendar]:
    found = {c.name: c for c in ExclusionCalendar.objects.filter(name__in=names)}
    missing = [n for n in names if n not in found]
    if missing:
        raise JobValidationError(
            {"schedule.calendars": [f"no such calendar: {', '.join(missing)}"]}
        )
    return [found[n] for n in names]


def cursor_after_calendar_change(
    current: datetime | None, first_after_now: datetime | None
) -> datetime | None:
    """A job's `next_run_at` once its calendars changed (their dates, or which ones it
    uses). That moves none of its schedule's instants, only which dates are skipped, so the
    slots not yet planned stay the leader's to plan: those missed while the job was paused,
    parked or without a leader are still decided by its misfire policy (or recorded
    `excluded`: planning applies the calendars to late slots too). Only a cursor past the
    first slot after now comes back to it, for the prepared runs the change removed."""
    if current is None:
        return first_after_now
    if first_after_now is None:
        return current
    return min(current, first_after_now)


def _plan_schedule(
    job: Job, clean, now: datetime, *, creating: bool, slots_changed: bool = True
) -> list | None:
    """Set `next_run_at` (and clear `completed_at`) from the job's schedule as it now is;
    returns the calendars to attach (None: unchanged). An edit of the slots themselves
    (`slots_changed`: the expression, zone, DST policies, bounds, jitter) starts again from
    the first slot after now; a change of calendars only keeps the slots not yet planned
    (`cursor_after_calendar_change`). A new schedule with no slot left after now is
    refused: nothing would ever run."""
    rows = _calendars_named(clean.calendars) if clean.calendars else clean.calendars
    values = [calendar_value(c.name, c.dates, c.ranges) for c in rows] if rows is not None else None
    first = first_slot_after(job, now, values)
    if first is None and job.schedule_kind != "none":
        raise JobValidationError(
            {"schedule": ["has no slot after now (its one instant, or its end, has passed)"]}
        )
    if slots_changed:
        job.next_run_at = first
    else:
        job.next_run_at = cursor_after_calendar_change(job.next_run_at, first)
    job.completed_at = None
    return rows


def dag_limits() -> GraphLimits:
    return GraphLimits(
        max_nodes=settings.SCHEDULER_DAG_MAX_NODES,
        max_edges=settings.SCHEDULER_DAG_MAX_EDGES,
        max_depth=settings.SCHEDULER_DAG_MAX_DEPTH,
    )


def _lock_graph() -> None:
    """Edits of the tenant's graph take turns (a transaction-scoped advisory lock, bounded
    by the session's lock_timeout): two edits adding `a -> b` and `b -> a` at once would
    each pass the cycle check against a graph without the other's edge.

    An action that locks a job's row and edits the graph takes this lock first: the
    holder's new edges take a key-share lock on their jobs' rows, so waiting for this
    lock while holding a row (`FOR UPDATE`) that the holder's edges need is a deadlock
    (PostgreSQL aborts one of the two after deadlock_timeout, an error instead of the
    cycle refusal). Taking it again in the same transaction is harmless."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':dag'))")


def _set_dependencies(job: Job, upstream_ids: list[int]) -> None:
    """Replace the job's upstreams: each one a live job of this tenant (another tenant's
    ids do not exist in this schema), no cycle (named), within the operator's limits. A
    job with upstreams runs when they succeed, so it has no schedule of its own."""
    _lock_graph()
    found = set(
        Job.objects.filter(id__in=upstream_ids, deleted_at__isnull=True).values_list(
            "id", flat=True
        )
    )
    missing = [i for i in upstream_ids if i not in found]
    if missing:
        raise JobValidationError(
            {"depends_on": [f"no such job (or deleted): {', '.join(map(str, missing))}"]}
        )
    edges = replace_upstreams(
        Dependency.objects.values_list("upstream_id", "downstream_id"), job.id, upstream_ids
    )
    cycle = find_cycle(edges)
    if cycle:
        names = dict(Job.objects.filter(id__in=cycle).values_list("id", "name"))
        path = " -> ".join(f"{names.get(i, i)} ({i})" for i in cycle)
        raise JobValidationError({"depends_on": [f"would create a cycle: {path}"]})
    too_large = limit_error(edges, job.id, dag_limits())
    if too_large:
        raise JobValidationError({"depends_on": [too_large]})
    if upstream_ids and job.schedule_kind != Job.ScheduleKind.NONE:
        raise JobValidationError(
            {
                "depends_on": [
                    "a job with upstreams runs when they succeed: give it no schedule"
                    " (schedule: null)"
                ]
            }
        )
    Dependency.objects.filter(downstream=job).exclude(upstream_id__in=upstream_ids).delete()
    have = set(Dependency.objects.filter(downstream=job).values_list("upstream_id", flat=True))
    Dependency.objects.bulk_create(
        [Dependency(upstream_id=u, downstream=job) for u in upstream_ids if u not in have]
    )


@dataclass
class NewJob:
    """A job checked and planned for creation, not yet saved (`job_create`, and the bulk
    create in jobs/bulk.py: the same steps for each job)."""

    job: Job
    clean: CleanJob
    calendars: list[ExclusionCalendar] | None

    @classmethod
    def check(cls, actor: Actor, data: Any, now: datetime) -> NewJob:
        """The input's rules (`clean_job_input`); JobValidationError names every bad field."""
        seed = new_hash_seed()
        clean = clean_job_input(data, existing=None, seed=seed, now=now)
        return cls(Job(hash_seed=seed, created_by=actor.label, **clean.fields), clean, None)

    def plan(self, now: datetime) -> None:
        """Its calendars and first slot (in the transaction: they read the tenant's rows)."""
        self.calendars = _plan_schedule(self.job, self.clean, now, creating=True)

    def attach(self) -> None:
        """After the insert: its calendars and upstreams (the DAG rules), and its
        relations as written, in the shape selectors.with_relation_ids gives them."""
        if self.calendars:
            self.job.calendars.set(self.calendars)
        if self.clean.depends_on:
            _set_dependencies(self.job, self.clean.depends_on)
        self.job.upstream_ids = list(self.clean.depends_on or [])
        self.job.calendar_names = sorted(c.name for c in self.calendars or [])

    def audit(self, actor: Actor) -> AuditEvent:
        return audit_event(actor, "create", self.job, {"fields": sorted(self.clean.fields)})


def check_quota(adding: int) -> None:
    """QuotaExceeded if `adding` more jobs would pass the tenant's limit."""
    limit, have = tenant_job_limit(), Job.objects.filter(deleted_at__isnull=True).count()
    if have + adding > limit:
        if adding == 1:
            raise QuotaExceeded(f"this tenant already has {limit} jobs, the limit")
        raise QuotaExceeded(
            f"this tenant has {have} jobs; {adding} more would pass its limit of {limit}"
        )


def job_create(*, tenant: Tenant, actor: Actor, data: dict, clock: Clock) -> Job:
    now = clock.now()
    new = NewJob.check(actor, data, now)
    with transaction.atomic():
        check_quota(adding=1)
        new.plan(now)
        save_and_index(tenant, new.job, creating=True)
        new.attach()
        new.audit(actor).save()
    return new.job


def tenant_job_limit() -> int:
    return settings.SCHEDULER_MAX_JOBS_PER_TENANT


def job_update(*, tenant: Tenant, actor: Actor, job_id: int, data: dict, clock: Clock) -> Job:
    now = clock.now()
    with transaction.atomic():
        if isinstance(data, dict) and "depends_on" in data:
            _lock_graph()  # before the job's row (see _lock_graph)
        job = _locked(job_id)
        clean = clean_job_input(data, existing=job, seed=job.hash_seed, now=now)
        changed = {k: v for k, v in clean.fields.items() if getattr(job, k) != v}
        before = {key: getattr(job, key) for key in changed}
        for key, value in changed.items():
            setattr(job, key, value)
        names_before = sorted(job.calendars.values_list("name", flat=True))
        calendars_changed = clean.calendars is not None and clean.calendars != names_before
        slots_changed = any(k in SCHEDULE_FIELDS for k in changed)
        rescheduled = calendars_changed or slots_changed
        calendars = (
            _plan_schedule(job, clean, now, creating=False, slots_changed=slots_changed)
            if rescheduled
            else None
        )
        _clear_fault(job, now)
        upstreams = sorted(
            Dependency.objects.filter(downstream=job).values_list("upstream_id", flat=True)
        )
        if clean.depends_on is not None:
            _set_dependencies(job, clean.depends_on)
        elif upstreams and job.schedule_kind != Job.ScheduleKind.NONE:
            raise JobValidationError(
                {
                    "schedule": [
                        "this job has upstreams (depends_on) and runs when they succeed:"
                        " remove them (depends_on: []) to give it a schedule"
                    ]
                }
            )
        save_and_index(tenant, job)
        if calendars is not None:
            job.calendars.set(calendars)
            if calendars_changed:
                changed["calendars"] = clean.calendars
                before["calendars"] = names_before
        if rescheduled:
            schedule_changed.send(sender=Job, job=job, now=now)
        diff = _diff(before, changed)
        if clean.depends_on is not None and upstreams != clean.depends_on:
            diff["depends_on"] = [upstreams, clean.depends_on]
        fields = sorted(set(changed) | ({"depends_on"} if "depends_on" in diff else set()))
        _audit(actor, "update", job, {"fields": fields, "diff": diff})
    return job


REDACTED = "***"


def _shown(key: str, value: Any) -> Any:
    """A field's value as the audit log keeps it: JSON, header values redacted."""
    if isinstance(value, datetime):
        return value.isoformat()
    if key == "target" and isinstance(value, dict) and value.get("headers"):
        return {**value, "headers": {name: REDACTED for name in value["headers"]}}
    return value


def _diff(before: dict[str, Any], changed: dict[str, Any]) -> dict[str, list[Any]]:
    """field -> [old, new] of an edit (`cron_resolved` and `anchor_at` follow the fields
    they derive from, so they are left out)."""
    return {
        key: [_shown(key, before[key]), _shown(key, value)]
        for key, value in sorted(changed.items())
        if key not in ("cron_resolved",)
    }


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
        save_and_index(tenant, job)
        _audit(actor, "pause", job, {"reason": job.paused_reason})
    return job


def _clear_fault(job: Job, now: datetime) -> bool:
    """Un-park a job the leader parked, if its stored schedule can be planned now; False
    (still parked) otherwise."""
    if not job.fault_code:
        return True
    try:
        first = first_slot_after(job, now)
    except ScheduleError:
        return False
    job.fault_code, job.fault_detail, job.faulted_at = "", "", None
    if job.next_run_at is None:
        job.next_run_at = first
    return True


def job_resume(*, tenant: Tenant, actor: Actor, job_id: int, clock: Clock) -> Job:
    """Slots missed while paused (or parked) are handled by the job's misfire policy (reason
    `paused` for a pause). A parked job is resumed only once its schedule can be planned."""
    now = clock.now()
    with transaction.atomic():
        job = _locked(job_id)
        parked = bool(job.fault_code)
        if parked and not _clear_fault(job, now):
            raise JobValidationError(
                {"schedule": [f"{job.fault_detail}; edit the job to fix its schedule"]}
            )
        if job.paused:
            job.paused, job.resumed_at, job.paused_reason = False, now, ""
            if job.next_run_at is None:
                job.next_run_at = first_slot_after(job, now)
            job_resumed.send(sender=Job, tenant=tenant, job=job, now=now)
        if parked or job.resumed_at == now:
            save_and_index(tenant, job)
        _audit(actor, "resume", job)
    return job


class HasDownstreams(Exception):
    """A job with downstreams is deleted only with its edges (`cascade_edges`)."""

    def __init__(self, downstreams: list[tuple[int, str]]) -> None:
        self.downstreams = downstreams
        shown = ", ".join(f"{name} ({i})" for i, name in downstreams[:10])
        more = f" and {len(downstreams) - 10} more" if len(downstreams) > 10 else ""
        super().__init__(
            f"the job has downstream jobs that depend on it: {shown}{more}; remove those "
            "dependencies first, or delete with cascade=edges to remove them with it"
        )


def job_delete(
    *, tenant: Tenant, actor: Actor, job_id: int, clock: Clock, cascade_edges: bool = False
) -> None:
    """Soft delete: no future runs; history and audit stay. Its upstream edges go with it;
    a job that others depend on is refused (`HasDownstreams`) unless `cascade_edges`,
    which removes those edges too (each downstream then runs on demand, or after its
    other upstreams)."""
    now = clock.now()
    with transaction.atomic():
        _lock_graph()  # before the job's row (see _lock_graph)
        job = _locked(job_id)
        downstreams = list(
            Job.objects.filter(upstream_links__upstream=job, deleted_at__isnull=True)
            .order_by("id")
            .values_list("id", "name")
        )
        if downstreams and not cascade_edges:
            raise HasDownstreams(downstreams)
        job.deleted_at = now
        save_and_index(tenant, job)
        removed = Dependency.objects.filter(Q(upstream=job) | Q(downstream=job)).delete()[0]
        job_deleted.send(sender=Job, job=job, now=now)
        _audit(actor, "delete", job, {"edges_removed": removed} if removed else None)
