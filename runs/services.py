"""Run actions for the API, the dashboard and commands: cancel, replay (single and bulk from
the DLQ), backfill. Each runs in the current tenant schema and writes an audit record."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from core.clock import Clock
from jobs.models import AuditEvent, Job
from jobs.schedule_fields import job_calendars, schedule_of
from jobs.schedules import iter_slots, jitter_seconds_for
from jobs.services import Actor, JobNotFound
from jobs.validation import MAX_JITTER_SECONDS, Errors, JobValidationError, validate_payload
from tenants.models import Tenant

from . import states
from .dags import dag_reopen, settle_after_commit
from .models import Attempt, Run
from .notify import enqueue_runs_on_commit, notify_run_ended
from .observe import run_cancelled
from .slot_changes import SlotRun, runs_to_remove


class RunNotFound(Exception):
    pass


class RunStateError(Exception):
    """The run's status does not allow the action; the message says why."""


class BackfillError(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _audit(actor: Actor, action: str, run: Run, changes: dict | None = None) -> None:
    AuditEvent.objects.create(
        actor=actor.label, action=action, job_id=run.job_id, run_id=run.id, changes=changes or {}
    )


def run_cancel(*, tenant: Tenant, actor: Actor, run_id: Any, clock: Clock) -> Run:
    """A pending run is cancelled at once; a running one is marked cancelled and its worker
    stops at its next heartbeat (best effort: a task that ignores the signal runs on, but
    its result no longer changes the run)."""
    now = clock.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(id=run_id).first()
        if run is None:
            raise RunNotFound(run_id)
        if run.status not in states.CANCELLABLE:
            raise RunStateError(f"a {run.status} run cannot be cancelled")
        previous = run.status
        run.status, run.finished_at = states.CANCELLED, now
        run.error = f"cancelled by {actor.label}"
        run.save(update_fields=["status", "finished_at", "error"])
        if previous == states.RUNNING:  # attempts are recorded when they end: this one here
            Attempt.objects.update_or_create(
                run=run,
                number=run.attempt,
                defaults={
                    "outcome": states.ATTEMPT_CANCELLED,
                    "finished_at": now,
                    "error": run.error,
                    "worker": run.worker,
                    "started_at": run.started_at or now,
                },
            )
        _audit(actor, "cancel", run, {"from": previous})
        transaction.on_commit(
            lambda: run_cancelled(
                schema=tenant.schema_name,
                job_id=run.job_id,
                run_id=run.id,
                attempt=run.attempt,
                actor=actor.label,
            )
        )
        if run.dag_run is not None:  # its downstreams are skipped as upstream_failed
            settle_after_commit(tenant.schema_name, run.dag_run, clock.now)
        if previous in states.ACTIVE:
            policy = (
                Job.objects.filter(id=run.job_id)
                .values_list("concurrency_policy", flat=True)
                .first()
            )
            schema, job_id, run_id, attempt = tenant.schema_name, run.job_id, run.id, run.attempt
            transaction.on_commit(
                lambda: notify_run_ended(schema, job_id, policy or "", run_id, attempt)
            )
    return run


def _replay_one(tenant: Tenant, actor: Actor, run: Run, now: datetime) -> None:
    """A new attempt: the run waits for the leader's admission like a retry does."""
    previous = run.status
    run.status, run.attempt, run.due_at = states.RETRYING, run.attempt + 1, now
    run.error, run.finished_at = "", None
    run.save(update_fields=["status", "attempt", "due_at", "error", "finished_at"])
    _audit(actor, "replay", run, {"from": previous, "attempt": run.attempt})
    enqueue_runs_on_commit(tenant.id, [run])
    if run.dag_run is not None:  # the DAG run goes on: its skipped downstreams wait again
        dag_reopen(schema=tenant.schema_name, dag_run_id=run.dag_run)
        settle_after_commit(tenant.schema_name, run.dag_run, lambda: now)


def run_replay(*, tenant: Tenant, actor: Actor, run_id: Any, clock: Clock) -> Run:
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(id=run_id).first()
        if run is None:
            raise RunNotFound(run_id)
        if run.status not in states.REPLAYABLE:
            raise RunStateError(f"only dead runs can be replayed; this one is {run.status}")
        if Job.objects.filter(id=run.job_id, deleted_at__isnull=False).exists():
            raise RunStateError("its job was deleted")
        _replay_one(tenant, actor, run, clock.now())
    return run


@dataclass
class BulkReplay:
    replayed: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    not_replayable: dict[str, str] = field(default_factory=dict)


def dlq_replay(*, tenant: Tenant, actor: Actor, run_ids: list[Any], clock: Clock) -> BulkReplay:
    result = BulkReplay()
    now = clock.now()
    with transaction.atomic():
        runs = {str(r.id): r for r in Run.objects.select_for_update().filter(id__in=run_ids)}
        deleted_jobs = set(
            Job.objects.filter(deleted_at__isnull=False).values_list("id", flat=True)
        )
        for run_id in map(str, run_ids):
            run = runs.get(run_id)
            if run is None:
                result.not_found.append(run_id)
            elif run.status != states.DEAD:
                result.not_replayable[run_id] = f"status is {run.status}, not dead"
            elif run.job_id in deleted_jobs:
                result.not_replayable[run_id] = "its job was deleted"
            else:
                _replay_one(tenant, actor, run, now)
                result.replayed.append(run_id)
    return result


@dataclass
class BulkDiscard:
    discarded: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    not_discardable: dict[str, str] = field(default_factory=dict)


def _discard_one(actor: Actor, run: Run, now: datetime) -> None:
    last_error = run.error
    run.status, run.finished_at = states.CANCELLED, now
    run.error = f"discarded from the dead-letter queue by {actor.label}"
    if last_error:
        run.error += f"; last error: {last_error}"[:2000]
    run.save(update_fields=["status", "finished_at", "error"])
    _audit(actor, "discard", run, {"from": states.DEAD, "last_error": last_error[:500]})


def run_discard(*, tenant: Tenant, actor: Actor, run_id: Any, clock: Clock) -> Run:
    """Take a dead run out of the dead-letter queue for good: it becomes `cancelled`, its
    attempts and last error stay readable. Only dead runs can be discarded."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(id=run_id).first()
        if run is None:
            raise RunNotFound(run_id)
        if run.status not in states.DISCARDABLE:
            raise RunStateError(f"only dead runs can be discarded; this one is {run.status}")
        _discard_one(actor, run, clock.now())
    return run


def dlq_discard(*, tenant: Tenant, actor: Actor, run_ids: list[Any], clock: Clock) -> BulkDiscard:
    """`run_discard` for many runs, each independently (like `dlq_replay`)."""
    result = BulkDiscard()
    now = clock.now()
    with transaction.atomic():
        runs = {str(r.id): r for r in Run.objects.select_for_update().filter(id__in=run_ids)}
        for run_id in map(str, run_ids):
            run = runs.get(run_id)
            if run is None:
                result.not_found.append(run_id)
            elif run.status not in states.DISCARDABLE:
                result.not_discardable[run_id] = f"status is {run.status}, not dead"
            else:
                _discard_one(actor, run, now)
                result.discarded.append(run_id)
    return result


def job_backfill(
    *, tenant: Tenant, actor: Actor, job_id: int, start: datetime, end: datetime, clock: Clock
) -> list[Run]:
    """One run (trigger `backfill`) for every scheduled instant in [start, end]."""
    limit = settings.SCHEDULER_MAX_BACKFILL_RUNS
    job = Job.objects.filter(id=job_id, deleted_at__isnull=True).first()
    if job is None:
        raise JobNotFound(job_id)
    if end < start:
        raise BackfillError("end", "must not be before start")
    schedule = schedule_of(job, job_calendars(job))
    if schedule is None:
        raise BackfillError("job", "the job has no schedule to backfill")
    slots = []
    for slot in iter_slots(schedule, start - timedelta(microseconds=1), end):
        if slot.skip_reason is None:
            slots.append(slot.at)
        if len(slots) > limit:
            raise BackfillError(
                "end",
                f"the range holds more than {limit} runs, the limit; backfill a shorter range",
            )
    now = clock.now()
    with transaction.atomic():
        runs = Run.objects.bulk_create(
            [
                Run(job=job, trigger=Run.Trigger.BACKFILL, scheduled_for=at, due_at=now)
                for at in slots
            ]
        )
        AuditEvent.objects.create(
            actor=actor.label,
            action="backfill",
            job=job,
            changes={"start": start.isoformat(), "end": end.isoformat(), "runs": len(runs)},
        )
        enqueue_runs_on_commit(tenant.id, runs)
    return runs


def runs_follow_schedule_change(*, job: Job, now: datetime) -> int:
    """After a schedule edit, keep exactly the prepared runs not yet due that the new
    schedule produces too, and remove the others (`runs/slot_changes.py`); the leader then
    materialises the new schedule's slots from the recomputed `next_run_at`, and the kept
    runs block nothing. Runs already due are left alone: they belong to before the edit.
    A jittered run can be due after its slot has passed: `_follow_passed_slots`. Returns
    how many runs were removed."""
    prepared = _not_yet_due(job, now)
    upcoming = {i: r for i, r in prepared.items() if r.scheduled_for > now}
    passed = {i: r for i, r in prepared.items() if r.scheduled_for <= now}
    return _follow_upcoming_slots(job, upcoming, now) + _follow_passed_slots(job, passed, now)


def _not_yet_due(job: Job, now: datetime) -> dict[Any, SlotRun]:
    """The job's schedule runs waiting for their due time (not their slot's: a jitter
    makes a run due after its slot), locked. Retries are not prepared slots: left out.
    Slots older than the largest jitter are not looked at: the bound keeps the read on
    the `(job_id, scheduled_for)` index, not the job's whole kept history."""
    return {
        run.id: SlotRun(run.scheduled_for, run.status, run.skip_reason, run.due_at)
        for run in Run.objects.select_for_update().filter(
            job=job,
            trigger=Run.Trigger.SCHEDULE,
            scheduled_for__gt=now - timedelta(seconds=MAX_JITTER_SECONDS),
            due_at__gt=now,
            status__in=(states.SCHEDULED, states.SKIPPED),
        )
    }


