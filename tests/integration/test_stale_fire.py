"""The fire decides on runs as the leader holds them in memory; a worker may have taken one
meanwhile from an earlier message (a fire whose write was lost, or a previous leader's
early publication: ADR 0021) and even ended it in a retry. The fire's writes act on a run
only at the attempt it decided about, and never cancel a run it is admitting."""

from __future__ import annotations

from django_tenants.utils import schema_context

from core.clock import FakeClock
from jobs.services import job_pause
from runs import states
from runs.execution import claim_run, finish_run
from runs.outcomes import Outcome

from .helpers import ACTOR, make_job, new_engine, queued_messages, runs_of, utc

START = utc(2026, 6, 1, 12, 1, 0)
MATERIALISED_AT = utc(2026, 6, 1, 12, 1, 45)
DUE = utc(2026, 6, 1, 12, 2)
RETRIES = {"max_attempts": 3, "backoff_seconds": 30, "jitter": False}


def _held_run(redis_client, tenant, **job):
    """A job a minute; its 12:02 run materialised and held by the leader (attempt 1)."""
    clock = FakeClock(START)
    made = make_job(tenant, clock, schedule={"cron": "* * * * *"}, **job)
    engine = new_engine(redis_client, clock)
    clock.set(MATERIALISED_AT)
    engine.materialise()
    [run] = runs_of(tenant, scheduled_for=DUE)
    return clock, engine, made, run


def _taken_by_a_worker(tenant, run, clock, *, fails: bool):
    """A worker claims attempt 1 from an earlier message; if `fails`, it records the retry
    (`retrying`, attempt 2, due after its back-off)."""
    claimed = claim_run(
        schema=tenant.schema_name, run_id=str(run.id), attempt=1, worker="w", now=clock.now()
    )
    assert claimed is not None
    if fails:
        finish_run(claimed, Outcome(False, error="connection refused"), clock.now())


def test_a_retry_recorded_meanwhile_is_not_queued_for_the_attempt_the_leader_held(
    live, redis_client
):
    alpha = live["alpha"].tenant
    clock, engine, _job, run = _held_run(redis_client, alpha, retry=RETRIES)
    _taken_by_a_worker(alpha, run, clock, fails=True)
    clock.set(DUE)
    assert engine.fire().published == 0
    [after] = runs_of(alpha, id=run.id)
    assert (after.status, after.attempt) == (states.RETRYING, 2)  # its back-off stands
    assert queued_messages(redis_client) == []  # no message for the attempt that ended


def test_a_paused_jobs_retry_is_not_skipped_as_its_first_attempts_slot(live, redis_client):
    """`forbid` (not the one-statement path): the paused job's slot would be skipped, but the
    row is now its retry, which a pause does not skip."""
    alpha = live["alpha"].tenant
    clock, engine, job, run = _held_run(
        redis_client, alpha, retry=RETRIES, concurrency_policy="forbid"
    )
    _taken_by_a_worker(alpha, run, clock, fails=True)
    with schema_context(alpha.schema_name):
        job_pause(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
    clock.set(DUE)
    engine.fire()
    [after] = runs_of(alpha, id=run.id)
    assert (after.status, after.attempt) == (states.RETRYING, 2)


def test_a_replace_jobs_run_a_worker_took_is_not_cancelled_as_replaced_by_itself(
    live, redis_client
):
    """The job's only active run is the run being admitted: nothing newer replaces it."""
    alpha = live["alpha"].tenant
    clock, engine, _job, run = _held_run(redis_client, alpha, concurrency_policy="replace")
    _taken_by_a_worker(alpha, run, clock, fails=False)
    clock.set(DUE)
    stats = engine.fire()
    [after] = runs_of(alpha, id=run.id)
    assert after.status == states.RUNNING, after.error
    assert stats.cancelled == 0 and stats.published == 0


def test_a_newer_replace_run_cancels_an_older_one_a_worker_took_though_the_leader_held_it(
    live, redis_client
):
    """The leader holds 12:02 (which waited with no leader, past its grace) and 12:03 of a
    `replace` job; a worker already runs 12:02 from an earlier message. 12:03 is queued and
    replaces it: the run spared is only the one the decision queues."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(
        alpha,
        clock,
        schedule={"cron": "* * * * *"},
        concurrency_policy="replace",
        misfire_policy="skip",
        misfire_grace_seconds=5,
    )
    engine = new_engine(redis_client, clock, lookahead_seconds=120)
    clock.set(MATERIALISED_AT)
    engine.materialise()
    [older] = runs_of(alpha, scheduled_for=DUE)
    [newer] = runs_of(alpha, scheduled_for=utc(2026, 6, 1, 12, 3))
    _taken_by_a_worker(alpha, older, clock, fails=False)
    for _due, _seq, entry in engine.runs.heap:
        if entry.run_id == older.id:
            entry.judge_lateness = True  # relayed: it may have waited with no leader
    clock.set(utc(2026, 6, 1, 12, 3))
    engine.fire()
    [older_after] = runs_of(alpha, id=older.id)
    [newer_after] = runs_of(alpha, id=newer.id)
    assert older_after.status == states.CANCELLED
    assert newer_after.status == states.QUEUED
