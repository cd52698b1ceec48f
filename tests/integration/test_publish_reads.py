"""The fire's early-publication reads go through a psycopg pipeline, sent ahead of the one
in use (beat/publish_reads.py). What held for reads one after the other must still hold:
a read that fails costs only its tenant, the reads after it are done, and the connection
leaves the pipeline whatever the fire's loop does."""

from __future__ import annotations

import pytest
from django.db import connection

from beat import fire as fire_module
from beat import publish_reads
from beat.lease import LeaseLost
from core.clock import FakeClock
from runs import states

from .helpers import make_job, new_engine, other_connection, runs_of, utc

START = utc(2026, 6, 1, 12, 1, 0)
MATERIALISED_AT = utc(2026, 6, 1, 12, 1, 45)
FIRED_AT = utc(2026, 6, 1, 12, 3)


def _reads(seen: list):
    """Record each publishable read as it is sent (an execute), in order."""

    def wrapper(execute, sql, params, many, context):
        text = sql.as_string(context["cursor"].connection) if hasattr(sql, "as_string") else sql
        if "WITH ORDINALITY" in text:
            seen.append(("sent", text))
        return execute(sql, params, many, context)

    return wrapper


def _jobs(tenant, clock, count: int, minute: int) -> None:
    for n in range(count):
        make_job(tenant, clock, name=f"j{n}", schedule={"cron": f"{minute} 12 * * *"})


def test_the_next_reads_are_sent_before_the_first_one_is_used(live, redis_client, monkeypatch):
    """Three reads of two runs: the second is sent before the first one's rows become
    messages (with reads one after the other it would be sent after)."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    _jobs(alpha, clock, 6, 2)
    engine = new_engine(redis_client, clock, fire_chunk=2)
    clock.set(MATERIALISED_AT)
    engine.materialise()
    events: list = []
    rebuilt = engine.runs.rebuilt

    def used(entry, *args):
        events.append(("used", entry.run_id))
        return rebuilt(entry, *args)

    monkeypatch.setattr(engine.runs, "rebuilt", used)
    clock.set(utc(2026, 6, 1, 12, 2))
    with connection.execute_wrapper(_reads(events)):
        assert engine.fire().published == 6
    kinds = [kind for kind, _ in events]
    assert kinds.count("sent") == 3
    assert kinds.index("used") > [n for n, k in enumerate(kinds) if k == "sent"][1]
    assert {r.status for r in runs_of(alpha)} == {states.QUEUED}


def test_a_read_that_fails_in_the_pipeline_costs_only_its_tenant(live, redis_client):
    """Beta's runs are due first and its jobs table is locked past the fire's lock timeout
    (a migration holding it, say): its first read fails while its second is already sent.
    Beta backs off, its reads are not sent again, and alpha's three reads after it are done
    and published; the fence's transaction is not ended by the failure."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    _jobs(beta, clock, 3, 2)
    _jobs(alpha, clock, 5, 3)
    engine = new_engine(redis_client, clock, fire_chunk=2, lookahead_seconds=120)
    clock.set(MATERIALISED_AT)
    engine.materialise()
    assert len(runs_of(alpha)) == 5 and len(runs_of(beta)) == 3
    holder = other_connection()
    holder.execute(f'LOCK TABLE "{beta.schema_name}".jobs_job IN ACCESS EXCLUSIVE MODE')
    clock.set(FIRED_AT)
    seen: list = []
    try:
        with connection.execute_wrapper(_reads(seen)):
            stats = engine.fire()
    finally:
        holder.rollback()
        holder.close()
    beta_reads = [text for _, text in seen if beta.schema_name in text]
    alpha_reads = [text for _, text in seen if alpha.schema_name in text]
    # Sent: the one that failed and the one behind it (which the server skipped); neither
    # is sent again once beta backs off.
    assert len(beta_reads) == 2
    assert len(alpha_reads) == 3
    assert stats.published == 5 and stats.deferred == 3
    assert not engine.faults.allowed(beta.id)
    assert {r.status for r in runs_of(alpha)} == {states.QUEUED}
    assert {r.status for r in runs_of(beta)} == {states.SCHEDULED}
    assert not connection.in_atomic_block
    assert connection.connection._pipeline is None


def test_the_pipeline_ends_when_the_fire_stops_between_two_reads(live, redis_client, monkeypatch):
    """The broker refuses the first push (lease lost) while the next reads are in the
    pipeline: the fire raises, nothing is written, and the connection is out of the
    pipeline and usable, its transaction rolled back."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    _jobs(alpha, clock, 6, 2)
    engine = new_engine(redis_client, clock, fire_chunk=2)
    clock.set(MATERIALISED_AT)
    engine.materialise()
    monkeypatch.setattr(fire_module, "PUSH_BATCH", 1)

    def refused(messages) -> None:
        raise LeaseLost("another process holds the lease")

    monkeypatch.setattr(engine.writes, "push_messages", refused)
    clock.set(utc(2026, 6, 1, 12, 2))
    with pytest.raises(LeaseLost):
        engine.fire()
    assert connection.connection._pipeline is None
    assert not connection.in_atomic_block
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
    assert {r.status for r in runs_of(alpha)} == {states.SCHEDULED}


def test_reads_ahead_is_a_small_bound():
    """Each read sent ahead holds up to `fire_chunk` runs' rows in memory and a savepoint
    open on the server: a few, not the whole burst."""
    assert 2 <= publish_reads.READS_AHEAD <= 4
