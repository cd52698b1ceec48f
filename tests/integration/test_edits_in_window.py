"""Edits that land inside the lookahead window, after the leader prepared the next slot's
run (defect: the unique (job, slot) row of a cancelled run blocked the new schedule's run,
and the slot never fired).

Every edit that keeps a slot must leave exactly one live run for it, run as the job is
after the edit (its pre-built message included); an edit that drops a slot must leave none.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.test import override_settings
from django_tenants.utils import schema_context

from beat import materialise as materialise_step
from core import index
from core.clock import FakeClock
from core.keys import index_key
from jobs.models import Job
from jobs.schedules.jitter import jitter_seconds_for
from jobs.services import job_update
from runs import states
from runs.execution import run_execute

from .helpers import ACTOR, make_job, message_args, new_engine, queued_messages, runs_of, utc
from .receiver import Receiver

START = utc(2026, 6, 1, 12, 1, 0)
EDIT_AT = utc(2026, 6, 1, 12, 1, 45)  # the 12:02 run is prepared, 15 s before its instant
SLOT = utc(2026, 6, 1, 12, 2)


def _edit(tenant, job, clock, data) -> None:
    with schema_context(tenant.schema_name):
        job_update(tenant=tenant, actor=ACTOR, job_id=job.id, data=data, clock=clock)


def _prepared(tenant, clock, engine, **job_data):
    job = make_job(tenant, clock, **job_data)
    clock.set(EDIT_AT)
    engine.materialise()
    [run] = runs_of(tenant, scheduled_for=SLOT)
    assert run.status == states.SCHEDULED
    return job, run


def _fire_the_slot(engine, clock) -> None:
    engine.materialise()  # the leader re-reads the edited job (woken by the edit)
    clock.set(SLOT)
    engine.materialise()
    engine.fire()


@pytest.mark.parametrize(
    ("before", "edit"),
    [
        (
            {"schedule": {"cron": "* * * * *", "timezone": "UTC"}},
            {"schedule": {"cron": "* * * * *", "timezone": "Etc/UTC"}},
        ),
        ({"schedule": {"cron": "* * * * *"}}, {"schedule": {"cron": "*/2 * * * *"}}),
        ({"schedule": {"cron": "* * * * *"}, "dst_gap": "shift"}, {"dst_gap": "skip"}),
        ({"schedule": {"cron": "* * * * *"}, "dst_repeat": "first"}, {"dst_repeat": "both"}),
        ({"schedule": {"cron": "* * * * *"}}, {"schedule": {"cron": "2 * * * *"}}),  # 12:02 only
    ],
    ids=["zone", "cron-even-minute", "dst-gap", "dst-repeat", "cron-same-minute"],
)
def test_schedule_edit_that_keeps_the_slot_fires_it_exactly_once(live, redis_client, before, edit):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    engine = new_engine(redis_client, clock)
    job, prepared = _prepared(alpha, clock, engine, **before)
    _edit(alpha, job, clock, edit)
    _fire_the_slot(engine, clock)
    slot_runs = runs_of(alpha, scheduled_for=SLOT)
    assert [r.status for r in slot_runs] == [states.QUEUED]
    assert slot_runs[0].id == prepared.id  # the prepared run was kept, not replaced
    published = Counter(message_args(m)[1] for m in queued_messages(redis_client))
    assert published == {str(prepared.id): 1}


def test_schedule_edit_that_drops_the_slot_fires_nothing_for_it(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    engine = new_engine(redis_client, clock)
    job, _ = _prepared(alpha, clock, engine, schedule={"cron": "* * * * *"})
    _edit(alpha, job, clock, {"schedule": {"cron": "30 * * * *"}})
    _fire_the_slot(engine, clock)
    assert runs_of(alpha, scheduled_for=SLOT) == []  # the prepared run is gone
    assert queued_messages(redis_client) == []


def test_jitter_edit_moves_the_prepared_run_to_its_new_due_time(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    engine = new_engine(redis_client, clock)
    job, prepared = _prepared(alpha, clock, engine, schedule={"cron": "* * * * *"})
    if jitter_seconds_for(job.hash_seed, SLOT, 30) == 0:  # this seed's offset: none to see
        with schema_context(alpha.schema_name):
            Job.objects.filter(id=job.id).update(
                hash_seed=next(s for s in map(str, range(100)) if jitter_seconds_for(s, SLOT, 30))
            )
    _edit(alpha, job, clock, {"jitter_seconds": 30})
    engine.materialise()
    [run] = runs_of(alpha, scheduled_for=SLOT)
    assert run.id != prepared.id  # due time changed: prepared afresh
    assert SLOT <= run.due_at <= utc(2026, 6, 1, 12, 2, 30)
    clock.set(utc(2026, 6, 1, 12, 2, 30))
    engine.fire()
    assert Counter(message_args(m)[1] for m in queued_messages(redis_client)) == {str(run.id): 1}


def test_priority_and_timeout_edits_reach_the_prepared_message(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    engine = new_engine(redis_client, clock)
    job, prepared = _prepared(
        alpha, clock, engine, schedule={"cron": "* * * * *"}, priority="low", timeout_seconds=60
    )
    _edit(alpha, job, clock, {"priority": "high", "timeout_seconds": 120})
    _fire_the_slot(engine, clock)
    [message] = queued_messages(redis_client)
    assert message_args(message)[1] == str(prepared.id)
    assert message["queue"].startswith("runs.high.")
    assert message["headers"]["timelimit"] == [150, 122]


def test_target_and_payload_edits_reach_the_prepared_run(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    engine = new_engine(redis_client, clock)
    job, prepared = _prepared(alpha, clock, engine, schedule={"cron": "* * * * *"})
    _edit(
        alpha,
        job,
        clock,
        {"target": {"type": "task", "task": "builtin.fail"}, "payload": {"times": 5}},
    )
    _fire_the_slot(engine, clock)
    outcome = run_execute(
        schema=alpha.schema_name, run_id=str(prepared.id), attempt=1, worker="w", clock=clock
    )
    assert outcome == states.RETRYING  # builtin.fail ran, not the builtin.noop of before


def test_a_retry_policy_edit_reaches_the_prepared_run(live, redis_client):
    """Prepared with one attempt; the edit allows three: the failing first attempt retries
    instead of going to the dead-letter queue."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    engine = new_engine(redis_client, clock)
    job, prepared = _prepared(
        alpha,
        clock,
        engine,
        schedule={"cron": "* * * * *"},
        target={"type": "task", "task": "builtin.fail"},
        payload={"times": 5},
        retry={"max_attempts": 1},
    )
    _edit(alpha, job, clock, {"retry": {"max_attempts": 3, "backoff_seconds": 1}})
    _fire_the_slot(engine, clock)
    outcome = run_execute(
        schema=alpha.schema_name, run_id=str(prepared.id), attempt=1, worker="w", clock=clock
    )
    assert outcome == states.RETRYING  # with the policy it was prepared under: dead


