"""Alerts against real PostgreSQL, Redis and a local HTTP receiver: runs executed by the
worker's own code, the leader's alert sweep and delivery driven by hand with a fake clock.
Each incident notifies once, whatever repeats: a window read twice, two evaluators racing,
a delivery that fails and is retried, a leader that dies mid-send."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection, transaction
from django.test import override_settings
from django_tenants.utils import schema_context
from standardwebhooks import Webhook

from alerts import states as alert_states
from alerts.channels import channel_create
from alerts.delivery import Result, claim_next, deliver_tenant, record
from alerts.evaluate import evaluate_tenant
from alerts.models import DeliveryAttempt, EvaluationCursor, Incident, Notification
from beat import store
from beat.alerting import Alerting
from beat.store import FencingError
from core.clock import FakeClock
from runs import states
from runs.models import Run

from .helpers import make_job, new_engine
from .receiver import Receiver
from .test_outbound import execute, new_secret, now_clock, trigger

ALLOW_LOCAL = override_settings(
    SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"],
    ALERTS_DELIVERY_BACKOFF_SECONDS=10,
    ALERTS_DELIVERY_LEASE_SECONDS=60,
    ALERTS_OVERLAP_SECONDS=60,
)


@pytest.fixture(autouse=True)
def _settings():
    with ALLOW_LOCAL:
        yield


@pytest.fixture
def receiver():
    with Receiver() as server:
        yield server


def fail_job(tenant, clock, *, attempts: int = 1, times=None, **extra):
    payload = {} if times is None else {"times": times}
    retry = {"max_attempts": attempts, "backoff_seconds": 1, "jitter": False}
    target = {"type": "task", "task": "builtin.fail"}
    extra.setdefault("name", "flaky")
    return make_job(
        tenant, clock, schedule=None, target=target, payload=payload, retry=retry, **extra
    )


def channel(tenant, clock, **data):
    data.setdefault("name", "ops")
    data.setdefault("kind", "webhook")
    with schema_context(tenant.schema_name):
        return channel_create(data=data, clock=clock)


def run_once(tenant, clock, job, expect: str, attempt: int = 1):
    """One attempt of a new manual run (attempt 1) or of `job`'s retrying run."""
    if attempt == 1:
        run = trigger(tenant, clock, job)
    else:
        with schema_context(tenant.schema_name):
            run = Run.objects.get(job=job, status=states.RETRYING)
            Run.objects.filter(pk=run.pk).update(status=states.QUEUED)  # the leader's admission
    assert execute(tenant, run.id, attempt, clock) == expect
    return run


def succeed(tenant, clock, job):
    """A run of the builtin.fail job that succeeds (it fails no attempt this time)."""
    with schema_context(tenant.schema_name):
        saved = job.payload
        job.payload = {"times": 0}
        job.save(update_fields=["payload"])
    run = run_once(tenant, clock, job, states.SUCCEEDED)
    with schema_context(tenant.schema_name):
        job.payload = saved
        job.save(update_fields=["payload"])
    return run


def rows(tenant, model, **filters):
    with schema_context(tenant.schema_name):
        return list(model.objects.filter(**filters).order_by("pk"))


def evaluate(alerting: Alerting, clock: FakeClock, seconds: float = 1) -> int:
    clock.advance(seconds)
    return alerting.evaluate(force=True)


def deliver(alerting: Alerting) -> int:
    alerting.evaluate(force=True)  # finds the tenants with due notifications
    return alerting.deliver_due()


def leader(redis_client, clock) -> Alerting:
    return Alerting(new_engine(redis_client, clock))


