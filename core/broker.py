"""Where run messages wait: Redis lists (the default) or RabbitMQ queues (`amqp://`).

On Redis a run queue is `runs.<priority>.<shard>` and the worker polls the lists high
before normal before low (`scheduler_site/queue_order.py`). RabbitMQ pushes messages to
its consumers from every queue they consume in turn, so separate queues per priority
would give no priority at all there; on RabbitMQ each shard is one durable classic
priority queue `runs.<shard>` (`x-max-priority` 2) and a run's priority is its message's
(high 2, normal 1, low 0): RabbitMQ hands out the highest first (ADR 0019). The leader
still names the Redis queue in each message it builds; `amqp_destination` maps it.

Both report their depths here, for the admission watermark (`beat/admission_control.py`),
`/metrics` and the operator console: `LLEN` on Redis, a passive `queue.declare` on
RabbitMQ (bounded by timeouts, cached for a moment so one leader iteration asks once).

A RabbitMQ cluster (ADR 0026): `CELERY_BROKER_URL` may list its nodes, `;`-separated as
kombu takes them (`core/amqp_urls.py`), and `amqp_connection` tries them in turn; with
`SCHEDULER_AMQP_QUEUE_TYPE=quorum` the run queues are quorum queues, replicated on the
nodes and served while a majority of them is up (without priorities: RabbitMQ 3.x refuses
`x-max-priority` on a quorum queue).
"""

from __future__ import annotations

import contextlib
import threading
import time

from django.conf import settings

from core.amqp_urls import amqp_nodes, is_amqp_url

PRIORITIES = ("high", "normal", "low")
AMQP_PRIORITY = {"high": 2, "normal": 1, "low": 0}
AMQP_MAX_PRIORITY = 2
AMQP_QUEUE_ARGUMENTS = {"x-max-priority": AMQP_MAX_PRIORITY}  # classic priority queues
AMQP_QUORUM_QUEUE_ARGUMENTS = {"x-queue-type": "quorum"}


def amqp_queue_arguments() -> dict:
    """The run queues' declaration arguments for `SCHEDULER_AMQP_QUEUE_TYPE`; the leader
    and the workers must declare them alike (RabbitMQ refuses a second declaration with
    other arguments, `PRECONDITION_FAILED`)."""
    if getattr(settings, "SCHEDULER_AMQP_QUEUE_TYPE", "classic") == "quorum":
        return dict(AMQP_QUORUM_QUEUE_ARGUMENTS)
    return dict(AMQP_QUEUE_ARGUMENTS)


def is_amqp(url: str | None = None) -> bool:
    url = settings.CELERY_BROKER_URL if url is None else url
    return is_amqp_url(url)


def redis_queue_names(shard_count: int) -> list[str]:
    return [f"runs.{priority}.{shard}" for priority in PRIORITIES for shard in range(shard_count)]


def amqp_queue_names(shard_count: int) -> list[str]:
    return [f"runs.{shard}" for shard in range(shard_count)]


def broker_queue_names(shard_count: int | None = None) -> list[str]:
    """The run queues of the configured broker, in the order a depth report lists them."""
    count = settings.SCHEDULER_SHARD_COUNT if shard_count is None else shard_count
    return amqp_queue_names(count) if is_amqp() else redis_queue_names(count)


def amqp_destination(queue: str) -> tuple[str, int]:
    """`runs.high.2` -> (`runs.2`, 2): the RabbitMQ queue and message priority of a run
    the leader addressed to a Redis run queue. Any other name is used as it is."""
    parts = queue.split(".")
    if len(parts) == 3 and parts[0] == "runs" and parts[1] in AMQP_PRIORITY:
        return f"runs.{parts[2]}", AMQP_PRIORITY[parts[1]]
    return queue, 0


class AmqpUnreachable(ConnectionError):
    """No node of the broker URL (list) took a connection; says why for each."""


# The node of each URL list that last took a connection: the next connect starts there, so
# a dead node costs one attempt per failure, not one per reconnect.
_last_good: dict[str, int] = {}


