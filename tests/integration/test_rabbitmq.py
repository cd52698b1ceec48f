"""RabbitMQ as the broker (ADR 0019), against a real RabbitMQ in the tests' own vhost: the
leader's publish (the same pre-built messages, fenced, confirmed), the priority queues,
and the depths the admission watermark and `/metrics` read."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from beat.admission_control import AdmissionConfig, AdmissionControl
from beat.amqp_writes import AmqpWrites, BrokerError, leader_writes
from beat.engine import EngineConfig
from beat.faults import TenantFaults
from beat.fenced import FencedRedis
from beat.lease import LeaseLost, bump_epoch
from beat.loop import SchedulerProcess
from beat.messages import build_message
from core.broker import amqp_connection, amqp_destination, queue_depths
from core.clock import FakeClock
from runs import states

from .helpers import StallingProxy, make_job, new_engine, runs_of, utc
from .test_engine import START

pytestmark = pytest.mark.usefixtures("amqp_broker")


def _message(run_id: str, queue: str, schema: str = "t_alpha") -> bytes:
    return build_message(
        task_name="runs.execute_run",
        task_id=run_id,
        args=[schema, run_id, 1],
        queue=queue,
        origin="test",
        time_limits=(40, 12),
    )


def _drain(url: str, queue: str) -> list:
    conn = amqp_connection(url, timeout=5)
    try:
        channel = conn.channel()
        out = []
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            out.append(message)
        return out
    finally:
        conn.collect()


def _lease(redis_client, token: str = "my-token") -> AmqpWrites:
    redis_client.set("lock:test-leader", token)
    return AmqpWrites(redis_client, "lock:test-leader", token)


def test_the_leader_publishes_celery_protocol_2_messages_with_the_run_s_priority(
    amqp_broker, redis_client
):
    writes = _lease(redis_client)
    low = [str(uuid.uuid4()) for _ in range(3)]
    high = [str(uuid.uuid4()) for _ in range(3)]
    # low first, then high, to the same shard: RabbitMQ hands out the high ones first
    writes.push_messages(
        [("runs.low.1", _message(r, "runs.low.1")) for r in low]
        + [("runs.high.1", _message(r, "runs.high.1")) for r in high]
    )
    assert queue_depths(redis_client)["runs.1"] == 6
    got = _drain(amqp_broker, "runs.1")
    assert [m.headers["id"] for m in got] == high + low
    first = got[0]
    assert first.properties["priority"] == 2 and got[-1].properties["priority"] == 0
    assert first.properties["delivery_mode"] == 2  # persistent, in a durable queue
    assert first.properties["content_type"] == "application/json"
    assert first.properties["correlation_id"] == high[0]
    assert first.headers["task"] == "runs.execute_run"
    assert first.headers["timelimit"] == [40, 12]
    args, kwargs, embed = json.loads(first.body)
    assert args == ["t_alpha", high[0], 1] and kwargs == {} and embed["chain"] is None


def test_the_envelope_and_the_published_body_are_the_same_bytes(amqp_broker, redis_client):
    run_id = str(uuid.uuid4())
    envelope = _message(run_id, "runs.normal.3")
    _lease(redis_client).push_messages([("runs.normal.3", envelope)])
    [got] = _drain(amqp_broker, "runs.3")
    assert got.body.encode() == base64.b64decode(json.loads(envelope)["body"])
    assert got.properties["priority"] == 1
    assert amqp_destination("runs.normal.3") == ("runs.3", 1)


def test_a_deposed_leader_s_publish_is_refused_before_any_message_leaves(amqp_broker, redis_client):
    writes = _lease(redis_client)
    redis_client.set("lock:test-leader", "the-new-leader")
    with pytest.raises(LeaseLost):
        writes.push_messages([("runs.high.0", _message(str(uuid.uuid4()), "runs.high.0"))])
    redis_client.delete("lock:test-leader")  # the lease expired and nobody holds it
    with pytest.raises(LeaseLost):
        writes.push_messages([("runs.high.0", _message(str(uuid.uuid4()), "runs.high.0"))])
    assert queue_depths(redis_client)["runs.0"] == 0


def test_the_lease_is_checked_before_each_chunk(amqp_broker, redis_client, monkeypatch):
    """Deposed in the middle of a large publish: the chunks after it are refused."""
    import beat.amqp_writes

    monkeypatch.setattr(beat.amqp_writes, "CHUNK", 2)
    writes = _lease(redis_client)
    real = writes._publish

    def publish_then_lose(chunk):
        real(chunk)
        redis_client.set("lock:test-leader", "the-new-leader")

    writes._publish = publish_then_lose
    with pytest.raises(LeaseLost):
        writes.push_messages(
            [("runs.low.2", _message(str(uuid.uuid4()), "runs.low.2")) for _ in range(6)]
        )
    assert queue_depths(redis_client)["runs.2"] == 2


def test_a_deposed_engine_neither_publishes_nor_commits(live, amqp_broker, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    old = new_engine(redis_client, clock)
    writes = leader_writes(redis_client, old.writes.lock_key, old.writes.token)
    assert isinstance(writes, AmqpWrites)
    old.writes = writes
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    old.materialise()
    redis_client.set(old.writes.lock_key, "another-leader")  # deposed in Redis...
    bump_epoch("another-leader")  # ...and in PostgreSQL
    clock.set(utc(2026, 6, 1, 12, 1))
    with pytest.raises(Exception):  # noqa: B017 - the fence (FencingError) or the lease
        old.fire()
    assert sum(queue_depths(redis_client).values()) == 0
    assert [r.status for r in runs_of(alpha)] == [states.SCHEDULED]


def test_an_engine_fires_to_rabbitmq(live, amqp_broker, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"}, priority="high")
    engine = new_engine(redis_client, clock)
    engine.writes = leader_writes(redis_client, engine.writes.lock_key, engine.writes.token)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    engine.materialise()
    clock.set(utc(2026, 6, 1, 12, 1))
    assert engine.fire().published == 1
    [run] = runs_of(alpha)
    assert run.status == states.QUEUED
    [got] = [m for q in ("runs.0", "runs.1", "runs.2", "runs.3") for m in _drain(amqp_broker, q)]
    assert got.headers["id"] == str(run.id) and got.properties["priority"] == 2
    assert redis_client.keys("runs.*") == []  # nothing went onto Redis lists


def test_leader_writes_follow_the_broker_setting(settings, redis_client):
    assert isinstance(leader_writes(redis_client, "lock:x", "t"), AmqpWrites)
    settings.CELERY_BROKER_URL = settings.REDIS_URL
    writes = leader_writes(redis_client, "lock:x", "t")
    assert type(writes) is FencedRedis


def test_the_admission_watermark_counts_rabbitmq_messages(amqp_broker, redis_client):
    config = AdmissionConfig(enabled=True, backlog_per_slot=2.0, backlog_min=20)
    control = AdmissionControl(
        client=redis_client, config=config, shard_count=4, faults=TenantFaults()
    )
    assert control.queue_names == ["runs.0", "runs.1", "runs.2", "runs.3"]
    assert control._room(0.0) == 20
    _lease(redis_client).push_messages(
        [(q, _message(str(uuid.uuid4()), q)) for q in ["runs.high.0"] * 5 + ["runs.low.3"] * 3]
    )
    control._room(0.0)  # an answer is reused for an instant, then read again
    import core.broker

    core.broker._amqp_depths._cached = None
    assert control._room(0.0) == 12


def test_metrics_report_rabbitmq_queue_depths(live, amqp_broker, redis_client):
    from scheduler_site.metrics.facts import broker_facts, redis_facts

    _lease(redis_client).push_messages(
        [(q, _message(str(uuid.uuid4()), q)) for q in ["runs.normal.2"] * 4]
    )
    assert [m for m in redis_facts({}) if m.name == "tickwork_queue_depth"] == []
    [depth] = broker_facts()  # a source of its own: RabbitMQ away costs only the depths
    values = {s.labels["queue"]: s.value for s in depth.samples}
    assert values == {"runs.0": 0, "runs.1": 0, "runs.2": 4, "runs.3": 0}


def test_a_queued_run_rabbitmq_lost_is_published_again_by_the_reaper(
    live, amqp_broker, redis_client
):
    """The reaper's republish path goes through the same writes: to RabbitMQ."""
    from .test_execution import _age, _trigger

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    run = _trigger(alpha, clock, make_job(alpha, clock, schedule=None))
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=60)
    engine.writes = leader_writes(redis_client, engine.writes.lock_key, engine.writes.token)
    engine.load_run_index()
    assert engine.fire().published == 1
    _drain(amqp_broker, "runs.0"), _drain(amqp_broker, "runs.1")  # the broker lost it
    _drain(amqp_broker, "runs.2"), _drain(amqp_broker, "runs.3")
    _age(alpha, run.id, "queued_at", 61)
    assert engine.reap(force=True) == 1
    got = [m for q in ("runs.0", "runs.1", "runs.2", "runs.3") for m in _drain(amqp_broker, q)]
    assert [m.headers["id"] for m in got] == [str(run.id)]


