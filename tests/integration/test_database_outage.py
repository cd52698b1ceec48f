"""A worker meeting a database that does not answer: nothing it did is lost or done twice
(the real outage is `make chaos` postgres-restart; here the failing calls are forced)."""

from __future__ import annotations

import pytest
from celery.exceptions import Reject
from django.db import OperationalError

from runs import execution, tasks
from runs.outcomes import Decision, Outcome


def test_a_claim_the_database_refused_goes_back_to_the_broker(monkeypatch):
    def refused(**_):
        raise OperationalError("terminating connection due to administrator command")

    looks = []

    def still_refused(**_):  # the look for a claim whose reply was lost
        looks.append(1)
        refused()

    monkeypatch.setattr(execution, "claim_run", refused)
    monkeypatch.setattr(execution, "claim_made", still_refused)
    monkeypatch.setattr(execution, "CLAIM_RECOVERY_PAUSES", (0, 0))
    monkeypatch.setattr(tasks, "REQUEUE_PAUSE_SECONDS", 0)
    with pytest.raises(Reject) as rejected:
        tasks.execute_run("t_alpha", "01a2311d-aa35-7e0c-a701-72eadcb3f64a", 1)
    assert rejected.value.requeue is True  # not acknowledged: the broker delivers it again
    assert len(looks) == 3  # at once, then after each pause: bounded


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
