"""The leader's steps against real PostgreSQL and Redis, driven by a fake clock."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection
from django_tenants.utils import schema_context

from beat.lease import bump_epoch
from beat.store import FencingError
from core import index
from core.clock import FakeClock
from core.keys import index_key
from jobs.models import Job
from runs import states

from .helpers import make_job, message_args, new_engine, queued_messages, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)


def test_due_job_is_materialised_then_published_at_its_instant(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"cron": "* * * * *"})
    assert job.next_run_at == utc(2026, 6, 1, 12, 1)
    engine = new_engine(redis_client, clock, lookahead_seconds=30)

    clock.advance(29)  # 12:00:29: the 12:01 slot is beyond the 30 s lookahead
    assert engine.materialise() == 0
    clock.advance(2)  # 12:00:31
    assert engine.materialise() == 1
    [run] = runs_of(alpha)
    assert (run.scheduled_for, run.status, run.trigger) == (
        utc(2026, 6, 1, 12, 1),
        "scheduled",
        "schedule",
    )
    with schema_context(alpha.schema_name):
        assert Job.objects.get(pk=job.pk).next_run_at == utc(2026, 6, 1, 12, 2)
    assert (
        redis_client.zscore(index_key(), index.member(alpha.id, job.id))
        == utc(2026, 6, 1, 12, 2).timestamp()
    )

    assert engine.fire().published == 0  # not yet its instant
    assert queued_messages(redis_client) == []
    clock.set(utc(2026, 6, 1, 12, 1))
    stats = engine.fire()
    assert stats.published == 1
    [message] = queued_messages(redis_client)
    assert message["headers"]["task"] == "runs.execute_run"
    assert message_args(message) == [alpha.schema_name, str(run.id), 1]
    assert message["queue"].startswith("runs.normal.")
    [run] = runs_of(alpha)
    assert run.status == states.QUEUED


def test_priority_and_shard_choose_the_queue(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"}, priority="high")
    engine = new_engine(redis_client, clock, shard_count=3)
    clock.set(utc(2026, 6, 1, 12, 1))
    engine.materialise()
    engine.fire()
    [message] = queued_messages(redis_client)
    assert message["queue"] in {"runs.high.0", "runs.high.1", "runs.high.2"}


def test_leader_killed_after_materialise_does_not_double_or_lose_fire(live, redis_client):
    """The race: leader A commits the runs of a tick and dies before publishing them.
    Leader B takes over: it must publish A's runs (no lost fire) and create none twice
    even when it re-evaluates the same tick (no double fire)."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = [
        make_job(alpha, clock, name=f"j{i}", schedule={"interval_seconds": 10}) for i in range(5)
    ]
    leader_a = new_engine(redis_client, clock)
    clock.advance(5)
    leader_a.materialise()  # committed: runs for the next 30 s
    materialised = runs_of(alpha)
    assert len(materialised) == 5 * 3
    # A dies here. Its index writes may be lost too: put the old scores back.
    pipe = redis_client.pipeline()
    index.lower_jobs(pipe, [(alpha.id, j.id, j.next_run_at) for j in jobs])
    pipe.execute()

    leader_b = new_engine(redis_client, clock)
    leader_b.relay(force=True)
    leader_b.materialise()  # re-evaluates A's tick: ON CONFLICT DO NOTHING
    clock.advance(40)
    leader_b.materialise()
    leader_b.fire()
    runs = runs_of(alpha)
    per_slot = Counter((r.job_id, r.scheduled_for) for r in runs)
    assert max(per_slot.values()) == 1
    fired = {(r.job_id, r.scheduled_for) for r in runs if r.status == states.QUEUED}
    assert {(r.job_id, r.scheduled_for) for r in materialised} <= fired
    published = Counter(message_args(m)[1] for m in queued_messages(redis_client))
    assert max(published.values()) == 1
    assert set(published) == {str(r.id) for r in runs if r.status == states.QUEUED}


def test_deposed_leader_cannot_commit_a_tick(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    old = new_engine(redis_client, clock)
    bump_epoch("another-leader")  # a new leader was elected
    clock.set(utc(2026, 6, 1, 12, 1))
    with pytest.raises(FencingError):
        old.materialise()
    assert runs_of(alpha) == []
    with schema_context(alpha.schema_name):
        assert Job.objects.get().next_run_at == utc(2026, 6, 1, 12, 1)


def test_deposed_leader_cannot_publish(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    old = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    old.materialise()
    bump_epoch("another-leader")
    clock.set(utc(2026, 6, 1, 12, 1))
    with pytest.raises(FencingError):
        old.fire()
    assert queued_messages(redis_client) == []
    assert [r.status for r in runs_of(alpha)] == [states.SCHEDULED]


def test_runs_of_many_tenants_fire_in_one_pass(live, redis_client):
    clock = FakeClock(START)
    for world in live.values():
        for i in range(3):
            make_job(world.tenant, clock, name=f"j{i}", schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    assert engine.materialise() == 6
    clock.set(utc(2026, 6, 1, 12, 1))
    stats = engine.fire()
    assert stats.published == 6
    schemas = Counter(message_args(m)[0] for m in queued_messages(redis_client))
    assert schemas == {"t_alpha": 3, "t_beta": 3}


def test_materialise_cost_reads_only_the_due_head_of_the_index(live, redis_client):
    """Jobs far in the future are never loaded: the iteration touches only due entries."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, name="soon", schedule={"cron": "* * * * *"})
    for i in range(20):
        make_job(alpha, clock, name=f"yearly{i}", schedule={"cron": "0 0 1 1 *"})
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 1))
    with connection.execute_wrapper(_count_rows(seen := [])):
        assert engine.materialise() == 1
    assert seen == [1]  # one job row locked, not 21


def _count_rows(seen: list):
    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if "FOR UPDATE" in str(sql):
            seen.append(context["cursor"].rowcount)
        return result

    return wrapper


def test_materialising_yields_to_a_run_that_is_due(live, redis_client, monkeypatch):
    """Firing on time comes first: a long materialise pass stops between transactions as
    soon as a run it holds is due, and the loop fires it before going on. (Small tenants
    share a transaction, up to GROUP_SCHEMAS of them: here one each.)"""
    from beat import materialise as materialise_step

    monkeypatch.setattr(materialise_step, "GROUP_SCHEMAS", 1)
    clock = FakeClock(START)
    for world in live.values():
        make_job(world.tenant, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 1))  # both jobs' slots are due right now
    assert engine.materialise() == 1
    assert engine.materialise_interrupted
    assert engine.fire().published == 1
    assert engine.materialise() == 1
    assert not engine.materialise_interrupted


def test_periodic_relay_publishes_an_overdue_run_the_leader_never_held(live, redis_client):
    """A run waits in PostgreSQL but in neither index nor memory (its index write was
    lost): the next periodic relay sweep must find it once it is overdue."""
    from runs.services import job_trigger

    from .helpers import ACTOR

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None)
    engine = new_engine(redis_client, clock, relay_interval_seconds=10)
    engine.relay(force=True)  # takeover: nothing waiting yet
    with schema_context(alpha.schema_name):
        run, _ = job_trigger(tenant=alpha, actor=ACTOR, job_id=job.id, clock=clock)
    redis_client.delete(index.runs_index_key())  # the index write was lost
    clock.advance(5)
    assert engine.relay() == 0  # not yet time for a sweep
    clock.advance(6)
    assert engine.relay() == 1
    assert engine.fire().published == 1
    assert [message_args(m)[1] for m in queued_messages(redis_client)] == [str(run.id)]