def _follow_upcoming_slots(job: Job, prepared: dict[Any, SlotRun], now: datetime) -> int:
    if not prepared:
        return 0
    until = max(r.scheduled_for for r in prepared.values())
    gone = runs_to_remove(prepared, _slot_runs(job, now, until))
    Run.objects.filter(id__in=gone).delete()
    return len(gone)


def _follow_passed_slots(job: Job, prepared: dict[Any, SlotRun], now: datetime) -> int:
    """Runs whose slot has passed but not their due time. The job's cursor is past their
    slots, so the leader will not plan them again: the edit decides them here. A run is
    kept while the new schedule still fires its slot (at the due time it was prepared
    with: its slot's instant is over; a paused job's is skipped when due, as before),
    recorded `skipped` as the leader would record it when the schedule now skips the slot
    (a calendar, a DST policy), and removed when the schedule no longer has the slot."""
    if not prepared:
        return 0
    fates = _slot_fates(job, prepared.values())
    gone = [i for i, r in prepared.items() if r.scheduled_for not in fates]
    for run_id, run in prepared.items():
        if fates.get(run.scheduled_for):
            _record_skipped(run_id, run.scheduled_for, fates[run.scheduled_for], now)
    Run.objects.filter(id__in=gone).delete()
    return len(gone)


