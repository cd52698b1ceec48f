"""Materialise: turn the due head of the jobs index into runs.

`ZRANGEBYSCORE` reads only jobs due before now + lookahead (O(log n + due)); per tenant, in
fenced transactions of at most `materialise_chunk` jobs and about as many runs, it locks
those jobs (skipping any an edit holds), plans their slots up to now + lookahead + extra
(`beat/planning.py`; the extra spares a job firing every few seconds a visit per slot), inserts the
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

import itertools
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import connection, transaction

from core import index
from core.logs import log_event
from jobs.schedule_fields import calendar_value, schedule_of
from jobs.schedules import ScheduleError
from runs import states
from runs.ids import uuid7
from tenants.services import slug_for_schema

from . import store
from .faults import JOB_DATA_ERRORS, isolated, job_fault_code, must_step_down
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


# Tenants with at most GROUP_TENANT_JOBS due jobs are materialised together, up to
# GROUP_SCHEMAS of them (and `materialise_chunk` jobs) in one fenced transaction of four
# statements: with 10,000 tenants of a job each, a transaction of about seven round trips per
# tenant was most of the leader's time. A transaction holds a lock on every table and
# index it writes (about 25 a schema) until it commits: 25 schemas stay far below
# PostgreSQL's shared lock table, as the sweeps' chunks do.
GROUP_SCHEMAS = 25
GROUP_TENANT_JOBS = 50

Scores = dict[int, float]  # job id -> its index score


def materialise(engine: Engine) -> int:
    """Returns how many index entries it processed."""
    now = engine.clock.now()
    window = now + timedelta(seconds=engine.config.lookahead_seconds)
    entries = index.due(
        engine.client, engine.index_key, window.timestamp(), engine.config.materialise_batch
    )
    # A job taken up is planned past the window: a job firing every few seconds then costs
    # its schema a visit per `lookahead_extra_seconds`, not one per slot.
    horizon = now + timedelta(seconds=engine.config.prepare_until_seconds)
    by_tenant: dict[int, Scores] = defaultdict(dict)
    for tenant_id, job_id, score in entries:
        by_tenant[tenant_id][int(job_id)] = score
    processed = 0
    engine.materialise_interrupted = False
    chunk = max(engine.config.materialise_chunk, 1)
    tenants = list(by_tenant.items())
    position = 0
    while position < len(tenants):
        group = _group_at(engine, tenants, position, chunk)
        if len(group) > 1:
            engine.checkpoint()
            position += len(group)
            done, left = _materialise_group(engine, group, now, horizon, chunk)
            processed += done
            for n, (tenant_id, scores) in enumerate(left):  # the group's run budget ran out
                more = n + 1 < len(left) or position < len(tenants)
                done, stopped = _materialise_one(engine, tenant_id, scores, now, horizon, more)
                processed += done
                if stopped:
                    return processed
            if position < len(tenants) and engine.fire_is_due():
                engine.materialise_interrupted = True  # firing on time comes first
                return processed
            continue
        tenant_id, scores = tenants[position]
        position += 1
        more = position < len(tenants)
        done, stopped = _materialise_one(engine, tenant_id, scores, now, horizon, more)
        processed += done
        if stopped:
            return processed
    return processed


def _materialise_one(
    engine: Engine, tenant_id: int, scores: Scores, now: datetime, horizon: datetime, more: bool
) -> tuple[int, bool]:
    """One tenant's due jobs in transactions of at most `materialise_chunk` jobs and runs;
    returns (jobs processed, whether it stopped because a run came due). `more`: other
    tenants wait after this one."""
    chunk = max(engine.config.materialise_chunk, 1)
    processed = 0
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
        if (waiting or more) and engine.fire_is_due():
            engine.materialise_interrupted = True  # firing on time comes first
            return processed, True
    return processed, False


def _group_at(
    engine: Engine, tenants: list[tuple[int, Scores]], position: int, max_jobs: int
) -> list[tuple[int, str, Scores]]:
    """The small tenants from `position` on that one grouped transaction takes, in
    order: each with at most GROUP_TENANT_JOBS due jobs, not backing off, not in a group
    that failed since it last succeeded alone, still there."""
    group: list[tuple[int, str, Scores]] = []
    jobs = 0
    for tenant_id, scores in itertools.islice(tenants, position, None):
        if len(group) >= GROUP_SCHEMAS or len(scores) > GROUP_TENANT_JOBS:
            break
        if jobs + len(scores) > max_jobs or not engine.faults.allowed(tenant_id):
            break
        if tenant_id in engine.materialise_alone:
            break
        schema = engine.tenants.schema(tenant_id)
        if schema is None:
            break
        group.append((tenant_id, schema, scores))
        jobs += len(scores)
    return group


def _materialise_group(
    engine: Engine,
    group: list[tuple[int, str, Scores]],
    now: datetime,
    horizon: datetime,
    max_runs: int,
) -> tuple[int, list[tuple[int, Scores]]]:
    """One fenced transaction for several small tenants: their jobs locked in one
    statement, their runs inserted and cursors advanced in another. If it fails, each
    tenant is done again on its own (`_materialise_tenant`, isolated), so that a broken
    tenant costs only itself. Returns (jobs processed, the tenants' jobs left for
    transactions of their own once the group's `max_runs` runs are planned)."""

    def work() -> list[TenantPass]:
        with connection.cursor() as cursor:
            store.fence(cursor, engine.epoch, "materialise", engine.partition)
            locked = store.lock_jobs_of_schemas(
                cursor, [(schema, list(scores)) for _t, schema, scores in group]
            )
            passes: list[tuple[TenantPass, list[tuple]]] = []
            parts: list[store.Materialised] = []
            budget = max_runs
            for (_t, schema, scores), (rows, busy) in zip(group, locked, strict=True):
                # Once the budget is spent, the tenants after plan nothing: their jobs go
                # to transactions of their own. The group exceeds `max_runs` by at most
                # one job's plan, as a tenant's own transaction does.
                result, runs, cursors = _plan(
                    engine, rows, busy, list(scores), now, horizon, max(budget, 0)
                )
                budget -= len(runs)
                passes.append((result, runs))
                parts.append(store.Materialised(schema, runs, cursors, _parked_rows(result)))
            inserted = store.write_materialised(cursor, parts)
            for (result, runs), ids in zip(passes, inserted, strict=True):
                _note_inserted(result, runs, ids)
            return [result for result, _runs in passes]

    try:
        with transaction.atomic():
            results = work()
    except Exception as exc:
        if must_step_down(exc):
            raise
        # Its tenants go one by one, and join no group again until each has succeeded on
        # its own: a broken tenant would otherwise fail a group every time its back-off
        # ends (or at each call, when a due run cuts the fallback short).
        engine.materialise_alone.update(tenant_id for tenant_id, _s, _j in group)
        log_event(
            log,
            "leader.group_failed",
            "a grouped materialise of %s tenants failed (%s: %s): each on its own",
            len(group),
            exc.__class__.__name__,
            (str(exc).splitlines() or [""])[0][:200],
            level=logging.WARNING,
            tenants=len(group),
            error=exc.__class__.__name__,
        )
        left = [(tenant_id, scores) for tenant_id, _schema, scores in group]
        return 0, left
    for tenant_id, _schema, _scores in group:
        engine.faults.succeeded(tenant_id)
    _after_commit_many(
        engine,
        [(t, schema, scores, r) for (t, schema, scores), r in zip(group, results, strict=True)],
    )
    processed = 0
    left: list[tuple[int, Scores]] = []
    for (tenant_id, _schema, scores), result in zip(group, results, strict=True):
        processed += len(scores) - len(result.left)
        if result.left:
            left.append((tenant_id, {j: scores[j] for j in result.left}))
    return processed, left


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
    engine.materialise_alone.discard(tenant_id)
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
    result, runs, cursors = _plan(engine, rows, busy, job_ids, now, horizon, max_runs)
    inserted = set(store.insert_scheduled_runs(cursor, schema, runs))
    store.advance_jobs(cursor, schema, cursors)
    store.park_jobs(cursor, schema, _parked_rows(result))
    _note_inserted(result, runs, inserted)
    return result


def _plan(
    engine: Engine,
    rows: list[store.JobRow],
    busy: set[int],
    job_ids: list[int],
    now: datetime,
    horizon: datetime,
    max_runs: int,
) -> tuple[TenantPass, list[tuple], list[tuple[int, datetime | None]]]:
    """Plan the locked jobs' slots, due first, until `max_runs` runs; returns the pass,
    the run rows to insert and the job cursors to advance."""
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
    return result, runs, cursors


def _parked_rows(result: TenantPass) -> list[tuple[int, str, str]]:
    return [(i, c, d) for i, (c, d) in result.parked.items()]


def _note_inserted(result: TenantPass, runs: list[tuple], inserted: set) -> None:
    """The runs this pass inserted (a slot already materialised inserts nothing)."""
    for run_id, job_id, slot, due, status, _reason in runs:
        if run_id in inserted and status == states.SCHEDULED:
            job = result.jobs[job_id]
            result.inserted.append(
                store.RunRef(
                    run_id, job_id, slot, due, 1, job.priority, "schedule", job.timeout_seconds
                )
            )


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
        window=now + timedelta(seconds=engine.config.lookahead_seconds),
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
    engine: Engine, tenant_id: int, schema: str, scores: Scores, result: TenantPass
) -> None:
    _after_commit_many(engine, [(tenant_id, schema, scores, result)])


def _after_commit_many(engine: Engine, passes: list[tuple[int, str, Scores, TenantPass]]) -> None:
    """Move each processed job's index entry to what its row now says, by compare-and-set
    against the score read (an edit written meanwhile wins); remember the new runs. One
    compare-and-set call and one re-read for all the tenants of a grouped transaction."""
    changes: list[Cas] = []
    owners: list[int] = []  # the tenant of each change
    for tenant_id, _schema, scores, result in passes:
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
            owners.append(tenant_id)
    applied = engine.writes.cas_jobs(changes)
    # Every applied move is later than the score read, or a removal: re-read those rows
    # (see `put_back_schedulable`), so that an edit's no-op `ZADD LT` is not overwritten.
    moved: dict[int, dict[int, float | None]] = defaultdict(dict)
    for tenant_id, change, ok in zip(owners, changes, applied, strict=True):
        if ok and (change.new is None or change.new > change.expected):
            moved[tenant_id][int(change.member.split(":")[1])] = change.new
    if moved:
        schemas = {tenant_id: schema for tenant_id, schema, _s, _r in passes}
        engine.verify_moved([(t, schemas[t], m) for t, m in moved.items()])
    for tenant_id, schema, _scores, result in passes:
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
