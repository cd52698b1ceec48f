"""Outbound deliveries against real PostgreSQL, Redis and a local HTTP receiver: every
request signed per Standard Webhooks (checked by the reference library and by a minimal
verifier written here from the spec), and secret header values in clear nowhere but on
the wire."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django_tenants.utils import schema_context
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from core.clock import FakeClock
from core.encryption import Keyring
from jobs.models import Job
from runs import states
from runs.execution import run_execute
from runs.models import Run
from runs.services import job_trigger
from tenants.models import Tenant
from tenants.signing import SIGNING_KEYS, signing_secret_info, signing_secret_rotate

from ..api.conftest import Api
from ..scenarios.procs import ROOT, process_env
from .helpers import ACTOR, make_job, message_args, new_engine, queued_messages
from .receiver import Receiver

ALLOW_LOCAL = override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"])


@pytest.fixture
def receiver():
    with Receiver() as server:
        yield server


def now_clock() -> FakeClock:
    """Signatures carry the send time, and receivers (the reference verifier too) refuse
    one more than five minutes away from their own clock: start at the real now."""
    return FakeClock(datetime.now(UTC).replace(microsecond=0))


def spec_verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The receiver's check, written from the Standard Webhooks spec (no shared code)."""
    headers = {k.lower(): v for k, v in headers.items()}
    key = base64.b64decode(secret.removeprefix("whsec_"))
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    return any(
        hmac.compare_digest(part, "v1," + expected)
        for part in headers["webhook-signature"].split(" ")
    )


def new_secret(tenant: Tenant, clock: FakeClock, overlap: float = 0) -> str:
    return signing_secret_rotate(
        tenant=tenant, now=clock.now(), overlap=timedelta(seconds=overlap)
    ).secret


def http_job(
    tenant: Tenant, clock: FakeClock, url: str, headers=None, method="POST", **extra
) -> Job:
    target = {"type": "http", "url": url, "method": method, "headers": headers or {}}
    payload = {"report": "daily", "ü": "ñ"}
    return make_job(tenant, clock, schedule=None, payload=payload, target=target, **extra)


def trigger(tenant: Tenant, clock: FakeClock, job: Job) -> Run:
    with schema_context(tenant.schema_name):
        return job_trigger(tenant=tenant, actor=ACTOR, job_id=job.id, clock=clock)[0]


def execute(tenant: Tenant, run_id, attempt: int, clock: FakeClock) -> str:
    with schema_context(tenant.schema_name):
        return run_execute(
            schema=tenant.schema_name, run_id=str(run_id), attempt=attempt, worker="w1", clock=clock
        )


def deliver(tenant: Tenant, clock: FakeClock, job: Job) -> Run:
    run = trigger(tenant, clock, job)
    assert execute(tenant, run.id, 1, clock) == states.SUCCEEDED
    return run


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


# --- signatures ---------------------------------------------------------------------------


@ALLOW_LOCAL
def test_a_delivery_verifies_and_its_retry_is_the_same_message_signed_again(
    live, redis_client, receiver
):
    alpha = live["alpha"].tenant
    clock = now_clock()
    secret = new_secret(alpha, clock)
    receiver.status = 500
    retry = {"max_attempts": 3, "backoff_seconds": 2, "jitter": False}
    run = trigger(alpha, clock, http_job(alpha, clock, receiver.url("/hook"), retry=retry))
    assert execute(alpha, run.id, 1, clock) == states.RETRYING
    receiver.status = 200
    clock.advance(2)
    with schema_context(alpha.schema_name):
        Run.objects.filter(pk=run.id).update(status=states.QUEUED)  # the leader's admission
    assert execute(alpha, run.id, 2, clock) == states.SUCCEEDED
    first, second = receiver.requests
    for request in (first, second):
        headers = lower(request.headers)
        assert headers["webhook-id"] == str(run.id)  # the message: the same for every attempt
        assert Webhook(secret).verify(request.body, headers) == {"report": "daily", "ü": "ñ"}
        assert spec_verify(secret, headers, request.body)
    stamps = [int(lower(r.headers)["webhook-timestamp"]) for r in (first, second)]
    assert stamps[1] - stamps[0] == 2  # each attempt is signed when it is sent


