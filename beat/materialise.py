"""Materialise: turn the due head of the jobs index into runs.

`ZRANGEBYSCORE` reads only jobs due before now + lookahead (O(log n + due)); per tenant, in
fenced transactions of at most `materialise_chunk` jobs and about as many runs, it locks
those jobs (skipping any an edit holds), plans their slots (`beat/planning.py`), inserts the
runs with ON CONFLICT DO NOTHING (invariant 1) and advances `next_run_at`. The lease is
renewed between two such transactions: one tenant with ten thousand jobs due together on a
slow database must not keep the leader in one transaction past its lease. After each
commit the index scores move on by compare-and-set (`beat/fenced.py`), and the inserted runs
wait in memory with their messages built.

A job whose stored fields cannot be planned is parked (`beat/faults.py`) in the same
transaction; a tenant whose transaction fails is skipped with a back-off, its index
entries moved out of the way so that they do not hide other tenants' due jobs.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import connection

from core import index
from core.logs import log_event
from jobs.schedule_fields import calendar_value, schedule_of
from jobs.schedules import ScheduleError
from runs import states
from runs.ids import uuid7
from tenants.services import slug_for_schema

from . import store
from .faults import JOB_DATA_ERRORS, isolated, job_fault_code
from .fenced import Cas
from .planning import MisfireRules, plan_job

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("beat.materialise")


@dataclass
class TenantPass:
    """What one tenant's materialise transaction did, applied once it committed."""

    jobs: dict[int, store.JobRow] = field(default_factory=dict)  # locked rows, as planned
    busy: set[int] = field(default_factory=set)  # locked by an edit: next iteration
    left: list[int] = field(default_factory=list)  # not planned (chunk full): next chunk
    inserted: list[store.RunRef] = field(default_factory=list)
    parked: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (code, detail)


def materialise(engine: Engine) -> int:
    """Returns how many index entries it processed."""
    now = engine.clock.now()
    horizon = now + timedelta(seconds=engine.config.lookahead_seconds)
    entries = index.due(
        engine.client, engine.index_key, horizon.timestamp(), engine.config.materialise_batch
    )
    by_tenant: dict[int, dict[int, float]] = defaultdict(dict)
    for tenant_id, job_id, score in entries:
        by_tenant[tenant_id][int(job_id)] = score
    processed = 0
    engine.materialise_interrupted = False
    chunk = max(engine.config.materialise_chunk, 1)
    tenants = list(by_tenant.items())
    for position, (tenant_id, scores) in enumerate(tenants):
        waiting = list(scores)  # due first
        size = chunk  # jobs locked per transaction: as many as fitted the last time
        while waiting:
            engine.checkpoint()
            part = waiting[:size]
            left = _materialise_tenant(
                engine, tenant_id, {j: scores[j] for j in part}, now, horizon, chunk
            )
            planned = len(part) - len(left)
            processed += planned
            waiting = left + waiting[size:]
            if left:  # jobs with many runs each: lock no more than the next part plans
                size = max(planned, 1)
            more = bool(waiting) or position + 1 < len(tenants)
            if more and engine.fire_is_due():
                engine.materialise_interrupted = True  # firing on time comes first
                return processed
    return processed


def _materialise_tenant(
    engine: Engine,
    tenant_id: int,
    scores: dict[int, float],
    now: datetime,
    horizon: datetime,
    max_runs: int,
) -> list[int]:
    """One fenced transaction for these jobs of one tenant; returns the jobs it left for
    the next one (its runs reached `max_runs`), due first."""
    schema = engine.tenants.schema(tenant_id)
    if schema is None:  # the tenant is gone
        engine.writes.cas_jobs(
            [Cas(index.member(tenant_id, j), s, None) for j, s in scores.items()]
        )
        return []

    def work() -> TenantPass:
        with connection.cursor() as cursor:
            store.fence(cursor, engine.epoch, "materialise", engine.partition)
            return _plan_and_write(engine, cursor, schema, list(scores), now, horizon, max_runs)

    ran, result = isolated(engine.faults, tenant_id, schema, work)
    if not ran:
        engine.defer_jobs(tenant_id, scores)
        return []
    _after_commit(engine, tenant_id, schema, scores, result)
    return result.left