def test_a_queue_deleted_under_the_leader_is_declared_again_not_dropped_into(
    amqp_broker, redis_client
):
    """Publishes are mandatory: a message no queue takes comes back and fails the try,
    and the try on a new connection declares the queues again."""
    from tests.rabbitmq import reset_queues

    writes = _lease(redis_client)
    writes.push_messages([("runs.low.0", _message(str(uuid.uuid4()), "runs.low.0"))])
    reset_queues(amqp_broker)  # an operator deleted the queues
    with pytest.raises(BrokerError, match=r"runs\.0"):  # one try, on the old connection
        writes._publish([("runs.low.0", _message(str(uuid.uuid4()), "runs.low.0"))])
        writes._await_confirms(1)
    writes._open()
    reset_queues(amqp_broker)
    run_id = str(uuid.uuid4())
    writes.push_messages([("runs.low.0", _message(run_id, "runs.low.0"))])
    assert [m.headers["id"] for m in _drain(amqp_broker, "runs.0")] == [run_id]


def test_a_connection_lost_while_idle_costs_the_publish_nothing(amqp_broker, redis_client):
    writes = _lease(redis_client)
    _publish(writes, str(uuid.uuid4()))
    writes._conn.transport.close()  # dropped by the broker or a load balancer meanwhile
    run_id = str(uuid.uuid4())
    _publish(writes, run_id)
    assert [m.headers["id"] for m in _drain(amqp_broker, "runs.1")][-1] == run_id