@override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"])
def test_a_headers_edit_reaches_the_prepared_run(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    engine = new_engine(redis_client, clock)
    with Receiver() as receiver:
        target = {"type": "http", "url": receiver.url("/hook"), "headers": {"X-Team": "blue"}}
        job, prepared = _prepared(
            alpha, clock, engine, schedule={"cron": "* * * * *"}, target=target
        )
        _edit(alpha, job, clock, {"target": {**target, "headers": {"X-Team": "green"}}})
        _fire_the_slot(engine, clock)
        outcome = run_execute(
            schema=alpha.schema_name, run_id=str(prepared.id), attempt=1, worker="w", clock=clock
        )
    assert outcome == states.SUCCEEDED
    [request] = receiver.requests
    assert request.headers["X-Team"] == "green"


def test_leader_index_write_after_an_edit_does_not_undo_it(live, redis_client, monkeypatch):
    """The race of the post-commit index writes, driven with two connections: the leader
    commits a materialise pass (next_run_at moves to 12:03) but its index write is held
    back; meanwhile an edit moves the job's next slot earlier and writes the index; then
    the leader's write lands. It must not overwrite the edit's score."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    clock.set(EDIT_AT)
    committed, go_on = threading.Event(), threading.Event()
    original = materialise_step._after_commit

    def held_back(*args, **kwargs):
        committed.set()
        go_on.wait(10)
        return original(*args, **kwargs)

    monkeypatch.setattr(materialise_step, "_after_commit", held_back)

    def leader() -> None:
        from django.db import connection

        try:
            engine.materialise()
        finally:
            connection.close()

    thread = threading.Thread(target=leader)
    thread.start()
    assert committed.wait(10)
    _edit(alpha, job, clock, {"schedule": {"interval_seconds": 5}})  # next slot 12:01:50
    edited = redis_client.zscore(index_key(), index.member(alpha.id, job.id))
    go_on.set()
    thread.join(10)
    assert edited == utc(2026, 6, 1, 12, 1, 50).timestamp()
    assert redis_client.zscore(index_key(), index.member(alpha.id, job.id)) == edited
