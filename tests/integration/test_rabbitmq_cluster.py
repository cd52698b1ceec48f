"""A RabbitMQ cluster as the broker (ADR 0026), against three real nodes of this machine's
rabbitmq-server joined into one cluster (`tests/rabbitmq_cluster.py`): the leader's
publisher and the depth reads go through `CELERY_BROKER_URL`'s node list when its first
node is down, the run queues are quorum queues that keep their messages when the node
they were declared on is killed, and a malformed list is refused at start-up."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid

import amqp
import pytest

from beat.amqp_writes import AmqpWrites
from beat.messages import build_message
from core.broker import AmqpDepths, amqp_connection, queue_depths
from tests.settings_process import CHECK, SHELL, run_django


def _message(run_id: str, queue: str) -> bytes:
    return build_message(
        task_name="runs.execute_run",
        task_id=run_id,
        args=["t_alpha", run_id, 1],
        queue=queue,
        origin="test",
        time_limits=(40, 12),
    )


def _publish(
    redis_client, url: str, run_ids: list[str], queue: str = "runs.normal.1"
) -> str | None:
    """Publish through the leader's own writer (fenced, confirmed); the node it used."""
    redis_client.set("lock:test-leader", "my-token")
    writes = AmqpWrites(redis_client, "lock:test-leader", "my-token", url=url)
    try:
        writes.push_messages([(queue, _message(r, queue)) for r in run_ids])
        return getattr(writes._conn, "tickwork_node", None)  # None: a connection of before ADR 0026
    finally:
        writes.close()


def _drain_ids(url: str, queue: str, deadline: float) -> list[str]:
    """Every message of `queue`, read through `url`. A quorum queue whose leader was on a
    killed node answers `nodedown` until its survivors elect another (well under a second
    here): polled, within the deadline, on a new connection each time."""
    while True:
        conn = amqp_connection(url, timeout=5)
        try:
            channel = conn.channel()
            out = []
            while (message := channel.basic_get(queue, no_ack=True)) is not None:
                out.append(message.headers["id"])
            return out
        except amqp.exceptions.InternalError:
            if time.monotonic() > deadline:
                raise
        finally:
            conn.collect()
        time.sleep(0.1)


def test_the_leader_publishes_and_reads_depths_through_the_list_when_its_first_node_is_down(
    amqp_cluster_broker, rabbitmq_cluster, redis_client
):
    rabbitmq_cluster.kill(0)  # the URL list's first node
    run_ids = [str(uuid.uuid4()) for _ in range(5)]
    node = _publish(redis_client, amqp_cluster_broker, run_ids)
    assert node != f"127.0.0.1:{rabbitmq_cluster.amqp_ports[0]}"
    # the admission watermark's and /metrics' read, on the configured list
    assert queue_depths(redis_client)["runs.1"] == 5
    # a worker on another node sees them all
    third = rabbitmq_cluster.node_url(2)
    assert sorted(_drain_ids(third, "runs.1", time.monotonic() + 10)) == sorted(run_ids)


def test_a_silent_node_costs_one_bounded_wait_then_none(rabbitmq_cluster):
    """A node that takes the TCP connection and never answers (a frozen host) is first in
    the list: the first connect waits its share of the timeout there and goes on to the
    next node; the next connect starts from the node that answered, with no wait."""
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog), never answers
    try:
        url = (
            f"amqp://guest:guest@127.0.0.1:{silent.getsockname()[1]}//;"
            + rabbitmq_cluster.node_url(1)
        )
        started = time.monotonic()
        first = amqp_connection(url, timeout=4)
        first_took = time.monotonic() - started
        first.collect()
        started = time.monotonic()
        again = amqp_connection(url, timeout=4)
        again_took = time.monotonic() - started
        again.collect()
    finally:
        silent.close()
    assert (
        first.tickwork_node == again.tickwork_node == f"127.0.0.1:{rabbitmq_cluster.amqp_ports[1]}"
    )
    assert 1.5 <= first_took < 4  # its share (4 s over two nodes), not the whole timeout
    assert again_took < 1.5  # straight to the node that answered


def test_every_node_down_is_one_bounded_error_naming_each():
    """Nothing listens on these ports: each attempt fails at once, and the error says why
    for every node (the health check shows it)."""
    from core.broker import AmqpUnreachable

    url = ";".join(f"amqp://guest:guest@127.0.0.1:{port}//" for port in (1, 2))
    started = time.monotonic()
    with pytest.raises(AmqpUnreachable) as raised:
        amqp_connection(url, timeout=1)
    assert time.monotonic() - started < 2 * 1 + 1
    assert "127.0.0.1:1:" in str(raised.value) and "127.0.0.1:2:" in str(raised.value)