def _proxied(url: str) -> tuple[StallingProxy, str]:
    """A proxy to the broker of `url`, and `url` through it."""
    parts = urlsplit(url)
    default_port = 5671 if parts.scheme == "amqps" else 5672
    proxy = StallingProxy(parts.hostname or "127.0.0.1", parts.port or default_port)
    login = parts.netloc.rpartition("@")[0]
    address = f"127.0.0.1:{proxy.port}"
    return proxy, urlunsplit(parts._replace(netloc=f"{login}@{address}" if login else address))


@contextlib.contextmanager
def _connected_through_a_proxy(amqp_broker: str, redis_client):
    """Fenced writes whose connection goes through a proxy, one message already published
    on it; yields the proxy, the writes and that message's run id."""
    proxy, url = _proxied(amqp_broker)
    try:
        writes = _lease(redis_client)
        writes.url = url
        first = str(uuid.uuid4())
        _publish(writes, first)
        yield proxy, writes, first
    finally:
        proxy.close()


def _publish(writes: AmqpWrites, run_id: str) -> None:
    writes.push_messages([("runs.high.1", _message(run_id, "runs.high.1"))])


@pytest.mark.parametrize("heartbeat", [1, 0])
def test_a_connection_dropped_without_a_word_is_found_dead_between_fires(
    amqp_broker, redis_client, settings, heartbeat
):
    """An idle connection goes silent while something still holds its TCP connection (a
    proxy forwarding nothing): with heartbeats, the leader's keepalive finds it dead
    within two intervals and closes it,
    so the next fire publishes on a new connection instead of first waiting out its
    confirms on the dead one; without them the dead connection is kept."""
    settings.SCHEDULER_AMQP_HEARTBEAT_SECONDS = heartbeat
    with _connected_through_a_proxy(amqp_broker, redis_client) as (proxy, writes, first):
        second = str(uuid.uuid4())
        dead = writes._conn
        assert dead.heartbeat == heartbeat
        proxy.stall_open()  # that connection goes silent; new ones go through
        ticks = 0
        while writes._conn is dead and ticks < 40:  # 4 s: four heartbeat intervals
            writes.keepalive()
            ticks += 1
            time.sleep(0.1)  # the leader's iterations come at least every max_sleep
        if heartbeat:
            assert writes._conn is None, "the dead connection was kept"
            assert ticks >= 10  # not before an interval without a frame had passed
        else:
            assert writes._conn is dead  # nothing notices it until a publish times out
            writes.close()  # (that would take SCHEDULER_AMQP_TIMEOUT_SECONDS)
        _publish(writes, second)
        assert writes._conn is not dead
        assert [m.headers["id"] for m in _drain(amqp_broker, "runs.1")] == [first, second]