@ALLOW_LOCAL
def test_a_tampered_body_id_or_timestamp_is_refused_by_both_verifiers(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    secret = new_secret(alpha, clock)
    deliver(alpha, clock, http_job(alpha, clock, receiver.url("/hook")))
    [request] = receiver.requests
    body, headers = request.body, lower(request.headers)
    assert spec_verify(secret, headers, body)
    tampered = [
        (body.replace(b"daily", b"DAILY"), headers),
        (body, {**headers, "webhook-id": "another-run"}),
        (body, {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) + 1)}),
    ]
    for bad_body, bad_headers in tampered:
        assert not spec_verify(secret, bad_headers, bad_body)
        with pytest.raises(WebhookVerificationError):
            Webhook(secret).verify(bad_body, bad_headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret(live["beta"].tenant, clock)).verify(body, headers)  # another tenant's


@ALLOW_LOCAL
def test_a_bodiless_get_is_signed_over_an_empty_body(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    secret = new_secret(alpha, clock)
    deliver(alpha, clock, http_job(alpha, clock, receiver.url("/hook"), method="GET"))
    [request] = receiver.requests
    assert request.method == "GET" and request.body == b""
    Webhook(secret).verify(b"", lower(request.headers), json_parse=False)


@ALLOW_LOCAL
def test_during_a_rotation_overlap_both_secrets_verify_and_after_it_only_the_new_one(
    live, redis_client, receiver
):
    alpha = live["alpha"].tenant
    clock = now_clock()
    old = new_secret(alpha, clock)
    job = http_job(alpha, clock, receiver.url("/hook"))
    deliver(alpha, clock, job)
    new = new_secret(alpha, clock, overlap=60)
    clock.advance(1)
    deliver(alpha, clock, job)
    clock.advance(60)  # the overlap has ended
    deliver(alpha, clock, job)
    before, during, after = ((r.body, lower(r.headers)) for r in receiver.requests)
    assert len(before[1]["webhook-signature"].split(" ")) == 1
    assert len(during[1]["webhook-signature"].split(" ")) == 2
    assert len(after[1]["webhook-signature"].split(" ")) == 1
    for secret in (old, new):
        Webhook(secret).verify(*during)
        assert spec_verify(secret, during[1], during[0])
    Webhook(new).verify(*after)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(*after)
    assert not spec_verify(old, after[1], after[0])
    info = signing_secret_info(tenant=alpha, now=clock.now())
    assert info.previous_expires_at is None


@ALLOW_LOCAL
def test_a_rotation_without_overlap_stops_the_old_secret_at_once(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    old = new_secret(alpha, clock)
    new = new_secret(alpha, clock, overlap=0)
    deliver(alpha, clock, http_job(alpha, clock, receiver.url("/hook")))
    [request] = receiver.requests
    Webhook(new).verify(request.body, lower(request.headers))
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(request.body, lower(request.headers))


@ALLOW_LOCAL
def test_signing_secrets_are_read_once_per_rotation_not_once_per_run(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    new_secret(alpha, clock)
    job = http_job(alpha, clock, receiver.url("/hook"))
    loads = SIGNING_KEYS.loads
    for _ in range(5):
        deliver(alpha, clock, job)
    assert SIGNING_KEYS.loads - loads == 1
    secret = new_secret(alpha, clock, overlap=0)
    for _ in range(3):
        deliver(alpha, clock, job)
    assert SIGNING_KEYS.loads - loads == 2  # the claim saw the new version: read again
    request = receiver.requests[-1]
    Webhook(secret).verify(request.body, lower(request.headers))


@ALLOW_LOCAL
def test_a_tenant_without_a_secret_gets_one_at_its_first_delivery(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    Tenant.objects.filter(pk=alpha.pk).update(
        signing_secret="", signing_secret_previous="", signing_secret_version=0
    )
    deliver(alpha, clock, http_job(alpha, clock, receiver.url("/hook")))
    [request] = receiver.requests
    assert lower(request.headers)["webhook-signature"].startswith("v1,")
    assert signing_secret_info(tenant=alpha, now=clock.now()).version == 1


# --- secret header values -------------------------------------------------------------------


def _redis_text(client) -> bytes:
    """Everything Redis holds, whatever the type of each key."""
    out = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key).decode()
        if kind == "string":
            values = [client.get(key)]
        elif kind == "list":
            values = client.lrange(key, 0, -1)
        elif kind == "hash":
            values = [b"%s=%s" % pair for pair in client.hgetall(key).items()]
        elif kind == "set":
            values = list(client.smembers(key))
        elif kind == "zset":
            values = [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            values = [json.dumps(e, default=repr).encode() for e in client.xrange(key)]
        else:
            values = [client.dump(key) or b""]
        out += [key, *values]
    return b"\n".join(out)


def _database_rows_containing(needles: list[str], schemas: list[str]) -> list[str]:
    """`schema.table` of every row whose text form contains one of the needles."""
    found = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema = ANY(%s) AND table_type = 'BASE TABLE'",
            [schemas],
        )
        for schema, name in cursor.fetchall():
            for needle in needles:
                cursor.execute(
                    f'SELECT count(*) FROM "{schema}"."{name}" t WHERE t::text LIKE %s',
                    [f"%{needle}%"],
                )
                if cursor.fetchone()[0]:
                    found.append(f"{schema}.{name}")
    return found


def _forms(secret: str) -> list[str]:
    """The value, its distinctive part, and its base64 (broker bodies are base64)."""
    return [secret, secret.split(" ", 1)[1], base64.b64encode(secret.encode()).decode()]


@ALLOW_LOCAL
def test_a_secret_header_value_is_in_clear_only_on_the_wire(live, redis_client, receiver, caplog):
    caplog.set_level(logging.DEBUG)
    alpha = live["alpha"]
    api = Api(alpha.token)
    secret = "Bearer tw-" + secrets.token_hex(12)
    receiver.echo = True  # the receiver answers with the headers it got: the excerpt holds it
    headers = {"Authorization": {"value": secret, "secret": True}, "X-Team": "blue"}
    target = {"type": "http", "url": receiver.url("/echo"), "headers": headers}
    created = api.create_job(name="echo", schedule=None, target=target)
    shown = {"Authorization": {"secret": True}, "X-Team": "blue"}
    assert created["target"]["headers"] == shown
    triggered = api.post(f"jobs/{created['id']}/run")
    assert triggered.status_code == 202

    engine = new_engine(redis_client, FakeClock(datetime.now(UTC) + timedelta(seconds=1)))
    engine.load_run_index()
    assert engine.fire().published == 1
    [message] = queued_messages(redis_client)
    in_flight = _redis_text(redis_client)  # the broker message, waiting for a worker
    assert str(message_args(message)[1]).encode() in in_flight  # the scan sees the message
    _, run_id, attempt = message_args(message)
    assert execute(alpha.tenant, run_id, attempt, now_clock()) == states.SUCCEEDED

    [request] = receiver.requests
    assert request.headers["Authorization"] == secret  # on the wire, as given
    responses = [
        api.get(f"jobs/{created['id']}"),
        api.get("jobs"),
        api.get(f"runs/{run_id}"),
        api.get("runs"),
        triggered,
    ]
    assert all(r.status_code in (200, 202) for r in responses)
    assert api.get(f"jobs/{created['id']}").json()["target"]["headers"] == shown
    [run] = api.get(f"runs/{run_id}").json()["attempts"]
    assert "[redacted]" in run["output"]  # the echo came back, and was redacted
    texts = {
        "api responses": b"".join(r.content for r in responses).decode(),
        "redis while queued": in_flight.decode(errors="replace"),
        "redis after": _redis_text(redis_client).decode(errors="replace"),
        "log lines": caplog.text + "".join(r.getMessage() for r in caplog.records),
    }
    for form in _forms(secret):
        assert [where for where, text in texts.items() if form in text] == []
    assert _database_rows_containing(_forms(secret), [alpha.schema, "public"]) == []
    assert any("HTTP Request" in r.getMessage() for r in caplog.records)  # logs were read
    # The receiver also echoed it in a response header, which httpcore logs at DEBUG.
    assert "X-Echo-Authorization', b'[redacted]'" in caplog.text


@ALLOW_LOCAL
def test_a_failing_delivery_records_its_error_and_excerpt_redacted(live, redis_client, receiver):
    alpha = live["alpha"].tenant
    clock = now_clock()
    secret = "Bearer tw-" + secrets.token_hex(12)
    receiver.status, receiver.echo = 500, True
    job = http_job(
        alpha,
        clock,
        receiver.url("/echo"),
        headers={"Authorization": {"value": secret, "secret": True}},
        retry={"max_attempts": 1},
    )
    run = trigger(alpha, clock, job)
    assert execute(alpha, run.id, 1, clock) == states.DEAD
    with schema_context(alpha.schema_name):
        stored = Run.objects.get(pk=run.id)
        [attempt] = stored.attempts.all()
    assert stored.error == "HTTP 500"
    assert secret not in attempt.output and "[redacted]" in attempt.output


# --- key rotation ---------------------------------------------------------------------------

OLD_KEY, NEW_KEY = Fernet.generate_key().decode(), Fernet.generate_key().decode()


@pytest.fixture
def keys(live):
    """The suite's own keys, with this test's: whatever it leaves sealed under OLD_KEY or
    NEW_KEY is sealed back under the suite's key afterwards (the tenants outlive the test)."""
    suite = list(settings.TICKWORK_SECRET_KEYS)
    yield suite
    SIGNING_KEYS.clear()
    with override_settings(TICKWORK_SECRET_KEYS=[*suite, NEW_KEY, OLD_KEY]):
        call_command("rotate_secrets", stdout=_Out())


def _sealed_values(tenant: Tenant) -> list[str]:
    with schema_context(tenant.schema_name):
        targets = list(Job.objects.values_list("target", flat=True))
    tokens = [
        v["sealed"]
        for t in targets
        for v in (t.get("headers") or {}).values()
        if isinstance(v, dict)
    ]
    row = Tenant.objects.get(pk=tenant.pk)
    return tokens + [t for t in (row.signing_secret, row.signing_secret_previous) if t]


@ALLOW_LOCAL
def test_after_rotate_secrets_the_old_key_can_go_and_deliveries_still_carry_the_value(
    live, redis_client, receiver, keys
):
    alpha = live["alpha"].tenant
    clock = now_clock()
    secret = "Bearer tw-" + secrets.token_hex(12)
    with override_settings(TICKWORK_SECRET_KEYS=[OLD_KEY]):
        old_signing = new_secret(alpha, clock)
        signing = new_secret(alpha, clock, overlap=3600)  # the previous one is sealed too
        job = http_job(
            alpha,
            clock,
            receiver.url("/hook"),
            headers={"Authorization": {"value": secret, "secret": True}, "X-Team": "blue"},
        )
    assert not any(Keyring([NEW_KEY, OLD_KEY]).is_current(t) for t in _sealed_values(alpha))
    with override_settings(TICKWORK_SECRET_KEYS=[NEW_KEY, OLD_KEY, *keys]):
        call_command("rotate_secrets", batch_size=1, stdout=(first := _Out()))
        call_command("rotate_secrets", stdout=(second := _Out()))
    assert "signing secrets: " in first.text and "t_alpha: 1 secret header values" in first.text
    assert "done: 0 values re-encrypted" in second.text  # idempotent
    only_new = Keyring([NEW_KEY])
    assert all(only_new.is_current(t) for t in _sealed_values(alpha))
    SIGNING_KEYS.clear()  # a worker started after the old key was removed
    with override_settings(TICKWORK_SECRET_KEYS=[NEW_KEY]):
        deliver(alpha, clock, job)
    [request] = receiver.requests
    assert request.headers["Authorization"] == secret and request.headers["X-Team"] == "blue"
    for key in (signing, old_signing):
        Webhook(key).verify(request.body, lower(request.headers))


class _Out:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


@pytest.mark.slow
def test_rotate_secrets_without_the_key_a_value_needs_exits_non_zero_with_one_line(live, keys):
    alpha = live["alpha"].tenant
    clock = now_clock()
    with override_settings(TICKWORK_SECRET_KEYS=[OLD_KEY]):
        http_job(
            alpha,
            clock,
            "https://example.com/hook",
            headers={"Authorization": {"value": "Bearer x", "secret": True}},
        )
        new_secret(alpha, clock)
    env = process_env(TICKWORK_SECRET_KEYS=NEW_KEY)
    result = subprocess.run(
        [sys.executable, "manage.py", "rotate_secrets"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert "is not in TICKWORK_SECRET_KEYS" in line or "no key in TICKWORK_SECRET_KEYS" in line


@ALLOW_LOCAL
def test_the_schedulers_headers_replace_a_job_header_of_the_same_name_in_any_case(
    live, redis_client, receiver
):
    alpha = live["alpha"].tenant
    clock = now_clock()
    headers = {"idempotency-key": "mine", "X-SCHEDULER-ATTEMPT": "9", "X-Team": "blue"}
    run = deliver(alpha, clock, http_job(alpha, clock, receiver.url("/hook"), headers=headers))
    [request] = receiver.requests
    sent = [(k.lower(), v) for k, v in request.headers.items()]
    assert [v for k, v in sent if k == "idempotency-key"] == [str(run.id)]
    assert [v for k, v in sent if k == "x-scheduler-attempt"] == ["1"]
    assert ("x-team", "blue") in sent
