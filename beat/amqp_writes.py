"""The leader's broker writes when the broker is RabbitMQ (`CELERY_BROKER_URL=amqp://`).

Everything else the leader writes stays in Redis (the time indexes, the lease, the
admission ledgers): `AmqpWrites` is a `FencedRedis` whose `push_messages` publishes to
RabbitMQ instead of pushing onto Redis lists. Its input is the same pre-built Celery
message (`beat/messages.py`, kombu's Redis envelope): the body, headers and properties a
worker needs are taken out of it unchanged, so a run reads the same on either broker.

Fencing: RabbitMQ cannot check the lease inside a publish the way a Redis script does, so
before each chunk this checks, in Redis, that the lease lock still holds this leader's
token, and refuses the chunk otherwise (`LeaseLost`). What is left is a window of one
chunk: a leader deposed between its check and its publish (frozen for longer than the
lease right there) can still publish that chunk. Those messages name runs its fenced
PostgreSQL transaction then fails to mark `queued` (the new epoch refuses it), and a run
executes an attempt only when a worker's conditional claim (status and attempt must
match) succeeds, so such a message runs what the new leader would have run anyway, once:
the second delivery of the same (run, attempt) claims nothing (invariant 4).

`url` may list the nodes of a RabbitMQ cluster (`;`-separated, ADR 0026): a new connection
tries them in turn from the one that answered last, so a push that fails because its node
died is tried once more through another node (`push_messages`), and the run queues, quorum
queues there, are served by the surviving majority. Each connection is logged with its node
(`leader.amqp_connected`).

Every push is published with publisher confirms and waits for them (bounded by
`SCHEDULER_AMQP_TIMEOUT_SECONDS`), before the fire transaction commits: a message RabbitMQ
did not confirm makes the publish raise, the transaction roll back, and the runs stay
`scheduled` for the relay.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import select
import threading
import time

from django.conf import settings

from core.broker import amqp_connection, amqp_destination, declare_amqp_queues, is_amqp
from core.logs import log_event

from .fenced import FencedRedis
from .lease import LeaseLost

log = logging.getLogger("beat.amqp_writes")

CHUNK = 500  # messages per lease check
# The keepalive reads a frame that has begun to arrive for at most this long (py-amqp keeps
# a partial frame across a timeout); with a timeout of 0 it would spin on a frame's rest.
FRAME_WAIT_SECONDS = 0.05
KEEPALIVE_EVERY_SECONDS = 1.0  # at most one keepalive a second (it is called often)


class _Batching:
    """Stands for the socket in py-amqp's frame writer: while a chunk is published its
    frames are gathered and sent in one write (one `sendall` a message cost ~1 ms)."""

    def __init__(self, transport) -> None:
        self.transport = transport
        self.buffer: list[bytes] | None = None

    def write(self, data) -> None:
        if self.buffer is None:
            self.transport.write(data)
        else:
            self.buffer.append(bytes(data))  # the writer reuses its buffer: copy

    def flush(self) -> None:
        buffer, self.buffer = self.buffer, None
        if buffer:
            self.transport.write(b"".join(buffer))


def _batching_frame_writer(connection, transport):
    from amqp.method_framing import frame_writer

    connection.batching = _Batching(transport)
    return frame_writer(connection, connection.batching)


class BrokerError(Exception):
    """RabbitMQ refused (nacked) or did not confirm a publish in time."""


def amqp_message(envelope: bytes):
    """The AMQP message a pre-built Redis envelope stands for, and its destination queue
    and priority."""
    import amqp

    data = json.loads(envelope)
    props = data["properties"]
    queue, priority = amqp_destination(props["delivery_info"]["routing_key"])
    body = data["body"]
    if props.get("body_encoding") == "base64":
        body = base64.b64decode(body)
    message = amqp.Message(
        body,
        content_type=data["content-type"],
        content_encoding=data["content-encoding"],
        application_headers=data["headers"],
        correlation_id=props["correlation_id"],
        reply_to=props.get("reply_to") or None,
        delivery_mode=2,
        priority=priority,
    )
    return queue, message


class AmqpWrites(FencedRedis):
    def __init__(
        self,
        client,
        lock_key: str,
        token: str | None,
        partition: int = 0,
        *,
        url: str | None = None,
    ) -> None:
        super().__init__(client, lock_key, token, partition)
        self.url = url or settings.CELERY_BROKER_URL
        self.timeout = settings.SCHEDULER_AMQP_TIMEOUT_SECONDS
        self.heartbeat = settings.SCHEDULER_AMQP_HEARTBEAT_SECONDS
        self._conn = None
        self._channel = None
        self._pending: set[int] = set()  # delivery tags published, not yet confirmed
        self._nacked = False
        self._returned: list[str] = []  # queues a mandatory publish found missing
        self._sent = 0
        # A push runs in the fire's pusher thread while the leader's thread renews leases
        # (and keeps connections alive) between units: py-amqp is not thread-safe.
        self._using = threading.Lock()
        self._kept_alive = 0.0  # time.monotonic() of the last keepalive

    # --- the connection --------------------------------------------------------------------
    def _open(self):
        if self._channel is None:
            conn = amqp_connection(
                self.url,
                timeout=self.timeout,
                frame_writer=_batching_frame_writer,
                heartbeat=self.heartbeat,
            )
            channel = conn.channel()
            declare_amqp_queues(channel)
            channel.confirm_select()
            channel.events["basic_ack"].add(self._on_ack)
            channel.events["basic_nack"].add(self._on_nack)
            channel.events["basic_return"].add(self._on_return)
            self._conn, self._channel = conn, channel
            node = getattr(conn, "tickwork_node", "")
            log_event(log, "leader.amqp_connected", "publishing to RabbitMQ at %s", node, node=node)
            self._sent = 0
            self._pending = set()
            self._nacked = False
            self._returned = []
        return self._channel

    def _on_ack(self, delivery_tag: int, multiple: bool) -> None:
        if multiple:
            self._pending = {tag for tag in self._pending if tag > delivery_tag}
        else:
            self._pending.discard(delivery_tag)

    def _on_nack(self, delivery_tag: int, multiple: bool) -> None:
        self._nacked = True

    def _on_return(self, exc, exchange: str, routing_key: str, message) -> None:
        self._returned.append(routing_key)

    def close(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.collect()

    def __del__(self) -> None:  # a deposed leader's engine is dropped, and its socket
        self.close()

    def keepalive(self) -> None:
        """Between pushes (each leader iteration, and between its units of work): read what
        the broker sent, its heartbeats among it, and send ours when due. A connection the
        broker has been silent on for two heartbeat intervals (its node frozen, or a NAT, a
        firewall or a proxy that holds the TCP connection and forwards nothing) is closed
        here, so that the next push opens a new one at once instead of spending
        `SCHEDULER_AMQP_TIMEOUT_SECONDS` waiting for confirms on the dead one. Skipped while
        a push uses the connection (that is traffic, and it reads the connection itself)."""
        conn = self._conn
        now = time.monotonic()
        if conn is None or not conn.heartbeat or now - self._kept_alive < KEEPALIVE_EVERY_SECONDS:
            return
        if not self._using.acquire(blocking=False):
            return
        try:
            self._kept_alive = now
            _drain_arrived(conn)
            conn.heartbeat_tick()
        except Exception as exc:
            node = getattr(conn, "tickwork_node", "")
            log_event(
                log,
                "leader.amqp_connection_lost",
                "the connection to RabbitMQ at %s is dead (%s: %s): the next push opens another",
                node,
                exc.__class__.__name__,
                str(exc)[:200],
                level=logging.WARNING,
                node=node,
                error=exc.__class__.__name__,
            )
            self.close()
        finally:
            self._using.release()

    # --- fencing -----------------------------------------------------------------------------
    def check_lease(self) -> None:
        """Refuse to publish unless the lease lock still holds this leader's token."""
        if not self.token:
            return  # unfenced (benchmarks, `rebuild_index` without a leader)
        if not self.holds_lease(self.client.get(self.lock_key)):
            raise LeaseLost("another process holds the lease: this leader's publish was refused")

    # --- publishing -----------------------------------------------------------------------
    def push_messages(self, messages: list[tuple[str, bytes]]) -> None:
        """Publish pre-built messages to RabbitMQ: the lease checked in Redis before each
        chunk, then every confirm awaited (one wait a push: a confirm of a persistent
        message waits for RabbitMQ's disk, which a wait per chunk would pay per chunk). A
        push that fails on a connection opened earlier (closed meanwhile by the broker, a
        load balancer's idle timeout) is tried once more on a new one; a copy the first try
        delivered claims nothing (invariant 4)."""
        if not messages:
            return
        with self._using:
            self._push(messages)

    def _push(self, messages: list[tuple[str, bytes]]) -> None:
        while True:
            reused = self._channel is not None
            try:
                for start in range(0, len(messages), CHUNK):
                    self.check_lease()
                    self._publish(messages[start : start + CHUNK])
                self._await_confirms(len(messages))
                return
            except LeaseLost:
                raise  # the channel is fine; this leader is not
            except Exception:
                self.close()  # a broken or refused channel is not reused
                if not reused:
                    raise

    def _publish(self, chunk: list[tuple[str, bytes]]) -> None:
        channel = self._open()
        batching = self._conn.batching
        batching.buffer = []
        try:
            for _queue, envelope in chunk:
                queue, message = amqp_message(envelope)
                # mandatory: a queue deleted since this connection declared it returns the
                # message (before its confirm) instead of dropping it
                channel.basic_publish(message, exchange="", routing_key=queue, mandatory=True)
                self._sent += 1
                self._pending.add(self._sent)
        finally:
            batching.flush()

    def _await_confirms(self, count: int) -> None:
        deadline = time.monotonic() + self.timeout
        while self._pending and not self._nacked:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                self._conn.drain_events(timeout=left)
            except TimeoutError:
                raise BrokerError(
                    f"RabbitMQ left {len(self._pending)} of {count} messages unconfirmed"
                    f" after {self.timeout:g} s"
                ) from None
        if self._nacked:
            raise BrokerError("RabbitMQ refused (nacked) a published run message")
        if self._returned:
            # the connection is closed by the caller: the next one declares the queues again
            raise BrokerError(f"no RabbitMQ queue {sorted(set(self._returned))} took a message")


def _drain_arrived(conn) -> None:
    """Read the frames that have arrived on `conn`, without waiting for more: a frame whose
    first bytes are there is read for at most FRAME_WAIT_SECONDS."""
    sock = conn.transport.sock
    while True:
        pending = getattr(sock, "pending", None)  # TLS: bytes decrypted and not yet read
        if not (pending and pending()) and not select.select([sock], [], [], 0)[0]:
            return
        try:
            conn.drain_events(timeout=FRAME_WAIT_SECONDS)
        except TimeoutError:
            return


def leader_writes(client, lock_key: str, token: str | None, partition: int = 0) -> FencedRedis:
    """The leader's fenced writes for the configured broker, to the partition's keys."""
    if is_amqp():
        return AmqpWrites(client, lock_key, token, partition)
    return FencedRedis(client, lock_key, token, partition)