def test_keepalive_leaves_a_connection_a_push_is_using_alone(amqp_broker, redis_client, settings):
    """The fire's pusher thread waits for confirms while the loop's thread calls the
    keepalive, due each time: py-amqp is not thread-safe, so the keepalive must neither
    read nor tick that connection (its reads would race the push's for the confirms).
    Every read and tick of the connection is recorded with its thread while a proxy holds
    the confirms; then they are let through and the push ends on its own connection."""
    settings.SCHEDULER_AMQP_HEARTBEAT_SECONDS = 5
    with _connected_through_a_proxy(amqp_broker, redis_client) as (proxy, writes, first):
        second = str(uuid.uuid4())
        alive = writes._conn
        used_by: list[str] = []
        for name in ("drain_events", "heartbeat_tick", "send_heartbeat"):
            original = getattr(alive, name)

            def recorded(*args, _original=original, **kwargs):
                used_by.append(threading.current_thread().name)
                return _original(*args, **kwargs)

            setattr(alive, name, recorded)
        proxy.stall_open()
        errors: list = []

        def push() -> None:
            try:
                _publish(writes, second)
            except Exception as exc:  # asserted below
                errors.append(exc)

        pusher = threading.Thread(target=push, name="pusher")
        pusher.start()
        deadline = time.monotonic() + 5
        while "pusher" not in used_by:  # waiting for its confirms
            assert time.monotonic() < deadline, "the push never waited for its confirms"
            time.sleep(0.01)
        for _ in range(5):
            writes._kept_alive = 0.0  # due, as after a second without a keepalive
            writes.keepalive()
        proxy.flow()
        pusher.join(10)
        assert errors == []
        assert set(used_by) == {"pusher"}, "the keepalive used the connection during the push"
        assert writes._conn is alive
        assert [m.headers["id"] for m in _drain(amqp_broker, "runs.1")] == [first, second]


