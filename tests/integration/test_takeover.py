"""Bounded takeover (defect: a frozen leader inside a fenced transaction held the new
leader's epoch bump, and so all scheduling, until TCP gave up). Driven with two real
database connections: the old leader's transaction holds the lease row FOR SHARE while the
new leader bumps the epoch."""

from __future__ import annotations

import threading

import pytest
from django.db import DatabaseError, connection, transaction
from django.test import override_settings

from beat.lease import LeaseLost, bump_epoch, current_epoch
from beat.session import bounded_leader_session
from beat.store import fence
from core.clock import FakeClock
from core.keys import leader_lock_name

from .helpers import make_job, new_engine, queued_messages, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)


class FrozenLeader(threading.Thread):
    """The old leader: inside a fenced transaction, then frozen (idle, or in a statement)."""

    def __init__(self, epoch: int, statement: str | None = None) -> None:
        super().__init__(daemon=True)
        self.epoch, self.statement = epoch, statement
        self.inside, self.wake = threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                fence(cursor, self.epoch)
                self.inside.set()
                if self.statement:
                    cursor.execute(self.statement)  # frozen in a statement
                self.wake.wait(30)  # frozen between statements (idle in transaction)
                cursor.execute("SELECT 1")  # woken: its next write
        except BaseException as exc:
            self.error = exc
        finally:
            connection.close()


@pytest.mark.parametrize("statement", [None, "SELECT pg_sleep(30)"], ids=["idle", "in-statement"])
def test_new_leader_ends_the_fenced_transaction_of_a_frozen_one(live, statement):
    old_epoch = bump_epoch("old-leader")
    old = FrozenLeader(old_epoch, statement)
    old.start()
    assert old.inside.wait(10)
    new_epoch = bump_epoch("new-leader", lock_wait_seconds=0.2)  # would wait for ever before
    old.wake.set()
    old.join(10)
    assert new_epoch == old_epoch + 1
    assert current_epoch() == (new_epoch, "new-leader")
    assert isinstance(old.error, DatabaseError)  # its session was ended: nothing it wrote stays


def test_leader_session_ends_a_transaction_left_idle(live):
    """Even with no new leader to end it, PostgreSQL itself ends the transaction of a leader
    frozen inside it, after SCHEDULER_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS."""
    errors: list[BaseException] = []

    def frozen() -> None:
        try:
            bounded_leader_session()
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                threading.Event().wait(1.5)
                cursor.execute("SELECT 1")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    with override_settings(SCHEDULER_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS=0.5):
        thread = threading.Thread(target=frozen)
        thread.start()
        thread.join(10)
    assert errors and isinstance(errors[0], DatabaseError)


def test_leader_whose_lease_lapsed_publishes_nothing(live, redis_client):
    """Its epoch is still current in PostgreSQL (the new leader has not bumped it yet), but
    another process holds the Redis lease: the fenced push is refused, the transaction rolls
    back, and the runs wait for the new leader."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    old = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    old.materialise()
    redis_client.set("lock:" + leader_lock_name(), "another-process", ex=60)
    clock.set(utc(2026, 6, 1, 12, 1))
    with pytest.raises(LeaseLost):
        old.fire()
    assert queued_messages(redis_client) == []
    assert [r.status for r in runs_of(alpha)] == ["scheduled"]
