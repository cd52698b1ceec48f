"""Leadership: a python-redis-lock lease plus the fencing epoch in PostgreSQL.

The lock is renewed by the leader loop itself, between its steps, never by a background
thread: a renewal thread keeps renewing for a leader whose loop is wedged (and does not
survive a fork), so here a loop that stops making progress loses the lease within
`expire` seconds and a standby takes over. See docs/adr/0002-leader-lease.md.

Taking the lease bumps the epoch. The bump is an UPDATE of the lease row, which waits for
the previous leader's fenced transactions (they hold the row FOR SHARE). That wait is
bounded: after `SCHEDULER_TAKEOVER_LOCK_WAIT_SECONDS` the new leader, which holds the Redis
lease and so is the only rightful writer, ends the sessions that block it (a frozen or
partitioned old leader) and bumps again; their transactions roll back, so nothing the old
leader was writing is kept.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

import redis
import redis_lock
from django.conf import settings
from django.db import OperationalError, connection, transaction

from core.keys import leader_info_key, leader_lock_name, partition_count
from core.logs import log_event
from core.partitions import lease_row_id
from core.redis import REDIS_ERRORS, KeyedScript

from .store import FENCE_LOCK_CLASS

log = logging.getLogger("beat.lease")

BUMP_SQL = """
INSERT INTO public.beat_schedulerlease (id, epoch, holder, acquired_at, renewed_at)
VALUES (%s, 1, %s, now(), now())
ON CONFLICT (id) DO UPDATE SET epoch = beat_schedulerlease.epoch + 1,
    holder = EXCLUDED.holder, acquired_at = now(), renewed_at = now()