def amqp_connection(url: str | None = None, *, timeout: float | None = None, **options):
    """An open py-amqp connection whose connect, reads and writes are all bounded.

    `url` may list a cluster's nodes (`;`-separated): they are tried in turn from the one
    that answered last. With several nodes each attempt gets an equal share of `timeout`
    (at least a second), so a list of nodes that stop answering costs about what one node
    would, not one `timeout` each; the connection keeps that shorter bound on its reads
    and writes too. `AmqpUnreachable` names each node's error."""
    import amqp

    url = settings.CELERY_BROKER_URL if url is None else url
    timeout = settings.SCHEDULER_AMQP_TIMEOUT_SECONDS if timeout is None else timeout
    nodes = amqp_nodes(url)
    if len(nodes) > 1:
        timeout = max(timeout / len(nodes), min(timeout, 1.0))
    start = _last_good.get(url, 0) % len(nodes)
    failures = []
    for step in range(len(nodes)):
        index = (start + step) % len(nodes)
        node = nodes[index]
        conn = amqp.Connection(
            host=node.address,
            userid=node.userid,
            password=node.password,
            virtual_host=node.vhost,
            ssl=node.ssl,
            connect_timeout=timeout,
            read_timeout=timeout,
            write_timeout=timeout,
            **options,
        )
        try:
            conn.connect()
        except Exception as exc:
            with contextlib.suppress(Exception):
                conn.collect()
            if len(nodes) == 1:
                raise  # one node: its own error, as before the list
            failures.append(f"{node.address}: {exc.__class__.__name__}: {str(exc).strip()[:120]}")
            continue
        _last_good[url] = index
        conn.tickwork_node = node.address  # which node this is (logs, tests)
        return conn
    raise AmqpUnreachable(f"no RabbitMQ node answered ({'; '.join(failures)})")


def declare_amqp_queues(channel, shard_count: int | None = None) -> None:
    """The run queues, durable, as the workers declare them (the same arguments, or
    RabbitMQ refuses the second declaration)."""
    count = settings.SCHEDULER_SHARD_COUNT if shard_count is None else shard_count
    arguments = amqp_queue_arguments()
    for name in amqp_queue_names(count):
        channel.queue_declare(name, durable=True, auto_delete=False, arguments=dict(arguments))


class AmqpDepths:
    """Message counts of RabbitMQ queues by passive declarations on one connection that is
    reopened after an error; each answer is reused for `ttl` seconds."""

    def __init__(self, url: str | None = None, *, ttl: float = 0.2) -> None:
        self.url = url
        self.ttl = ttl
        self._conn = None
        self._channel = None
        self._cached: tuple[float, tuple[str, ...], dict[str, int]] | None = None
        self._lock = threading.Lock()

    def depths(self, names: list[str]) -> dict[str, int]:
        with self._lock:
            key = tuple(names)
            now = time.monotonic()
            if self._cached and self._cached[1] == key and now - self._cached[0] < self.ttl:
                return dict(self._cached[2])
            try:
                out = self._read(names)
            except Exception:
                self.close()
                out = self._read(names)  # once more on a fresh connection, then it raises
            self._cached = (now, key, out)
            return dict(out)

    def _read(self, names: list[str]) -> dict[str, int]:
        import amqp

        if self._conn is None:
            self._conn = amqp_connection(self.url)
            self._channel = self._conn.channel()
            declare_amqp_queues(self._channel)
        out = {}
        for name in names:
            try:
                _, count, _ = self._channel.queue_declare(name, passive=True)
            except amqp.exceptions.NotFound:
                # The channel is closed by the refusal: a queue nobody declared is empty.
                self._channel = self._conn.channel()
                count = 0
            out[name] = count
        return out

    def close(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.collect()


_amqp_depths: AmqpDepths | None = None


def queue_depths(redis_client, names: list[str] | None = None) -> dict[str, int]:
    """Messages waiting in each run queue of the configured broker."""
    global _amqp_depths
    names = broker_queue_names() if names is None else names
    if not is_amqp():
        pipe = redis_client.pipeline(transaction=False)
        for name in names:
            pipe.llen(name)
        return dict(zip(names, pipe.execute(), strict=True))
    if _amqp_depths is None or _amqp_depths.url != settings.CELERY_BROKER_URL:
        _amqp_depths = AmqpDepths(settings.CELERY_BROKER_URL)
    return _amqp_depths.depths(names)
