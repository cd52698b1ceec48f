"""A worker meeting a database that does not answer: nothing it did is lost or done twice
(the real outage is `make chaos` postgres-restart; here the failing calls are forced)."""

from __future__ import annotations

import time

import pytest
from celery.exceptions import Reject, SoftTimeLimitExceeded
from django.db import OperationalError

from runs import execution, tasks
from runs.outcomes import Decision, Outcome


def _requeued() -> None:
    with pytest.raises(Reject) as rejected:
        tasks.execute_run("t_alpha", "01a2311d-aa35-7e0c-a701-72eadcb3f64a", 1)
    assert rejected.value.requeue is True  # not acknowledged: the broker delivers it again


def test_a_claim_the_database_refused_goes_back_to_the_broker(monkeypatch):
    def refused():
        raise OperationalError("connection refused")

    monkeypatch.setattr(execution.connection, "ensure_connection", refused)
    monkeypatch.setattr(tasks, "REQUEUE_PAUSE_SECONDS", 0)
    _requeued()


class _SoftLimitedTime:
    """`time` for the module under test, whose first sleep is where Celery's soft time
    limit fires (it raises once per task, wherever the task is)."""

    def __init__(self) -> None:
        self.fired = False

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, _seconds: float) -> None:
        if not self.fired:
            self.fired = True
            raise SoftTimeLimitExceeded()


def test_a_soft_time_limit_in_the_requeue_pause_still_hands_the_delivery_back(monkeypatch):
    """Raised out of the pause, the limit failed the task: acknowledged, the delivery was
    lost and the run waited for the reaper."""

    def refused():
        raise OperationalError("connection refused")

    clock = _SoftLimitedTime()
    monkeypatch.setattr(execution.connection, "ensure_connection", refused)
    monkeypatch.setattr(tasks, "time", clock)
    _requeued()
    assert clock.fired


def test_a_soft_time_limit_between_two_looks_does_not_end_the_look(monkeypatch):
    """The database answers the second look, which finds the claim: the run goes on
    (a limit out of the pause had handed back a delivery whose claim had committed)."""
    found, looks = object(), []

    def lost(**_):
        raise OperationalError("server closed the connection unexpectedly")

    def second_look_finds_it(**_):
        looks.append(1)
        if len(looks) == 1:
            lost()
        return found

    clock = _SoftLimitedTime()
    monkeypatch.setattr(execution.connection, "ensure_connection", lambda: None)
    monkeypatch.setattr(execution, "_backend_pid", lambda: None)
    monkeypatch.setattr(execution, "claim_run", lost)
    monkeypatch.setattr(execution, "claim_made", second_look_finds_it)
    monkeypatch.setattr(execution, "time", clock)
    claim = {"schema": "t_alpha", "run_id": "r", "attempt": 1, "worker": "w", "now": None}
    assert execution.claim_or_requeue(**claim) is found
    assert clock.fired and len(looks) == 2


def test_a_claim_lost_in_flight_is_looked_for_a_bounded_time_then_goes_back(monkeypatch):
    """The connection broke with the claim in flight (no SQLSTATE): it may have committed,
    so the worker looks for it while the database does not answer, for a bounded time."""
    looks = []

    def lost(**_):
        raise OperationalError("server closed the connection unexpectedly")

    def still_down(**_):
        looks.append(1)
        lost()

    monkeypatch.setattr(execution.connection, "ensure_connection", lambda: None)
    monkeypatch.setattr(execution, "claim_run", lost)
    monkeypatch.setattr(execution, "claim_made", still_down)
    monkeypatch.setattr(execution, "CLAIM_RECOVERY_SECONDS", 0.5)
    monkeypatch.setattr(tasks, "REQUEUE_PAUSE_SECONDS", 0)
    started = time.monotonic()
    _requeued()
    assert len(looks) >= 2 and time.monotonic() - started < 2


def test_a_claim_the_server_refused_is_not_looked_for(monkeypatch):
    """A lock timeout is the server's answer: the claim did not commit, and the delivery
    goes back at once."""
    looks = []

    class LockTimeout(Exception):
        sqlstate = "55P03"

    def timed_out(**_):
        raise OperationalError("canceling statement due to lock timeout") from LockTimeout()

    monkeypatch.setattr(execution.connection, "ensure_connection", lambda: None)
    monkeypatch.setattr(execution, "claim_run", timed_out)
    monkeypatch.setattr(execution, "claim_made", lambda **_: looks.append(1))
    monkeypatch.setattr(tasks, "REQUEUE_PAUSE_SECONDS", 0)
    _requeued()
    assert looks == []


def test_a_finish_the_database_refused_is_tried_again_until_it_lands(monkeypatch):
    calls, pauses = [], []
    decision = Decision("succeeded", 1, None)

    def flaky(claimed, outcome, now):
        calls.append(now)
        if len(calls) < 3:
            raise OperationalError("the connection is closed")
        return decision

    monkeypatch.setattr(execution, "finish_run", flaky)

    class Clock:
        def now(self):
            return "now"

    result = execution.finish_with_retries(None, Outcome(True), Clock(), sleep=pauses.append)
    assert result is decision and len(calls) == 3
    assert pauses == [0.25, 0.5]  # growing, bounded pauses between tries


def test_a_finish_gives_up_after_a_bounded_number_of_tries(monkeypatch):
    def down(claimed, outcome, now):
        raise OperationalError("could not connect")

    monkeypatch.setattr(execution, "finish_run", down)

    class Clock:
        def now(self):
            return "now"

    pauses = []
    with pytest.raises(OperationalError):
        execution.finish_with_retries(None, Outcome(True), Clock(), sleep=pauses.append)
    assert len(pauses) == execution.FINISH_TRIES - 1 and sum(pauses) < 20


def test_connecting_to_a_server_that_never_answers_is_bounded(django_db_blocker):
    """A host that takes the TCP connection and says nothing (a hung server, a black-holing
    proxy): without `connect_timeout` psycopg waited 130 s. The setting reaches every
    connection's options, and the backend gives up at it."""
    import copy
    import socket

    from django.conf import settings
    from django.db import connections

    default = connections["default"].settings_dict
    assert default["OPTIONS"]["connect_timeout"] == settings.DB_CONNECT_TIMEOUT_SECONDS
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog), never answers
    try:
        params = copy.deepcopy(default)
        params.update(HOST="127.0.0.1", PORT=silent.getsockname()[1])
        params["OPTIONS"]["connect_timeout"] = 1
        wrapper = type(connections["default"])(params, alias="silent")
        started = time.monotonic()
        with django_db_blocker.unblock(), pytest.raises(OperationalError):
            wrapper.ensure_connection()
        assert time.monotonic() - started < 5
    finally:
        silent.close()