def _slot_fates(job: Job, runs: Iterable[SlotRun]) -> dict[datetime, str]:
    """Slot instant -> skip reason ("" fires) under the job's schedule as it now is, over
    the runs' slots."""
    schedule = schedule_of(job, job_calendars(job))
    if schedule is None:
        return {}
    slots = [r.scheduled_for for r in runs]
    return {
        slot.at: slot.skip_reason or ""
        for slot in iter_slots(schedule, min(slots) - timedelta(microseconds=1), max(slots))
    }


def _record_skipped(run_id: Any, slot: datetime, reason: str, now: datetime) -> None:
    # In place, not removed and re-made: the slot keeps its one row, and the leader, which
    # may hold the run in memory, admits only waiting runs (as after a cancel).
    Run.objects.filter(id=run_id, status=states.SCHEDULED).update(
        status=states.SKIPPED, skip_reason=reason, due_at=slot, finished_at=now
    )


def _slot_runs(job: Job, after: datetime, until: datetime) -> list[SlotRun]:
    schedule = schedule_of(job, job_calendars(job))
    if schedule is None or job.paused or job.fault_code:
        return []
    wanted = []
    for slot in iter_slots(schedule, after, until):
        if slot.skip_reason:
            wanted.append(SlotRun(slot.at, states.SKIPPED, slot.skip_reason, slot.at))
        else:
            delay = jitter_seconds_for(job.hash_seed, slot.at, job.jitter_seconds)
            wanted.append(
                SlotRun(slot.at, states.SCHEDULED, "", slot.at + timedelta(seconds=delay))
            )
    return wanted


def runs_cancel_for_deleted_job(*, job: Job, now: datetime) -> int:
    """A deleted job's runs waiting for admission are cancelled (running ones finish)."""
    return Run.objects.filter(job=job, status__in=states.WAITING).update(
        status=states.CANCELLED, error="job deleted", finished_at=now
    )


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
            AuditEvent.objects.create(
                actor=actor.label,
                action="trigger",
                job=job,
                run_id=run.id,
                changes={"idempotency_key": idempotency_key},
            )
            enqueue_runs_on_commit(tenant.id, [run])
    except IntegrityError:  # the same key raced us
        return Run.objects.get(job=job, idempotency_key=idempotency_key), False
    return run, True


def release_held_dependency_runs(*, tenant: Tenant, job: Job) -> int:
    """The dependency runs of a job resumed after a pause go to admission: while it was
    paused the leader held them (neither run nor skipped), so their DAG run waited."""
    held = list(
        Run.objects.filter(job=job, trigger=Run.Trigger.DEPENDENCY, status__in=states.WAITING)
    )
    if held:
        enqueue_runs_on_commit(tenant.id, held)
    return len(held)