def test_a_dead_letter_notifies_once_signed_and_its_recovery_once(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    secret = new_secret(alpha, clock)
    job = fail_job(alpha, clock)
    channel(alpha, clock, url=receiver.url("/alerts"), headers={"Authorization": "Bearer s3"})
    alerting = leader(redis_client, clock)
    run = run_once(alpha, clock, job, states.DEAD)
    for _ in range(3):  # the same window read again and again opens nothing more
        evaluate(alerting, clock)
    [incident] = rows(alpha, Incident)
    assert (incident.kind, incident.run_id, incident.resolved_at) == (
        alert_states.DEAD_LETTER,
        run.id,
        None,
    )
    assert deliver(alerting) == 1
    assert deliver(alerting) == 0
    [request] = receiver.requests
    headers = {k.lower(): v for k, v in request.headers.items()}
    body = Webhook(secret).verify(request.body, headers)
    [notification] = rows(alpha, Notification)
    assert headers["webhook-id"] == str(notification.id) == body["id"]
    assert headers["authorization"] == "Bearer s3"
    assert body["type"] == "alert.opened"
    assert body["incident"]["kind"] == alert_states.DEAD_LETTER
    assert body["job"] == {"id": job.id, "name": "flaky"}
    assert notification.state == alert_states.SENT

    succeed(alpha, clock, job)
    evaluate(alerting, clock)
    evaluate(alerting, clock)
    [incident] = rows(alpha, Incident)
    assert incident.resolved_at is not None
    assert deliver(alerting) == 1
    resolved = receiver.requests[1]
    body = Webhook(secret).verify(
        resolved.body, {k.lower(): v for k, v in resolved.headers.items()}
    )
    assert body["type"] == "alert.resolved"
    assert body["incident"]["resolved_by_run"] is not None
    assert len(rows(alpha, Notification)) == 2


def test_n_consecutive_failed_attempts_open_one_incident(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    job = fail_job(alpha, clock, attempts=2)  # each run: two failed attempts, then dead
    channel(alpha, clock, url=receiver.url("/a"), on_dead_letter=False, failure_threshold=3)
    alerting = leader(redis_client, clock)
    run_once(alpha, clock, job, states.RETRYING)
    clock.advance(1)
    run_once(alpha, clock, job, states.DEAD, attempt=2)
    evaluate(alerting, clock)
    assert rows(alpha, Incident) == []  # two failures: below the threshold
    run_once(alpha, clock, job, states.RETRYING)  # the third failed attempt in a row
    evaluate(alerting, clock)
    clock.advance(1)
    run_once(alpha, clock, job, states.DEAD, attempt=2)  # the fourth: the same incident
    evaluate(alerting, clock)
    [incident] = rows(alpha, Incident)
    assert incident.kind == alert_states.FAILURES
    assert "last 3 attempts failed" in incident.detail
    assert deliver(alerting) == 1
    assert len(receiver.requests) == 1


def test_a_success_between_failures_breaks_the_streak(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    job = fail_job(alpha, clock)
    channel(alpha, clock, url=receiver.url("/a"), on_dead_letter=False, failure_threshold=3)
    alerting = leader(redis_client, clock)
    run_once(alpha, clock, job, states.DEAD)
    run_once(alpha, clock, job, states.DEAD)
    succeed(alpha, clock, job)
    run_once(alpha, clock, job, states.DEAD)
    run_once(alpha, clock, job, states.DEAD)
    evaluate(alerting, clock)
    assert rows(alpha, Incident) == []


def test_a_failing_delivery_is_retried_with_backoff_and_succeeds_once(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    secret = new_secret(alpha, clock)
    job = fail_job(alpha, clock)
    channel(alpha, clock, url=receiver.url("/a"))
    alerting = leader(redis_client, clock)
    run_once(alpha, clock, job, states.DEAD)
    evaluate(alerting, clock)
    receiver.status = 503
    assert deliver(alerting) == 1
    [notification] = rows(alpha, Notification)
    assert notification.state == alert_states.PENDING
    assert notification.attempts == 1
    assert notification.next_attempt_at == clock.now() + timedelta(seconds=10)
    assert "503" in notification.last_error or notification.last_error
    clock.advance(9)
    assert deliver(alerting) == 0  # still waiting out its backoff
    receiver.status = 200
    clock.advance(1)
    assert deliver(alerting) == 1
    clock.advance(3600)
    assert deliver(alerting) == 0
    [notification] = rows(alpha, Notification)
    assert (notification.state, notification.attempts) == (alert_states.SENT, 2)
    tries = rows(alpha, DeliveryAttempt)
    assert [(t.number, t.ok, t.status_code) for t in tries] == [(1, False, 503), (2, True, 200)]
    ids = {r.headers["webhook-id"] for r in receiver.requests}
    assert ids == {str(notification.id)}  # the same message, so receivers dedupe
    for request in receiver.requests:
        Webhook(secret).verify(request.body, {k.lower(): v for k, v in request.headers.items()})


@override_settings(ALERTS_DELIVERY_MAX_ATTEMPTS=2, ALERTS_DELIVERY_BACKOFF_SECONDS=1)
def test_a_delivery_gives_up_after_its_attempts(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    job = fail_job(alpha, clock)
    channel(alpha, clock, url=receiver.url("/a"))
    alerting = leader(redis_client, clock)
    run_once(alpha, clock, job, states.DEAD)
    evaluate(alerting, clock)
    receiver.status = 500
    for _ in range(4):
        deliver(alerting)
        clock.advance(5)
    [notification] = rows(alpha, Notification)
    assert (notification.state, notification.attempts) == (alert_states.GIVEN_UP, 2)
    assert len(receiver.requests) == 2


def _race(target, count: int = 2) -> list:
    """Run `target(barrier)` in `count` threads, each with its own database connection."""
    barrier = threading.Barrier(count)
    results: list = []
    errors: list = []

    def run() -> None:
        try:
            results.append(target(barrier))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    return results


def test_two_evaluators_racing_open_one_incident_and_one_notification(live, redis_client):
    """The race: two leaders' evaluations of the same window, in two connections, both
    inserting the incident at the same moment; the partial unique index lets one in."""
    alpha = live["alpha"].tenant
    clock = now_clock()
    job = fail_job(alpha, clock)
    channel(alpha, clock, url="https://alerts.example.com/hook")
    run_once(alpha, clock, job, states.DEAD)
    clock.advance(1)

    def evaluator(barrier):
        with transaction.atomic(), connection.cursor() as cursor:
            barrier.wait(10)
            return evaluate_tenant(
                cursor, schema=alpha.schema_name, slug="alpha", now=clock.now(), overlap=60
            ).opened

    assert sorted(_race(evaluator)) == [0, 1]
    assert len(rows(alpha, Incident)) == 1
    assert len(rows(alpha, Notification)) == 1


def test_a_new_leader_rereading_a_resolved_window_opens_nothing_again(live, redis_client):
    """The race: leader A opened and resolved an incident; leader B (its cursor behind,
    the evaluation re-read from an older point) sees the dead run again."""
    alpha = live["alpha"].tenant
    clock = now_clock()
    job = fail_job(alpha, clock)
    channel(alpha, clock, url="https://alerts.example.com/hook")
    first = leader(redis_client, clock)
    run_once(alpha, clock, job, states.DEAD)
    evaluate(first, clock)
    succeed(alpha, clock, job)
    evaluate(first, clock)
    with schema_context(alpha.schema_name):
        EvaluationCursor.objects.update(evaluated_through=clock.now() - timedelta(minutes=5))
    second = leader(redis_client, clock)  # a new epoch
    evaluate(second, clock)
    [incident] = rows(alpha, Incident)
    assert incident.resolved_at is not None
    assert len(rows(alpha, Notification)) == 2  # opened and resolved, nothing more


def test_two_senders_racing_deliver_a_notification_once(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    job = fail_job(alpha, clock)
    channel(alpha, clock, url=receiver.url("/a"))
    alerting = leader(redis_client, clock)
    run_once(alpha, clock, job, states.DEAD)
    evaluate(alerting, clock)
    epoch = alerting.engine.epoch

    def sender(barrier):
        barrier.wait(10)
        return deliver_tenant(
            schema=alpha.schema_name,
            slug="alpha",
            clock=clock,
            holder=threading.current_thread().name,
            fence=lambda cursor: store.fence(cursor, epoch),
        )

    assert sorted(_race(sender, 3)) == [0, 0, 1]
    assert len(receiver.requests) == 1


def test_after_failover_a_send_claimed_by_the_dead_leader_goes_once_after_its_lease(
    live, redis_client, receiver
):
    """The race: leader A claims a notification and dies before sending (or mid-send);
    leader B takes over. B must not send while A's claim lease runs, must send once it
    expired, and A's late record must change nothing."""
    alpha = live["alpha"].tenant
    clock = now_clock()
    job = fail_job(alpha, clock)
    channel(alpha, clock, url=receiver.url("/a"))
    old = leader(redis_client, clock)
    run_once(alpha, clock, job, states.DEAD)
    evaluate(old, clock)
    with transaction.atomic(), connection.cursor() as cursor:
        store.fence(cursor, old.engine.epoch)
        claimed = claim_next(
            cursor, schema=alpha.schema_name, now=clock.now(), holder="A", lease_seconds=60
        )
    assert claimed is not None

    new = leader(redis_client, clock)  # the takeover bumps the epoch
    with pytest.raises(FencingError):  # the deposed leader claims nothing more
        deliver_tenant(
            schema=alpha.schema_name,
            slug="alpha",
            clock=clock,
            holder="A",
            fence=lambda cursor: store.fence(cursor, old.engine.epoch),
        )
    evaluate(new, clock, 30)
    assert deliver(new) == 0  # A's claim is leased
    assert receiver.requests == []
    evaluate(new, clock, 31)
    assert deliver(new) == 1
    with transaction.atomic(), connection.cursor() as cursor:  # A wakes up and records
        late = record(
            cursor, schema=alpha.schema_name, claimed=claimed, result=Result(False), now=clock.now()
        )
    assert late == "superseded"
    clock.advance(3600)
    assert deliver(new) == 0
    [notification] = rows(alpha, Notification)
    assert (notification.state, notification.attempts) == (alert_states.SENT, 2)
    assert len(receiver.requests) == 1
    assert len(rows(alpha, Incident)) == 1


def test_a_run_that_has_not_succeeded_by_its_slot_and_grace_opens_missed(live, redis_client):
    alpha = live["alpha"].tenant
    clock = now_clock()
    job = make_job(alpha, clock, name="nightly", schedule={"interval_seconds": 60})
    channel(alpha, clock, url="https://alerts.example.com/hook", missed_grace_seconds=30)
    alerting = leader(redis_client, clock)
    slot = clock.now() + timedelta(seconds=5)
    with schema_context(alpha.schema_name):
        Run.objects.create(
            job=job, trigger="schedule", scheduled_for=slot, due_at=slot, status=states.QUEUED
        )
    clock.set(slot + timedelta(seconds=29))
    alerting.evaluate(force=True)
    assert rows(alpha, Incident) == []  # within the grace
    clock.set(slot + timedelta(seconds=31))
    alerting.evaluate(force=True)
    [incident] = rows(alpha, Incident)
    assert incident.kind == alert_states.MISSED
    assert incident.trigger_at == slot + timedelta(seconds=30)
    assert "queued" in incident.detail


@override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend")
def test_an_email_channel_sends_through_the_mail_backend(live, redis_client):
    alpha = live["alpha"].tenant
    clock = now_clock()
    job = fail_job(alpha, clock)
    channel(alpha, clock, kind="email", emails=["ops@example.com"])
    alerting = leader(redis_client, clock)
    run_once(alpha, clock, job, states.DEAD)
    evaluate(alerting, clock)
    mail.outbox.clear()
    assert deliver(alerting) == 1
    [message] = mail.outbox
    assert message.to == ["ops@example.com"]
    assert "flaky" in message.subject and "dead-lettered" in message.subject
    [notification] = rows(alpha, Notification)
    assert message.extra_headers["X-Tickwork-Notification-Id"] == str(notification.id)
    assert notification.state == alert_states.SENT


def test_a_channel_url_refused_at_send_time_is_not_contacted(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    job = fail_job(alpha, clock)
    channel(alpha, clock, url=receiver.url("/a"))  # allowed when saved
    alerting = leader(redis_client, clock)
    run_once(alpha, clock, job, states.DEAD)
    evaluate(alerting, clock)
    with override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=[]):  # the operator narrowed it
        assert deliver(alerting) == 1
    assert receiver.requests == []
    [notification] = rows(alpha, Notification)
    assert notification.state == alert_states.PENDING
    assert "refused destination" in notification.last_error


def test_another_tenants_runs_raise_nothing_here(live, redis_client):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = now_clock()
    job = fail_job(beta, clock)
    channel(alpha, clock, url="https://alerts.example.com/hook")
    alerting = leader(redis_client, clock)
    run_once(beta, clock, job, states.DEAD)
    evaluate(alerting, clock)
    assert rows(alpha, Incident) == [] and rows(beta, Incident) == []


def test_rotate_secrets_reseals_channel_header_values(live, redis_client):
    """What `rotate_secrets` does for each tenant's channels (the command itself would
    also reseal the session's tenants' signing secrets with a throwaway key)."""
    from cryptography.fernet import Fernet

    from alerts.channels import channel_secrets_reseal
    from alerts.models import AlertChannel
    from core.encryption import keyring

    alpha = live["alpha"].tenant
    clock = now_clock()
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    with override_settings(TICKWORK_SECRET_KEYS=[old]):
        made = channel(alpha, clock, url="https://alerts.example.com/hook", headers={"X-K": "v"})
    with override_settings(TICKWORK_SECRET_KEYS=[new, old]), schema_context(alpha.schema_name):
        assert channel_secrets_reseal(ring=keyring()) == 1
        assert channel_secrets_reseal(ring=keyring()) == 0  # idempotent
        sealed = AlertChannel.objects.get(pk=made.pk).headers["X-K"]
        assert keyring().is_current(sealed) and keyring().unseal(sealed) == "v"