def _plan_and_write(
    engine: Engine,
    cursor,
    schema: str,
    job_ids: list[int],
    now: datetime,
    horizon: datetime,
    max_runs: int,
) -> TenantPass:
    rows, busy = store.lock_jobs(cursor, schema, job_ids)
    order = {job_id: n for n, job_id in enumerate(job_ids)}
    rows.sort(key=lambda row: order[row.id])  # due first, as the index gave them
    result = TenantPass(jobs={row.id: row for row in rows}, busy=busy)
    runs: list[tuple] = []
    cursors: list[tuple[int, datetime | None]] = []
    planned_ids: set[int] = set()
    for job in rows:
        if len(runs) >= max_runs:  # misfire catch-up can make one job's plan long
            break
        planned_ids.add(job.id)
        if not job.schedulable or job.next_run_at > horizon:
            continue
        try:
            planned = _plan_one(engine, job, now, horizon)
        except JOB_DATA_ERRORS as exc:
            job.fault_code = job_fault_code(exc)
            result.parked[job.id] = (job.fault_code, str(exc)[:500])
            continue
        runs += planned
        cursors.append((job.id, job.next_run_at))
    if len(planned_ids) < len(rows):
        unplanned = {row.id for row in rows} - planned_ids
        result.left = [j for j in job_ids if j in unplanned]
        for job_id in unplanned:
            del result.jobs[job_id]
    inserted = set(store.insert_scheduled_runs(cursor, schema, runs))
    store.advance_jobs(cursor, schema, cursors)
    store.park_jobs(cursor, schema, [(i, c, d) for i, (c, d) in result.parked.items()])
    for run_id, job_id, slot, due, status, _reason in runs:
        if run_id in inserted and status == states.SCHEDULED:
            job = result.jobs[job_id]
            result.inserted.append(
                store.RunRef(
                    run_id, job_id, slot, due, 1, job.priority, "schedule", job.timeout_seconds
                )
            )
    return result


def _plan_one(engine: Engine, job: store.JobRow, now: datetime, horizon: datetime) -> list[tuple]:
    """The job's run rows up to the horizon; moves `job.next_run_at` to its new cursor."""
    calendars = [calendar_value(name, dates, ranges) for name, dates, ranges in job.calendars]
    schedule = schedule_of(job, calendars)
    if schedule is None:
        raise ScheduleError(f"schedule kind {job.schedule_kind!r} without its fields")
    plan = plan_job(
        schedule=schedule,
        next_run_at=job.next_run_at,
        now=now,
        horizon=horizon,
        rules=MisfireRules(
            policy=job.misfire_policy,
            grace_seconds=job.misfire_grace_seconds,
            max_catchup_runs=engine.config.misfire_max_runs,
            max_age_seconds=engine.config.misfire_max_age_seconds,
        ),
        seed=job.hash_seed,
        jitter_seconds=job.jitter_seconds,
        paused_window=_paused_window(job),
    )
    if plan.dropped or plan.truncated_before:
        log.warning(
            "job %s: %s missed slots not recorded (before %s)",
            job.id,
            plan.dropped,
            plan.truncated_before,
        )
    job.next_run_at = plan.next_run_at
    return [
        (uuid7(), job.id, run.scheduled_for, run.due_at, run.status, run.skip_reason)
        for run in plan.runs
    ]


def _paused_window(job: store.JobRow) -> tuple[datetime, datetime] | None:
    if job.paused_at and job.resumed_at and job.resumed_at > job.paused_at:
        return (job.paused_at, job.resumed_at)
    return None


def _after_commit(
    engine: Engine, tenant_id: int, schema: str, scores: dict[int, float], result: TenantPass
) -> None:
    """Move each processed job's index entry to what its row now says, by compare-and-set
    against the score read (an edit written meanwhile wins); remember the new runs."""
    changes = []
    left = set(result.left)
    for job_id, score in scores.items():
        if job_id in result.busy or job_id in left:
            continue  # an edit holds it (next iteration), or the next chunk plans it
        job = result.jobs.get(job_id)
        member = index.member(tenant_id, job_id)
        if job is not None and job.schedulable and job.next_run_at is not None:
            changes.append(Cas(member, score, job.next_run_at.timestamp()))
        else:
            changes.append(Cas(member, score, None))
    applied = engine.writes.cas_jobs(changes)
    # Every applied move is later than the score read, or a removal: re-read those rows
    # (see `put_back_schedulable`), so that an edit's no-op `ZADD LT` is not overwritten.
    moved = {
        int(change.member.split(":")[1]): change.new
        for change, ok in zip(changes, applied, strict=True)
        if ok and (change.new is None or change.new > change.expected)
    }
    if moved:
        engine.verify_moved(tenant_id, schema, moved)
    for job_id, (code, detail) in result.parked.items():
        log_event(
            log,
            "leader.job_parked",
            "job %s of %s parked (%s): %s",
            job_id,
            schema,
            code,
            detail,
            level=logging.WARNING,
            tenant=slug_for_schema(schema),
            job_id=job_id,
            fault=code,
        )
    for ref in result.inserted:
        engine.runs.remember(engine.runs.build(tenant_id, schema, ref))
