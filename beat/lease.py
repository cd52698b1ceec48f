"""Leadership: a python-redis-lock lease plus the fencing epoch in PostgreSQL.

The lock is renewed by the leader loop itself, once per iteration, never by a background
thread: a renewal thread keeps renewing for a leader whose loop is wedged (and does not
survive a fork), so here a loop that stops making progress loses the lease within
`expire` seconds and a standby takes over. See docs/adr/0002-leader-lease.md.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid

import redis
import redis_lock
from django.db import connection

from core.keys import leader_info_key, leader_lock_name

log = logging.getLogger("beat.lease")


class LeaseLost(Exception):
    """Redis said no (or did not answer): stop writing at once."""


def process_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def bump_epoch(holder: str) -> int:
    """Start a new epoch. Waits for in-flight fenced transactions of the previous leader
    (they hold the row FOR SHARE), after which their epoch check fails."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO public.beat_schedulerlease (id, epoch, holder, acquired_at, renewed_at)
            VALUES (1, 1, %s, now(), now())
            ON CONFLICT (id) DO UPDATE SET epoch = beat_schedulerlease.epoch + 1,
                holder = EXCLUDED.holder, acquired_at = now(), renewed_at = now()
            RETURNING epoch
            """,
            [holder],
        )
        return cursor.fetchone()[0]


def current_epoch() -> tuple[int, str] | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT epoch, holder FROM public.beat_schedulerlease WHERE id = 1")
        row = cursor.fetchone()
    return (row[0], row[1]) if row else None


class Lease:
    def __init__(self, client: redis.Redis, *, holder: str, expire_seconds: int) -> None:
        self.client = client
        self.holder = holder
        self.expire_seconds = max(int(expire_seconds), 1)
        self.epoch: int | None = None
        self._lock = redis_lock.Lock(
            client, leader_lock_name(), expire=self.expire_seconds, id=uuid.uuid4().hex
        )

    @property
    def held(self) -> bool:
        return self.epoch is not None

    def try_acquire(self) -> bool:
        try:
            if not self._lock.acquire(blocking=False):
                return False
        except redis.RedisError as exc:
            log.warning("cannot reach Redis to take the lease: %s", exc)
            return False
        try:
            self.epoch = bump_epoch(self.holder)
        except Exception:
            self._release_quietly()
            raise
        self._publish_info()
        log.info("took the lease as %s, epoch %s", self.holder, self.epoch)
        return True

    def renew(self) -> None:
        if self.epoch is None:
            raise LeaseLost("not the leader")
        try:
            self._lock.extend()
            self._publish_info()
        except (redis_lock.NotAcquired, redis.RedisError) as exc:
            self.epoch = None
            raise LeaseLost(f"lease renewal failed: {exc}") from exc

    def release(self) -> None:
        if self.epoch is not None:
            self.epoch = None
            self._release_quietly()

    def step_down(self, reason: str) -> None:
        log.warning("stepping down (epoch %s): %s", self.epoch, reason)
        self.release()

    def _publish_info(self) -> None:
        self.client.set(leader_info_key(), self.holder, ex=self.expire_seconds)

    def _release_quietly(self) -> None:
        try:
            self._lock.release()
            self.client.delete(leader_info_key())
        except (redis_lock.NotAcquired, redis.RedisError):
            pass