RETURNING epoch
"""


_UNLOCK = KeyedScript(redis_lock.UNLOCK_SCRIPT)
_EXTEND = KeyedScript(redis_lock.EXTEND_SCRIPT)
_RESET = KeyedScript(redis_lock.RESET_SCRIPT)


class LeaseLost(Exception):
    """Redis said no (or did not answer): stop writing at once."""


def process_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _is_lock_timeout(exc: BaseException) -> bool:
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) == "55P03"  # lock_not_available


def bump_epoch(
    holder: str,
    *,
    lock_wait_seconds: float | None = None,
    holds_lease: Callable[[], bool] | None = None,
    partition: int = 0,
) -> int:
    """Start a new epoch, waiting at most `lock_wait_seconds` for the previous leader's
    in-flight fenced transactions before ending them (see the module docstring).

    `holds_lease` says whether this process still holds the Redis lock. A process that
    took the lock and then stalled (GC, a slow connection) past its expiry must not end
    the sessions of the leader that took the lock after it: it is checked before ending
    any session and after the bump (a stale bump makes the rightful leader step down at
    its next fenced write: lost time, never a double fire, and reported here)."""
    wait = lock_wait_seconds or settings.SCHEDULER_TAKEOVER_LOCK_WAIT_SECONDS
    still_ours = holds_lease or (lambda: True)
    for _ in range(3):
        if not still_ours():
            raise LeaseLost("the Redis lock expired before the epoch bump: not taking over")
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    "SELECT set_config('lock_timeout', %s, true)", [f"{wait * 1000:.0f}"]
                )
                cursor.execute(BUMP_SQL, [lease_row_id(partition, partition_count()), holder])
                epoch = cursor.fetchone()[0]
        except OperationalError as exc:
            if not _is_lock_timeout(exc):
                raise
        else:
            if not still_ours():
                raise LeaseLost(f"the Redis lock expired during the bump to epoch {epoch}")
            return epoch
        # Still blocked: a previous leader sits in a fenced transaction (frozen, or cut off
        # from us but not from PostgreSQL). It cannot be the rightful leader any more, as
        # long as we still hold the lock.
        if not still_ours():
            raise LeaseLost("the Redis lock expired while waiting to bump: not taking over")
        with connection.cursor() as cursor:
            ended = _end_waiting_lease_holders(cursor, partition)
        log_event(
            log,
            "leader.ended_stuck_sessions",
            "took over partition %s from a stuck leader: ended sessions %s",
            partition,
            ended,
            level=logging.WARNING,
            partition=partition,
            pids=",".join(map(str, ended)),
        )
    raise LeaseLost("could not start a new epoch: the lease row stays locked")


def _end_waiting_lease_holders(cursor, partition: int) -> list[int]:
    """End the sessions inside one of the partition's fenced transactions: those holding
    its shared advisory lock (`beat.store.fence` takes it until the transaction ends), in
    this database only (another deployment's, or a test database's, lock has the same
    numbers). The other partitions' leaders hold other keys and are left alone.
    pg_terminate_backend needs the same role or pg_signal_backend."""
    cursor.execute(
        """
        SELECT pid, pg_terminate_backend(pid) FROM pg_locks
        WHERE database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND locktype = 'advisory' AND classid = %s AND objid = %s AND objsubid = 2
          AND granted AND pid <> pg_backend_pid()
        """,
        [FENCE_LOCK_CLASS, lease_row_id(partition, partition_count())],
    )
    return [row[0] for row in cursor.fetchall()]


def current_epoch(partition: int = 0) -> tuple[int, str] | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT epoch, holder FROM public.beat_schedulerlease WHERE id = %s",
            [lease_row_id(partition, partition_count())],
        )
        row = cursor.fetchone()
    return (row[0], row[1]) if row else None


def log_redis_unreachable(exc: Exception) -> None:
    log_event(
        log,
        "leader.redis_unreachable",
        "cannot reach Redis to take the lease: %s",
        exc,
        level=logging.WARNING,
        error=str(exc),
    )


class Lease:
    """The lease of one partition (the only one, with SCHEDULER_PARTITIONS = 1)."""

    def __init__(
        self, client: redis.Redis, *, holder: str, expire_seconds: int, partition: int = 0
    ) -> None:
        self.client = client
        self.holder = holder
        self.partition = partition
        self.expire_seconds = max(int(expire_seconds), 1)
        self.epoch: int | None = None
        self.token = uuid.uuid4().hex
        self.lock_key = "lock:" + leader_lock_name(partition)  # python-redis-lock's key
        self._lock = redis_lock.Lock(
            client,
            leader_lock_name(partition),
            expire=self.expire_seconds,
            id=self.token,
            strict=False,  # a RedisCluster client is not a redis.Redis; its two keys share a tag
        )
        # Its scripts run on their keys' node only (core/redis.py KeyedScript): the library's
        # own load a missing script on every primary of a cluster.
        self._lock.unlock_script = _UNLOCK
        self._lock.extend_script = _EXTEND
        self._lock.reset_script = _RESET
        self.renewed_at = 0.0  # time.monotonic() of the last successful take or renewal
        self.step = "take"  # what the leader is doing: named in a late renewal's warning
        self._step_at_renewal = "take"

    @property
    def held(self) -> bool:
        return self.epoch is not None

    def try_acquire(self) -> bool:
        try:
            if not self._take_lock():
                return False
        except REDIS_ERRORS as exc:
            log_redis_unreachable(exc)
            return False
        self.renewed_at = time.monotonic()
        self.step = self._step_at_renewal = "take"
        try:
            self.epoch = bump_epoch(
                self.holder, holds_lease=self.holds_lock, partition=self.partition
            )
        except Exception:
            self._release_quietly()
            raise
        self._publish_info()
        log_event(
            log,
            "leader.lease_taken",
            "took the lease of partition %s as %s, epoch %s",
            self.partition,
            self.holder,
            self.epoch,
            holder=self.holder,
            partition=self.partition,
            epoch=self.epoch,
        )
        return True

    def _take_lock(self) -> bool:
        """The Redis lock, if free; or if it still names this process: a renewal whose reply
        was lost, then a release that could not reach Redis, leave the key with this
        process's token until it expires. python-redis-lock refuses to take it again
        (AlreadyAcquired, which once raised out of every attempt until the key expired,
        with no leader meanwhile, since no other process can take it either); it is
        this process's, so its expiry is renewed and it is taken with a new epoch, as
        after any other holder."""
        try:
            return bool(self._lock.acquire(blocking=False))
        except redis_lock.AlreadyAcquired:
            try:
                self._lock.extend()
            except redis_lock.NotAcquired:  # it expired meanwhile: free, taken next time
                return False
            return True

    def holds_lock(self) -> bool:
        """The Redis lock still names this process (one GET; False if Redis is away)."""
        try:
            return self._lock.get_owner_id() == self.token
        except REDIS_ERRORS:
            return False

    def renew(self) -> None:
        if self.epoch is None:
            raise LeaseLost("not the leader")
        gap = time.monotonic() - self.renewed_at
        if gap > self.expire_seconds / 2:  # a step ran long between two checkpoints
            log_event(
                log,
                "leader.renewal_late",
                "lease renewed %.2fs after the last renewal (lease %ss), between %s and %s",
                gap,
                self.expire_seconds,
                self._step_at_renewal,
                self.step,
                level=logging.WARNING,
                gap_seconds=round(gap, 3),
                since_step=self._step_at_renewal,
                step=self.step,
            )
        try:
            self._lock.extend()
            self._publish_info()
        except (redis_lock.NotAcquired, *REDIS_ERRORS) as exc:
            self.epoch = None
            raise LeaseLost(
                f"lease renewal failed {gap:.2f}s after the last, between "
                f"{self._step_at_renewal} and {self.step}: {exc}"
            ) from exc
        self.renewed_at = time.monotonic()
        self._step_at_renewal = self.step

    def renew_if_due(self) -> None:
        """Renew when a quarter of the lease has passed since the last renewal: cheap to
        call between any two pieces of work."""
        if time.monotonic() - self.renewed_at >= self.expire_seconds / 4:
            self.renew()

    def release(self) -> None:
        if self.epoch is not None:
            self.epoch = None
            self._release_quietly()

    def step_down(self, reason: str) -> None:
        log_event(
            log,
            "leader.step_down",
            "stepping down from partition %s (epoch %s): %s",
            self.partition,
            self.epoch,
            reason,
            level=logging.WARNING,
            partition=self.partition,
            epoch=self.epoch,
            reason=reason,
        )
        self.release()

    def _publish_info(self) -> None:
        self.client.set(leader_info_key(self.partition), self.holder, ex=self.expire_seconds)

    def _release_quietly(self) -> None:
        try:
            self._lock.release()
            self.client.delete(leader_info_key(self.partition))
        except (redis_lock.NotAcquired, *REDIS_ERRORS):
            pass