def test_a_quorum_run_queue_keeps_its_messages_when_the_node_it_was_declared_on_dies(
    amqp_cluster_broker, rabbitmq_cluster, redis_client
):
    first = rabbitmq_cluster.node_url(0)
    run_ids = [str(uuid.uuid4()) for _ in range(20)]
    # declared and published through node 1 alone: the queues' leaders are there
    _publish(redis_client, first, run_ids)
    listing = rabbitmq_cluster.ctl(1, "list_queues", "name", "type", "leader")
    assert f"runs.1\tquorum\t{rabbitmq_cluster.names[0]}" in listing, listing
    rabbitmq_cluster.kill(0)
    # read through a surviving node's own URL: what is under test is the queue, not the
    # list (the test above covers that); all are there once a new leader is elected
    second = rabbitmq_cluster.node_url(1)
    depths = AmqpDepths(second, ttl=0)
    try:
        deadline = time.monotonic() + 10
        while (count := depths.depths(["runs.1"])["runs.1"]) != 20:
            assert time.monotonic() < deadline, f"runs.1 holds {count} of 20"
            time.sleep(0.1)  # the new leader's count, polled within the deadline
    finally:
        depths.close()
    got = _drain_ids(second, "runs.1", time.monotonic() + 10)
    assert sorted(got) == sorted(run_ids)


def _django_setup(broker_url: str, queue_type: str = "quorum") -> subprocess.CompletedProcess:
    env = {"DEBUG": "1", "CELERY_BROKER_URL": broker_url, "SCHEDULER_AMQP_QUEUE_TYPE": queue_type}
    return run_django(env, CHECK)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (
            "amqp://guest:guest@h1:5672//;amqp://guest:secret@h2:56x2//",
            "CELERY_BROKER_URL: element 2 of 2 has a port that is not a number",
        ),
        (  # a raw ';' in a password splits the element: no part of it is printed
            "amqp://guest:guest@h1:5672//;amqp://guest:sec;ret@h2:5672//",
            "CELERY_BROKER_URL: element 2 of 3 has a port that is not a number",
        ),
        (
            "amqp://guest:guest@h1:5672//;redis://h2:6379/0",
            "CELERY_BROKER_URL: element 2 of 2, 'redis://h2:6379/0', is not a RabbitMQ URL",
        ),
        ("amqp://guest:guest@h1:5672//;", "CELERY_BROKER_URL: element 2 of 2 is empty"),
        ("amqp://guest:guest@h1:5672//;h2", "CELERY_BROKER_URL: element 2 of 2, 'h2', is not"),
        (
            "amqp://guest:guest@h1:5672/a;amqp://guest:guest@h2:5672/b",
            "CELERY_BROKER_URL: the URLs name different vhosts ['a', 'b']",
        ),
    ],
)
def test_the_settings_refuse_a_malformed_url_list_in_one_line(url: str, says: str):
    result = _django_setup(url)
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"configuration error: {says}"), line
    assert "secret" not in line and "sec" not in line  # a password is never printed


def test_the_settings_accept_a_url_list_and_hand_it_to_the_workers_without_spaces():
    listed = "amqp://guest:guest@h1:5672//; amqp://guest:guest@[::1]:5673// "
    good = _django_setup(listed)
    assert good.returncode == 0, good.stderr
    printed = run_django(
        {"DEBUG": "1", "CELERY_BROKER_URL": listed, "SCHEDULER_AMQP_QUEUE_TYPE": "quorum"},
        [*SHELL, "from django.conf import settings; print(settings.CELERY_BROKER_URL)"],
    )
    # kombu takes each element as it is: " amqp://…" would be a URL without a host
    assert printed.stdout.strip().splitlines()[-1] == (
        "amqp://guest:guest@h1:5672//;amqp://guest:guest@[::1]:5673//"
    ), printed.stderr


def test_a_url_list_with_classic_queues_is_refused():
    refused = _django_setup("amqp://guest:guest@h1:5672//;amqp://guest:guest@h2:5672//", "classic")
    assert refused.returncode == 1
    assert "set SCHEDULER_AMQP_QUEUE_TYPE=quorum" in refused.stderr
