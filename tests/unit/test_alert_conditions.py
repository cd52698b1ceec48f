"""The rule that makes alert evaluation idempotent (alerts/conditions.py): an incident
triggered at T opens only if its job has no success after T; a success after T resolves
it. Pure: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

from alerts import conditions as c
from alerts.payloads import email_text, payload
from alerts.states import DEAD_LETTER, FAILURES, MISSED, OPENED, RESOLVED, backoff_seconds

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def channel(**kw) -> c.Channel:
    base = dict(
        id=1,
        job_id=None,
        on_dead_letter=True,
        failure_threshold=None,
        missed_grace_seconds=None,
        notify_resolved=True,
        created_at=T0,
    )
    return c.Channel(**{**base, **kw})


def ended(seconds: float, ok: bool, dead: bool = False, job: int = 7) -> c.Ended:
    return c.Ended(job, uuid4(), at(seconds), ok, dead)


def test_a_dead_letter_opens_unless_the_job_succeeded_after_it():
    dead = ended(10, False, dead=True)
    [opening] = c.to_open([channel()], [dead], {}, [])
    assert (opening.kind, opening.trigger_at, opening.run_id) == (
        DEAD_LETTER,
        dead.finished_at,
        dead.run_id,
    )
    assert c.to_open([channel()], [dead, ended(20, True)], {}, []) == []


def test_nothing_before_the_channel_existed_and_nothing_of_other_jobs():
    dead = ended(10, False, dead=True)
    assert c.to_open([channel(created_at=at(11))], [dead], {}, []) == []
    assert c.to_open([channel(job_id=8)], [dead], {}, []) == []
    assert c.to_open([channel(on_dead_letter=False)], [dead], {}, []) == []


def test_n_consecutive_failures_counts_the_newest_attempts():
    streak = [ended(30, False), ended(20, False), ended(10, False)]
    [opening] = c.to_open([channel(failure_threshold=3)], streak, {7: streak}, [])
    assert (opening.kind, opening.trigger_at) == (FAILURES, at(30))
    broken = [ended(30, False), ended(20, True), ended(10, False)]
    assert c.to_open([channel(failure_threshold=3)], broken, {7: broken}, []) == []
    assert c.to_open([channel(failure_threshold=4)], streak, {7: streak}, []) == []


def test_a_missed_slot_opens_unless_a_success_came_after_its_deadline():
    missed = c.Missed(1, 7, uuid4(), at(0), at(30), "queued")
    [opening] = c.to_open([channel()], [], {}, [missed])
    assert (opening.kind, opening.trigger_at) == (MISSED, at(30))
    assert "queued" in opening.detail
    assert c.to_open([channel()], [ended(31, True)], {}, [missed]) == []


def test_a_success_after_the_trigger_resolves_and_one_before_does_not():
    incident = c.OpenIncident(5, 1, 7, at(30))
    assert c.to_resolve([incident], [ended(29, True)]) == []
    success = ended(31, True)
    [(resolved, when, run_id)] = c.to_resolve([incident], [ended(29, True), success])
    assert (resolved, when, run_id) == (incident, at(31), success.run_id)


def test_the_delivery_backoff_doubles_up_to_its_cap():
    assert [backoff_seconds(n, initial=10, maximum=60) for n in (1, 2, 3, 4, 5)] == [
        10,
        20,
        40,
        60,
        60,
    ]


def test_the_payload_and_email_say_what_happened():
    incident = {
        "id": 3,
        "kind": MISSED,
        "detail": "late",
        "run_id": None,
        "trigger_at": at(30),
        "opened_at": at(31),
    }
    body = payload(
        notification_id="n1",
        event=OPENED,
        tenant="acme",
        incident=incident,
        job={"id": 7, "name": "nightly"},
        at=at(31),
    )
    assert (
        body["type"] == "alert.opened" and body["incident"]["trigger_at"] == "2026-12-01T12:00:30Z"
    )
    subject, text = email_text(body)
    assert "nightly" in subject and "did not succeed in time" in subject and "n1" in text
    resolved = payload(
        notification_id="n2",
        event=RESOLVED,
        tenant="acme",
        incident={**incident, "resolved_at": at(40), "resolved_by_run": "r"},
        job={"id": 7, "name": "nightly"},
        at=at(40),
    )
    assert "resolved" in email_text(resolved)[0]