def test_keepalive_waits_a_bounded_time_for_a_frame_that_has_partly_arrived(
    amqp_broker, redis_client, settings
):
    """The broker's heartbeat frame arrives in two parts, the second held by a proxy: the
    keepalive, which reads only what has arrived, waits a bounded time for the rest and
    returns (a wait without a bound would hold the leader's loop for as long as the rest
    takes). When the rest arrives, the frame is read whole and the connection still
    publishes."""
    settings.SCHEDULER_AMQP_HEARTBEAT_SECONDS = 1
    with _connected_through_a_proxy(amqp_broker, redis_client) as (proxy, writes, first):
        second = str(uuid.uuid4())
        alive = writes._conn
        split = proxy.split_next_reply(keep=3)  # of the next heartbeat's 8 bytes
        assert split.wait(5), "no heartbeat came from the broker"
        writes._kept_alive = 0.0
        keepalive = threading.Thread(target=writes.keepalive)
        keepalive.start()
        keepalive.join(2)
        assert not keepalive.is_alive(), "the keepalive waited for the rest of the frame"
        proxy.flow()
        writes._kept_alive = 0.0
        writes.keepalive()
        assert writes._conn is alive
        _publish(writes, second)
        assert writes._conn is alive
        assert [m.headers["id"] for m in _drain(amqp_broker, "runs.1")] == [first, second]


def test_keepalive_keeps_a_healthy_idle_connection(amqp_broker, redis_client, settings):
    """Over three heartbeat intervals with nothing published, the broker's heartbeats are
    read and ours sent: the connection is neither closed here nor by the broker."""
    settings.SCHEDULER_AMQP_HEARTBEAT_SECONDS = 1
    writes = _lease(redis_client)
    _publish(writes, str(uuid.uuid4()))
    alive = writes._conn
    for _ in range(30):
        writes.keepalive()
        time.sleep(0.1)
    assert writes._conn is alive
    run_id = str(uuid.uuid4())
    _publish(writes, run_id)
    assert writes._conn is alive  # published on it: the broker had not closed it either
    assert [m.headers["id"] for m in _drain(amqp_broker, "runs.1")][-1] == run_id


def test_a_leader_replaces_a_silently_dropped_connection_between_fires(
    live, amqp_broker, redis_client, settings, caplog
):
    """A real scheduler process on RabbitMQ: the connection of its first fire goes silent
    (held by a proxy); its own iterations find it dead before the next fire, which then
    publishes on a new connection; every slot once."""
    settings.SCHEDULER_AMQP_HEARTBEAT_SECONDS = 1
    proxy, settings.CELERY_BROKER_URL = _proxied(amqp_broker)
    try:
        alpha = live["alpha"].tenant
        clock = FakeClock(START)
        make_job(alpha, clock, schedule={"cron": "* * * * *"})
        # Admission off: its depth reads would go through the stalled proxy too.
        config = EngineConfig(admission=AdmissionConfig(enabled=False))
        process = SchedulerProcess(client=redis_client, clock=clock, config=config, holder="a:1")
        stop = threading.Event()
        stop.set()  # its waits return at once
        clock.set(utc(2026, 6, 1, 12, 0, 45))
        process.run_once(stop)  # takes the lease, materialises the 12:01 slot
        clock.set(utc(2026, 6, 1, 12, 1))
        process.run_once(stop)  # fires it
        writes = process.engine.writes
        dead = writes._conn
        assert dead is not None
        proxy.stall_open()
        deadline = time.monotonic() + 8
        while writes._conn is dead:  # the leader's iterations, nothing due meanwhile
            assert time.monotonic() < deadline, "the silent connection was never noticed"
            process.run_once(stop)
            time.sleep(0.1)
        assert "leader.amqp_connection_lost" in [getattr(r, "event", "") for r in caplog.records]
        clock.set(utc(2026, 6, 1, 12, 2, 0, 500_000))
        process.run_once(stop)  # the 12:02 slot, on a new connection
        assert writes._conn is not None and writes._conn is not dead
        published = [
            m.headers["id"]
            for q in ("runs.0", "runs.1", "runs.2", "runs.3")
            for m in _drain(amqp_broker, q)
        ]
        runs = runs_of(alpha, scheduled_for__lte=clock.now())  # 12:03 may be prepared
        assert sorted(published) == sorted(str(r.id) for r in runs) and len(runs) == 2
        assert {r.status for r in runs} == {states.QUEUED}
        process.step_down("the test is over")
        assert writes._conn is None  # closed with the engine, not left to the collector
    finally:
        proxy.close()
