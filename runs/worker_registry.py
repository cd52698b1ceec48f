"""Live workers announce how many runs they execute at once, so that the leader keeps the
broker backlog near what the fleet can take (the admission watermark) and lets runs wait
in its fair queue instead.

A Celery worker registers when it is ready and refreshes its entry from a daemon thread;
the entry expires on its own when the worker dies (SIGKILL included), and is removed at
a clean shutdown. Best effort throughout: without entries the leader uses its minimum
watermark, which is slower for a large fleet but never wrong."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time

import redis
from celery.signals import worker_ready, worker_shutdown

from core.keys import workers_key
from core.redis import REDIS_ERRORS, get_redis

log = logging.getLogger("runs.worker_registry")

REFRESH_SECONDS = 5.0
EXPIRE_SECONDS = 3 * REFRESH_SECONDS

_member: str | None = None
_stop = threading.Event()


def register(slots: int, *, client: redis.Redis | None = None, now: float | None = None) -> str:
    """Announce `slots` for this process until EXPIRE_SECONDS from now; returns the entry."""
    member = f"{socket.gethostname()}:{os.getpid()}:{max(int(slots), 1)}"
    client = client or get_redis()
    client.zadd(workers_key(), {member: (now or time.time()) + EXPIRE_SECONDS})
    return member


def live_slots(client: redis.Redis, now: float) -> int:
    """The run slots of every worker whose registration has not expired."""
    members = client.zrangebyscore(workers_key(), now, "+inf")
    total = 0
    for member in members:
        with contextlib.suppress(ValueError, IndexError):
            total += int(member.decode().rsplit(":", 1)[1])
    return total


def slots_of(concurrency: int) -> int:
    """Runs a worker takes at once: its pool's concurrency, or with the asyncio HTTP
    executor as many calls as each pool process holds in flight (ADR 0018)."""
    from django.conf import settings

    if settings.TICKWORK_HTTP_EXECUTION == "async":
        return concurrency * settings.TICKWORK_HTTP_MAX_INFLIGHT
    return concurrency


def _refresh_forever(slots: int) -> None:
    global _member
    while not _stop.wait(REFRESH_SECONDS):
        try:
            client = get_redis()
            _member = register(slots, client=client)
            client.zremrangebyscore(workers_key(), "-inf", time.time())  # the dead ones
        except REDIS_ERRORS as exc:
            log.warning("worker registration not refreshed: %s", exc)


@worker_ready.connect
def _on_worker_ready(sender=None, **_: object) -> None:
    global _member
    controller = getattr(sender, "controller", None)
    slots = slots_of(int(getattr(controller, "concurrency", 1) or 1))
    try:
        _member = register(slots)
    except REDIS_ERRORS as exc:
        log.warning("worker not registered (the leader uses its minimum watermark): %s", exc)
    threading.Thread(
        target=_refresh_forever, args=(slots,), name="worker-registry", daemon=True
    ).start()


@worker_shutdown.connect
def _on_worker_shutdown(**_: object) -> None:
    _stop.set()
    if _member is not None:
        with contextlib.suppress(*REDIS_ERRORS):
            get_redis().zrem(workers_key(), _member)
