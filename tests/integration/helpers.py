"""Helpers for engine tests: jobs made through the service layer, a leader driven by hand."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from datetime import UTC, datetime

from django.db import connection
from django_tenants.utils import schema_context

from beat.engine import Engine, EngineConfig
from beat.fenced import FencedRedis
from beat.lease import Lease
from beat.loop import SchedulerProcess
from core.clock import FakeClock
from core.keys import leader_lock_name
from jobs.services import Actor, job_create
from runs.models import Run
from tenants.models import Tenant

ACTOR = Actor("user:test")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def make_job(tenant: Tenant, clock: FakeClock, **data):
    data.setdefault("name", "job")
    data.setdefault("target", {"type": "task", "task": "builtin.noop"})
    with schema_context(tenant.schema_name):
        return job_create(tenant=tenant, actor=ACTOR, data=data, clock=clock)


def new_engine(client, clock: FakeClock, **config) -> Engine:
    """An engine holding the lease and a fresh epoch, as a newly elected leader would (any
    previous holder's lease is taken as expired): its Redis writes are fenced by the token."""
    # These tests count the runs of a window of `lookahead_seconds`: the extra a job taken
    # up is prepared past it has tests of its own (test_lookahead_extra.py).
    config.setdefault("lookahead_extra_seconds", 0.0)
    client.delete("lock:" + leader_lock_name())
    lease = Lease(client, holder="test-leader", expire_seconds=3600)
    assert lease.try_acquire()
    return Engine(
        client=client,
        clock=clock,
        epoch=lease.epoch,
        config=EngineConfig(**config),
        origin="test-leader",
        writes=FencedRedis(client, lease.lock_key, lease.token),
    )


def runs_of(tenant: Tenant, **filters) -> list[Run]:
    with schema_context(tenant.schema_name):
        return list(Run.objects.filter(**filters).order_by("scheduled_for", "created_at"))


def queued_messages(client) -> list[dict]:
    """Every message waiting in the run queues, decoded (oldest first)."""
    out = []
    for key in sorted(k.decode() for k in client.keys("runs.*")):
        for raw in reversed(client.lrange(key, 0, -1)):
            message = json.loads(raw)
            message["queue"] = key
            out.append(message)
    return out


def message_args(message: dict) -> list:
    import base64

    return json.loads(base64.b64decode(message["body"]))[0]


def set_public() -> None:
    connection.set_schema_to_public()


def other_connection(**settings: str):
    """A second PostgreSQL session on the test database (its own transaction, not
    Django's), to hold a lock or commit while the code under test runs; `settings` are
    set for the session (`lock_timeout="100ms"`)."""
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("options", None)
    other = psycopg.connect(**params, autocommit=False)
    for name, value in settings.items():
        other.execute("SELECT set_config(%s, %s, false)", [name, value])
    # Committed, so that the settings outlive the session's first rollback: a session-level
    # set_config made inside a transaction is undone with it, and a test that rolls back
    # after a lock timeout would then wait without one (it hung CI for an hour once).
    other.commit()
    return other


class StallingProxy:
    """A TCP proxy whose forwarding can be held: one client's connection stalls for real
    (its requests sent and not answered, as behind a congested link) while the other
    connections to the same server go on. `stall_open()` holds only the connections open
    now while new ones go through, as a proxy or load balancer that keeps a connection and
    forwards nothing on it does."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.flowing = threading.Event()
        self.flowing.set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._connections: list[threading.Event] = []  # each connection's own flow
        self._split: int | None = None  # split_next_reply
        self.split_sent = threading.Event()
        self._cut: bytes | None = None  # cut_after_request
        self._cut_armed = False
        self.cut_done = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def stall(self) -> None:
        self.flowing.clear()

    def stall_open(self) -> None:
        for flowing in self._connections:
            flowing.clear()

    def split_next_reply(self, keep: int) -> threading.Event:
        """The next bytes a server sends, on whichever connection sends first (the tests
        that use it have one): the first `keep` go through, the rest wait for `flow()`
        (a frame that has only partly arrived). The event is set once the first part went
        through."""
        self._split = keep
        self.split_sent = threading.Event()
        return self.split_sent

    def cut_after_request(
        self, marker: bytes, *, deliver: bool = True, at_reply: bool = True
    ) -> threading.Event:
        """The next request holding `marker` reaches the server (`deliver`) or not; either
        way its connection is then cut both ways before any reply reaches the client (a
        link that failed just after the request: the client cannot know whether it ran):
        when the reply comes (`at_reply`), or at once, the statement still executing. The
        event is set once the connection is cut."""
        self._cut, self._cut_deliver, self._cut_at_reply = marker, deliver, at_reply
        self._cut_armed = False
        self.cut_done = threading.Event()
        return self.cut_done

    def flow(self) -> None:
        self.flowing.set()
        for flowing in self._connections:
            flowing.set()

    def close(self) -> None:
        """Ends every connection (shutdown first: a close from another thread does not
        wake a thread blocked in `recv` or `accept`)."""
        self.flow()
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self._listener.accept()
            except OSError:
                return
            far = socket.create_connection(self.upstream, timeout=5)
            far.settimeout(None)
            self._sockets += [near, far]
            flowing = threading.Event()
            flowing.set()
            self._connections.append(flowing)
            for src, dst, replies in ((near, far, False), (far, near, True)):
                threading.Thread(
                    target=self._pipe, args=(src, dst, flowing, replies), daemon=True
                ).start()

    def _cut_both(self, src: socket.socket, dst: socket.socket) -> None:
        # shutdown, not close alone: the other direction's thread is blocked in `recv` on
        # one of them, and a close would wait for it (no FIN would reach that end).
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.cut_done.set()

    def _pipe(
        self, src: socket.socket, dst: socket.socket, flowing: threading.Event, replies: bool
    ) -> None:
        try:
            while data := src.recv(65536):
                self.flowing.wait()  # held here while stalled: nothing goes through
                flowing.wait()
                if not replies and self._cut is not None and self._cut in data:
                    self._cut = None
                    self._cut_armed = True
                    if not self._cut_deliver:
                        self._cut_both(src, dst)
                        return
                    if not self._cut_at_reply:
                        dst.sendall(data)
                        self._cut_armed = False
                        self._cut_both(src, dst)
                        return
                elif replies and self._cut_armed:
                    self._cut_armed = False
                    self._cut_both(src, dst)
                    return  # the reply is dropped
                if replies and self._split is not None:
                    keep, self._split = self._split, None
                    dst.sendall(data[:keep])
                    data = data[keep:]
                    flowing.clear()
                    self.split_sent.set()
                    flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            src.close()
            dst.close()


def fleet_process(
    client, name: str, *, clock: FakeClock, partitions: int | None = None
) -> SchedulerProcess:
    """A `runscheduler` process of a test fleet (a 2 s lease), announced: the partitions'
    plan sees it at once. `partitions`: SCHEDULER_PARTITIONS unless given."""
    from beat import metrics

    process = SchedulerProcess(
        client=client,
        clock=clock,
        config=EngineConfig(),
        lease_seconds=2,
        holder=name,
        partitions=partitions,
    )
    metrics._last_announce.pop(name, None)  # announcements are once a second per process
    metrics.announce(client, name, 2, partitions=process.partition_count)
    return process


def settle(processes: list[SchedulerProcess], turns: int = 6) -> None:
    """Turns of taking and giving up partitions, each process in turn."""
    for _ in range(turns):
        for process in processes:
            process.try_lead()


def held_partitions(process: SchedulerProcess) -> list[int]:
    return sorted(leader.partition for leader in process.held())
