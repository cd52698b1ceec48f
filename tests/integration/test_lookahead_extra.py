"""A job taken up is prepared past the lookahead (`lookahead_extra_seconds`).

With 10,000 tenants of a job every 10 s, the leader visited each tenant's schema once per
slot, and most of its time went to those visits (docs/benchmarks.md, "Tenants"). A job
taken up now has its slots prepared up to the lookahead plus the extra, and is not visited
again until its next unprepared slot enters the lookahead: a visit per extra, not per slot.
What must not change: every slot fires once, an edit inside the longer window is followed,
and a new leader holds the runs prepared that far ahead.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

from django_tenants.utils import schema_context

from beat.engine import Engine
from core import index
from core.clock import FakeClock
from jobs.services import job_update
from runs import states

from .helpers import ACTOR, make_job, new_engine, runs_of, utc

START = utc(2026, 6, 1, 12, 0)
LOOKAHEAD = 30.0
EXTRA = 30.0
EVERY = 10  # seconds between the job's slots


def _engine(redis_client, clock: FakeClock, extra: float = EXTRA) -> Engine:
    return new_engine(
        redis_client, clock, lookahead_seconds=LOOKAHEAD, lookahead_extra_seconds=extra
    )


def _drive(engine: Engine, clock: FakeClock, until, visits: list[int]) -> None:
    """The leader's steps once a second up to `until`; `visits` gets each iteration's
    count of index entries materialised."""
    while clock.now() < until:
        clock.advance(1)
        engine.fire()
        visits.append(engine.materialise())
        engine.load_run_index()
        engine.fire()


def _slots(tenant, until) -> list:
    return [r.scheduled_for for r in runs_of(tenant, scheduled_for__lte=until)]


def _every(start, until, step: int) -> list:
    out, at = [], start
    while at <= until:
        out.append(at)
        at += timedelta(seconds=step)
    return out


def test_a_job_taken_up_is_prepared_past_the_lookahead_and_visited_once_per_extra(
    live, redis_client
):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"interval_seconds": EVERY})
    engine = _engine(redis_client, clock)
    assert engine.materialise() == 1
    prepared = [r.scheduled_for for r in runs_of(alpha)]
    first = prepared[0]
    # Every slot up to now + lookahead + extra, and the cursor on the first one after.
    assert prepared == _every(first, START + timedelta(seconds=LOOKAHEAD + EXTRA), EVERY)
    [(_t, _j, score)] = index.due(redis_client, engine.index_key, float("inf"), 10)
    assert score == (prepared[-1] + timedelta(seconds=EVERY)).timestamp()
    assert engine.materialise() == 0  # nothing new inside the lookahead yet

    visits: list[int] = []
    end = START + timedelta(seconds=200)
    _drive(engine, clock, end, visits)
    fired = [r for r in runs_of(alpha, scheduled_for__lte=end) if r.status == states.QUEUED]
    assert [r.scheduled_for for r in fired] == _every(first, end, EVERY)  # each slot once
    # A visit per (extra + one slot) seconds, about 5, not one per slot (20).
    assert sum(visits) <= 200 / (EXTRA + EVERY) + 1
    with schema_context(alpha.schema_name):
        job.refresh_from_db()
    assert job.next_run_at > end + timedelta(seconds=LOOKAHEAD)


def test_with_no_extra_a_job_is_visited_once_per_slot(live, redis_client):
    """The measure the test above is read against: without the extra, one visit a slot."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"interval_seconds": EVERY})
    engine = _engine(redis_client, clock, extra=0)
    engine.materialise()
    visits: list[int] = []
    _drive(engine, clock, START + timedelta(seconds=200), visits)
    assert sum(visits) >= 200 / EVERY - 1


def test_an_edit_inside_the_extra_is_followed(live, redis_client):
    """Runs prepared in the extra part of the window follow an edit as the lookahead's do:
    the slots the new schedule has fire once, the others never."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule={"interval_seconds": EVERY})
    engine = _engine(redis_client, clock)
    engine.materialise()
    first = runs_of(alpha)[0].scheduled_for
    edited_at = START + timedelta(seconds=5)
    clock.set(edited_at)
    with schema_context(alpha.schema_name):
        job_update(
            tenant=alpha,
            actor=ACTOR,
            job_id=job.id,
            data={"schedule": {"interval_seconds": 15}},
            clock=clock,
        )
    end = START + timedelta(seconds=120)
    _drive(engine, clock, end, [])
    fired = [r for r in runs_of(alpha, scheduled_for__lte=end) if r.status == states.QUEUED]
    slots = [r.scheduled_for for r in fired]
    assert len(slots) == len(set(slots))  # none twice
    before = [s for s in _every(first, edited_at, EVERY)]
    after = [s for s in slots if s > edited_at]
    assert [s for s in slots if s <= edited_at] == before
    assert after and all((b - a) == timedelta(seconds=15) for a, b in itertools.pairwise(after))
    assert after[-1] > end - timedelta(seconds=15)  # no slot of the new schedule lost


def test_a_new_leader_fires_the_runs_the_last_one_prepared_past_the_lookahead(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"interval_seconds": EVERY})
    old = _engine(redis_client, clock)
    old.materialise()
    prepared = [r.id for r in runs_of(alpha)]
    assert len(prepared) >= 6  # the extra's slots among them
    clock.advance(2)
    new = _engine(redis_client, clock)  # a new epoch: the old leader is fenced out
    new.relay(force=True)
    assert set(prepared) <= new.runs.known  # held before their instants
    end = START + timedelta(seconds=100)
    _drive(new, clock, end, [])
    fired = [r for r in runs_of(alpha, scheduled_for__lte=end) if r.status == states.QUEUED]
    assert set(prepared) <= {r.id for r in fired}
    slots = [r.scheduled_for for r in fired]
    assert slots == _every(slots[0], end, EVERY)


def test_a_run_once_catch_up_is_not_cancelled_by_a_slot_in_the_extra(live, redis_client):
    """No leader from 12:59 to 13:59:15: the hourly job's 13:00 slot was missed. With the
    plan reaching 14:00:15, the 14:00 slot (45 s away, past the lookahead) must not stand
    in for the `run_once` catch-up, as it would not have without the extra."""
    alpha = live["alpha"].tenant
    clock = FakeClock(utc(2026, 6, 1, 12, 59))
    make_job(alpha, clock, schedule={"cron": "0 * * * *"}, misfire_policy="run_once")
    clock.set(utc(2026, 6, 1, 13, 59, 15))
    engine = _engine(redis_client, clock)
    engine.materialise()
    assert [(r.scheduled_for, r.status) for r in runs_of(alpha)] == [
        (utc(2026, 6, 1, 13, 0), states.SCHEDULED),
        (utc(2026, 6, 1, 14, 0), states.SCHEDULED),
    ]
