"""The runscheduler process: a standby until it takes a lease, then the leader loop.

The tenants are split into SCHEDULER_PARTITIONS partitions (docs/adr/0020), each with its
own lease and fencing epoch; a process leads the partitions it holds (`PartitionLeader`,
one engine each) and stands by for the rest, taking and giving up partitions so that they
spread evenly over the live processes (`beat/partition_plan.py`). With one partition this
is one leader and its standbys.

Each leader iteration renews the lease first (so a wedged loop loses it), fires what is
due, advances a rebuild in progress by one bounded step, materialises what enters the
lookahead window, runs a slice of each sweep, and then sleeps until the next due instant,
or until a service or worker wakes it through Redis. The engine renews the lease between
its units of work as well. Any sign that it may no longer lead (lease renewal failed, a
fenced write refused, Redis or PostgreSQL unreachable) makes it stop writing at once, say
so, and go back to standby. Any other error is logged with its traceback and handled the
same way after a growing back-off: the process never exits on its own.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from core import index
from core.clock import Clock
from core.keys import (
    faults_key,
    leader_info_key,
    leader_lock_name,
    partition_count,
    schedulers_partitions_key,
    schedulers_seen_key,
    tenant_partition,
    wake_key,
)
from core.logs import log_event
from core.redis import REDIS_ERRORS, pipeline_eval

from .alerting import Alerting
from .amqp_writes import leader_writes
from .engine import Engine, EngineConfig
from .lease import Lease, LeaseLost, log_redis_unreachable, process_identity
from .metrics import announce, iteration_done
from .partition_plan import plan
from .session import bounded_leader_session
from .store import FencingError

log = logging.getLogger("beat.loop")

FLEET_ERROR_LOG_SECONDS = 5.0  # one warning per this while the fleet's keys cannot be read
UNABLE_SECONDS = 5.0  # after a failed take, at least this long not counted live (see _unable)
STEP_DOWN_ERRORS = (LeaseLost, FencingError, *REDIS_ERRORS, OperationalError, InterfaceError)
MAX_ERROR_BACKOFF_SECONDS = 30.0
SEEN_KEPT_SECONDS = 60  # entries of processes gone this long are removed

# Who is live, on Redis's clock, not each host's: with each host's own, a process whose
# clock ran S seconds fast stayed live S seconds after its death (its partitions then went
# back and forth between the survivors), and one more than a window slow never counted.
# ARGV: holder, "add" (it looks) or "remove" (it does not count itself), the live window
# and how long entries are kept, in seconds. Returns the live processes. (A write after
# TIME needs effects replication: the default from Redis 5, asked for before it.)
SEEN_SCRIPT = """
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if ARGV[2] == 'add' then
  redis.call('ZADD', KEYS[1], now, ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[4]))
return redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[3]), '+inf')
"""


class PartitionLeader:
    """One partition's leadership in this process: its lease and, while held, its engine."""

    def __init__(self, process: SchedulerProcess, partition: int) -> None:
        self.process = process
        self.partition = partition
        self.client = process.client
        self.clock = process.clock
        self.config = process.config
        self.lease = Lease(
            process.client,
            holder=process.holder,
            expire_seconds=process.lease_seconds,
            partition=partition,
        )
        self.engine: Engine | None = None
        self.alerting: Alerting | None = None  # the leader's alert sweep and delivery thread
        self.error_backoff = 0.0
        self.blocked_until = 0.0  # time.monotonic(): not taken again before (after an error)

    @property
    def held(self) -> bool:
        return self.lease.held

    # --- leadership ------------------------------------------------------------------------
    def try_lead(self) -> bool:
        if self.lease.held:
            return True
        if not self.lease.try_acquire():
            return False
        bounded_leader_session(self.process.holder)
        self.engine = Engine(
            client=self.client,
            clock=self.clock,
            epoch=self.lease.epoch,
            config=self.config,
            origin=self.process.holder,
            writes=leader_writes(
                self.client, self.lease.lock_key, self.lease.token, self.partition
            ),
            checkpoint=lambda: self.process.checkpoint(self),
            partition=self.partition,
        )
        self.engine.faults.adopt(self.client, faults_key(self.partition))
        self.ensure_index()
        self.engine.relay(force=True)
        self.alerting = Alerting(self.engine)
        self.alerting.start()
        return True

    def step_down(self, reason: str) -> None:
        self.lease.step_down(reason)
        self._drop_engine()

    def release(self) -> None:
        """Give the partition up on purpose (rebalance, shutdown): the lease is deleted, so
        another process takes it at its next turn rather than after the lease expires."""
        self.lease.release()
        self._drop_engine()

    def _drop_engine(self) -> None:
        if self.alerting is not None:
            self.alerting.stop()  # it claims nothing more: its claims are fenced anyway
            self.alerting = None
        if self.engine is not None:
            # Its broker connection now, not when the collector finds the engine (the
            # channel's callbacks make a cycle): a deposed leader's connection lingered.
            self.engine.writes.close()
        self.engine = None  # what it held in memory is in PostgreSQL; the next leader relays
        close_old_connections()
        if connection.connection is not None and getattr(connection.connection, "broken", False):
            connection.close()

    def ensure_index(self) -> None:
        """A missing index (Redis flushed or new) starts a rebuild, done in steps; one that
        a previous leader began is resumed."""
        engine = self.engine
        if engine is None or engine.rebuild is not None:
            return
        if not index.is_built(self.client, self.partition):
            engine.start_rebuild(lost=True)

    # --- one leader iteration ------------------------------------------------------------
    def lead_once(self) -> float:
        """Do everything due now in this partition; return how long to sleep (seconds)."""
        engine = self.engine
        started = time.monotonic()
        step = self._step
        step("the iteration's start")
        self.lease.renew()
        bounded_leader_session(self.process.holder)
        engine.writes.keepalive()
        self.ensure_index()
        step("read_ended")
        engine.read_ended()
        step("fire")
        engine.fire()
        step("rebuild")
        rebuilt = engine.rebuild_step()
        step("takeover relay")
        engine.finish_takeover_relay()
        step("materialise")
        processed = engine.materialise()
        step("load_run_index")
        engine.load_run_index()
        step("fire")
        engine.fire()
        step("relay")
        engine.relay()
        step("reconcile")
        engine.reconcile()
        step("sync_dirty")
        engine.sync_dirty()
        step("reap")
        engine.reap()
        step("settle_dag_runs")
        engine.settle_dag_runs()
        if self.alerting is not None:
            step("alerts")
            self.alerting.evaluate()
        step("retention")
        engine.retention.step(engine)  # run history past its retention (beat/retention.py)
        step("publish")
        engine.publish_faults()
        engine.publish_admission()
        iteration_done(self.client, started)
        step("sleep")
        busy = (
            processed >= self.config.materialise_batch
            or engine.materialise_interrupted
            or engine.fire_limited
        )
        if busy or not rebuilt or engine.sweeps_running():
            return 0.0  # more work waits: go on after renewing
        # Runs waiting for admission go as slots free up: an ended attempt wakes the
        # leader, and it looks again at least every poll interval (a lost wake-up).
        cap = self.process.max_sleep
        if engine.runs_waiting_for_admission():
            cap = min(cap, self.config.admission.poll_seconds)
        next_due = engine.next_due()
        if next_due is None:
            return cap
        return max(0.0, min(cap, next_due - self.clock.now().timestamp()))

    def _step(self, name: str) -> None:
        self.lease.step = name


class SchedulerProcess:
    def __init__(
        self,
        *,
        client: redis.Redis,
        clock: Clock,
        config: EngineConfig | None = None,
        lease_seconds: float | None = None,
        holder: str | None = None,
        partitions: int | None = None,
    ) -> None:
        self.client = client
        self.clock = clock
        self.config = config or EngineConfig.from_settings()
        self.holder = holder or process_identity()
        self.lease_seconds = int(lease_seconds or settings.SCHEDULER_LEASE_SECONDS)
        self.partition_count = partitions or partition_count()
        if self.partition_count != partition_count():
            raise ValueError("partitions must be SCHEDULER_PARTITIONS (the keys depend on it)")
        self.partitions = [PartitionLeader(self, n) for n in range(self.partition_count)]
        lease = self.partitions[0].lease
        # Renew well inside the lease; this also caps how long an idle leader sleeps.
        self.max_sleep = lease.expire_seconds / 4
        self.standby_poll = min(0.2, self.max_sleep)
        # With partitions, how often a process looks at who holds what, leading or not (a
        # pipeline of 2P + 2 commands): a dead process's partitions go within this of expiring.
        self.fleet_poll = min(0.1, self.standby_poll)
        # A partition seen free this long is taken by any process, over its share: a dead
        # process may still be counted as live for a moment, and its partitions must not
        # wait for that.
        self.orphan_seconds = 3 * self.fleet_poll
        # time.monotonic(): not counted as live before (a take failed, or a back-off)
        self.unable_until = 0.0
        self.live_window = max(self.lease_seconds / 2, 10 * self.fleet_poll)
        self._free_since: dict[int, float] = {}
        self._fleet_error_logged_at = float("-inf")
        self._refused_count: int | None = None  # another live process's different count
        self.iterations = 0

    # --- the only partition, with SCHEDULER_PARTITIONS = 1 (and tests) ----------------------
    @property
    def lease(self) -> Lease:
        return self.partitions[0].lease

    @property
    def engine(self) -> Engine | None:
        return self.partitions[0].engine

    @property
    def alerting(self) -> Alerting | None:
        return self.partitions[0].alerting

    @property
    def error_backoff(self) -> float:
        return max(p.error_backoff for p in self.partitions)

    def held(self) -> list[PartitionLeader]:
        return [p for p in self.partitions if p.held]

    # --- leadership ------------------------------------------------------------------------
    def try_lead(self) -> bool:
        """Take and give up partitions by the plan; True while this process leads any."""
        if self.partition_count == 1:  # one lease: take it whenever it is free
            try:
                view = self._read_fleet()
            except REDIS_ERRORS as exc:
                if self.held():
                    # On a Redis Cluster the fleet's keys are on other slots than the
                    # partition's: its own lease renewal (next) decides, as with several.
                    self._fleet_unreadable(exc)
                    return True
                log_redis_unreachable(exc)
                return False
            if view is None:
                self.step_down("a live runscheduler runs with another partition count")
                return False
            only = self.partitions[0]
            return only.held or (time.monotonic() >= only.blocked_until and only.try_lead())
        self._rebalance_unless_unreadable()
        return bool(self.held())

    def _rebalance_unless_unreadable(self) -> None:
        try:
            self.rebalance()
        except REDIS_ERRORS as exc:
            # The fleet's view reads every partition's keys: on a Redis Cluster, several
            # nodes. One node away (a primary failing over) must not cost the partitions
            # held on the others: each goes on while its own lease renews, and the one whose
            # node is away loses its lease at its next renewal or fenced write, alone. Not
            # counted live for a while: the others must not give partitions up for this
            # process to take, which it cannot while it cannot read the fleet.
            self._fleet_unreadable(exc)
            self._unable()

    def _fleet_unreadable(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._fleet_error_logged_at >= FLEET_ERROR_LOG_SECONDS:
            self._fleet_error_logged_at = now
            log_event(
                log,
                "scheduler.fleet_unreadable",
                "cannot read the fleet's leases (%s); the partitions held go on while"
                " their own leases renew",
                exc,
                level=logging.WARNING,
                error=str(exc),
                held=[leader.partition for leader in self.held()],
            )

    def checkpoint(self, current: PartitionLeader) -> None:
        """Between two units of one partition's work: renew that partition's lease when due
        (raising if it is lost), and every other lease held (one partition's long step must
        not let the others lapse; a lost one is given up at its turn)."""
        current.lease.renew_if_due()
        for other in self.partitions:
            if other is not current and other.held:
                with contextlib.suppress(LeaseLost):
                    other.lease.renew_if_due()
        # A long iteration must not leave a broker connection silent past its heartbeat.
        for leader in self.partitions:
            if leader.engine is not None:
                leader.engine.writes.keepalive()

    def _drop_lost(self) -> None:
        """Partitions whose lease was lost while another partition worked: their engine
        goes (what it held is in PostgreSQL; the next holder relays it)."""
        for leader in self.partitions:
            if leader.engine is not None and not leader.held:
                leader.step_down("lease lost while another partition worked")

    def rebalance(self) -> None:
        view = self._read_fleet()
        if view is None:  # another layout of the same tenants is live: lead none of them
            self.step_down("a live runscheduler runs with another partition count")
            return
        holders, live = view
        now = time.monotonic()
        for partition in range(self.partition_count):
            if holders.get(partition) is None:
                self._free_since.setdefault(partition, now)
            else:
                self._free_since.pop(partition, None)
        blocked = frozenset(p.partition for p in self.partitions if now < p.blocked_until)
        decided = plan(
            me=self.holder,
            partitions=self.partition_count,
            live=live,
            holders=holders,
            free_for={p: now - t for p, t in self._free_since.items()},
            orphan_seconds=self.orphan_seconds,
            blocked=blocked,
        )
        if decided.release is not None:
            leader = self.partitions[decided.release]
            log_event(
                log,
                "leader.partition_released",
                "gave up partition %s to even out the fleet (%s processes live)",
                decided.release,
                len(live),
                partition=decided.release,
                live=len(live),
            )
            leader.release()
            # Not taken back by this process at once: the least loaded one is to take it (at
            # its next look); should nobody, it is an orphan like any other soon after.
            leader.blocked_until = now + 2 * self.orphan_seconds
        for partition in decided.take:
            leader = self.partitions[partition]
            self._renew_held()  # a takeover may wait for a stuck session: renew first
            try:
                leader.try_lead()
            except STEP_DOWN_ERRORS as exc:  # Redis or PostgreSQL away, or lost meanwhile
                if leader.held:
                    leader.step_down(f"{exc.__class__.__name__}: {exc}")
                self._unable()
            except Exception as exc:  # that partition's trouble, not the others'
                self._failed(leader, exc, wait=None)
                self._unable()

    def _renew_held(self) -> None:
        for leader in self.held():
            with contextlib.suppress(LeaseLost):
                leader.lease.renew_if_due()
        self._drop_lost()

    def _unable(self, seconds: float = UNABLE_SECONDS) -> None:
        """This process cannot lead a partition for `seconds` (a take failed for a reason of
        its own, PostgreSQL unreachable or a bug; or it backs off after an error in that
        partition's work): it stops counting itself as live until then, or it would look
        the least loaded and the others would keep giving partitions up for it to take (and
        fail to). Never shortened: a short wait must not end a longer back-off. The
        partitions it holds stay its own (the others see them held, and take only free
        ones), it still takes orphans, and the others' shares grow meanwhile."""
        self.unable_until = max(self.unable_until, time.monotonic() + seconds)

    def _read_fleet(self) -> tuple[dict[int, str | None], list[str]] | None:
        """Who holds each partition (None: nobody), and the processes seen looking within
        `live_window`; None when another live process runs with a different partition
        count (this one then leads nothing new, and says so)."""
        pipe = self.client.pipeline(transaction=False)
        for partition in range(self.partition_count):
            pipe.exists("lock:" + leader_lock_name(partition))
            pipe.get(leader_info_key(partition))
        # Live: seen looking within the window. Much shorter than the lease, so that a dead
        # process has left the count before its leases expire and the survivors' shares
        # grow; a process whose turn runs longer only looks dead for a moment, which costs
        # nothing while every partition is led.
        looking = "add" if time.monotonic() >= self.unable_until else "remove"
        pipeline_eval(
            self.client,
            pipe,
            SEEN_SCRIPT,
            [schedulers_seen_key()],
            [self.holder, looking, self.live_window, SEEN_KEPT_SECONDS],
        )
        pipe.hgetall(schedulers_partitions_key())
        *pairs, members, counts = pipe.execute()
        holders: dict[int, str | None] = {}
        for partition in range(self.partition_count):
            locked, info = pairs[2 * partition], pairs[2 * partition + 1]
            holders[partition] = (info.decode() if info else "?") if locked else None
        live = [m.decode() for m in members]
        others = {
            int(counts[m.encode()]) for m in live if m != self.holder and m.encode() in counts
        } - {self.partition_count}
        if others:
            if self._refused_count != min(others):
                self._refused_count = min(others)
                log_event(
                    log,
                    "scheduler.partitions_mismatch",
                    "not leading: a live runscheduler runs with SCHEDULER_PARTITIONS=%s, "
                    "this one with %s; stop every runscheduler before changing it",
                    min(others),
                    self.partition_count,
                    level=logging.ERROR,
                    theirs=min(others),
                    ours=self.partition_count,
                )
            return None
        self._refused_count = None
        return holders, live

    def step_down(self, reason: str) -> None:
        # Also the partitions whose lease a failed renewal already marked lost (it raises
        # after clearing the epoch): their engine and alert thread must go too, and the
        # step-down be logged.
        for leader in self.partitions:
            if leader.held or leader.engine is not None:
                leader.step_down(reason)

    # --- one turn ----------------------------------------------------------------------------
    def lead_once(self) -> float:
        """One iteration of every partition held; how long to sleep (seconds). An error
        leaves the partition where it happened (raised with P = 1, where the caller steps
        down and backs off; with more, that partition alone steps down, see `_failed`)."""
        sleeps = []
        self._drop_lost()
        for leader in self.held():
            if self.partition_count == 1:
                sleeps.append(leader.lead_once())
                leader.error_backoff = 0.0
                continue
            try:
                sleeps.append(leader.lead_once())
                leader.error_backoff = 0.0
            except STEP_DOWN_ERRORS as exc:
                leader.step_down(f"{exc.__class__.__name__}: {exc}")
            except Exception as exc:
                self._failed(leader, exc, wait=None)
        self.iterations += 1
        return min(sleeps, default=self.standby_poll)

    def _failed(self, leader: PartitionLeader, exc: Exception, wait) -> None:
        log_event(
            log,
            "leader.error",
            "unexpected error in the scheduler loop (partition %s)",
            leader.partition,
            level=logging.ERROR,
            exc_info=True,
            error=exc.__class__.__name__,
            partition=leader.partition,
        )
        leader.step_down(f"unexpected {exc.__class__.__name__}: {exc}")
        leader.error_backoff = min(max(leader.error_backoff * 2, 1.0), MAX_ERROR_BACKOFF_SECONDS)
        log_event(
            log,
            "leader.backoff",
            "backing off %.0fs before trying to lead partition %s again",
            leader.error_backoff,
            leader.partition,
            level=logging.WARNING,
            seconds=leader.error_backoff,
            partition=leader.partition,
        )
        if wait is not None:  # P = 1: the process has nothing else to do meanwhile
            wait(leader.error_backoff)
        else:
            leader.blocked_until = time.monotonic() + leader.error_backoff
            # Counted live, it would look the least loaded and be handed partitions it
            # cannot take (this one blocked, maybe all of them: a host without its broker).
            self._unable(leader.error_backoff)

    def wait(self, seconds: float) -> None:
        """Sleep until `seconds` pass or something wakes one of the partitions held."""
        if self.partition_count == 1:
            self._wait_one(seconds)
        else:
            self._wait_partitions(seconds)

    def _wait_one(self, seconds: float) -> None:
        if seconds < 0.002:
            return
        key = wake_key(0)
        popped = self.client.blpop([key], timeout=seconds)
        if popped is None:
            return
        pipe = self.client.pipeline(transaction=True)  # one key: one slot on a cluster too
        pipe.lrange(key, 0, -1)
        pipe.delete(key)
        for raw in [popped[1], *pipe.execute()[0]]:
            self._handle_wake(raw.decode())

    def _wait_partitions(self, seconds: float) -> None:
        """The sleep cut into fleet polls, each followed by a look at the fleet, so that a
        dead process's partitions are taken within a poll of their leases expiring even by
        a process that leads others and has nothing due. It blocks on one partition's wake
        list and drains the others' at each poll (one command per key: each partition's
        keys are on their own Redis Cluster slot)."""
        deadline = time.monotonic() + seconds
        while True:
            remaining = min(deadline - time.monotonic(), self.fleet_poll)
            if remaining < 0.002:
                return
            held = self.held()
            if not held:  # nothing to be woken for: do not take another process's wakes
                time.sleep(remaining)
            else:
                keys = [wake_key(p.partition) for p in held]
                poll_ends = time.monotonic() + remaining
                woken: list[bytes] = []
                try:
                    popped = self.client.blpop(keys[:1], timeout=remaining)
                    woken += [popped[1]] if popped else []
                    pipe = self.client.pipeline(transaction=False)
                    for key in keys:
                        pipe.lpop(key, 1000)
                    woken += [raw for batch in pipe.execute() if batch for raw in batch]
                except REDIS_ERRORS as exc:
                    # One node of a cluster away: lead at once, each partition finding out
                    # by its own lease whether its keys are still there (see try_lead).
                    # What was popped before the failure is handled first, not dropped.
                    for raw in woken:
                        self._handle_wake(raw.decode())
                    self._fleet_unreadable(exc)
                    time.sleep(max(poll_ends - time.monotonic(), 0))  # not a busy loop
                    return
                if woken:
                    for raw in woken:
                        self._handle_wake(raw.decode())
                    return
            self._rebalance_unless_unreadable()
            if self.held() != held:
                return  # a partition taken or given up: lead at once

    def _handle_wake(self, message: str) -> None:
        kind, _, rest = message.partition(":")
        if kind != "release":
            return
        try:
            tenant_id, _, job_id = rest.partition(":")
            engine = self.partitions[tenant_partition(int(tenant_id))].engine
            if engine is not None:
                engine.release_held(int(tenant_id), int(job_id))
        except ValueError:  # a malformed message: nothing to release (the relay covers it)
            log.warning("ignored a malformed wake-up %r", message)

    # --- the process -----------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        self._check_clock_skew()
        log_event(
            log,
            "scheduler.started",
            "runscheduler %s started with %s partition(s); waiting for a lease",
            self.holder,
            self.partition_count,
            holder=self.holder,
            partitions=self.partition_count,
        )
        while not stop.is_set():
            self.run_once(stop)
        # Out of the live count first: seen for one more second, this process would look
        # the least loaded, and the others would give up the partitions they take from it.
        with contextlib.suppress(*REDIS_ERRORS):
            self.client.zrem(schedulers_seen_key(), self.holder)
        for leader in self.partitions:
            if leader.alerting is not None:
                leader.alerting.stop(wait_seconds=5.0)
            if leader.held:
                leader.release()
                log_event(
                    log,
                    "leader.lease_released",
                    "released the lease of partition %s on shutdown",
                    leader.partition,
                    partition=leader.partition,
                )

    def _check_clock_skew(self) -> None:
        """Only advice: PostgreSQL away at start-up must not end the process, whose loop
        waits for it as for any outage."""
        try:
            check_clock_skew(self.clock)
        except Exception as exc:
            reason = f"{exc.__class__.__name__}: {' '.join(str(exc).split())}"  # one line
            log_event(
                log,
                "scheduler.clock_unchecked",
                "could not compare this host's clock with PostgreSQL's (%s); going on",
                reason,
                level=logging.WARNING,
                error=reason,
            )

    def run_once(self, stop: threading.Event) -> None:
        """One turn of the process loop: lead (or try to), and survive whatever happens."""
        announce(self.client, self.holder, self.lease_seconds, partitions=self.partition_count)
        try:
            if not self.try_lead():
                stop.wait(self.standby_poll if self.partition_count == 1 else self.fleet_poll)
                return
            self.wait(self.lead_once())
        except STEP_DOWN_ERRORS as exc:
            self.step_down(f"{exc.__class__.__name__}: {exc}")
            stop.wait(self.standby_poll)
        except Exception as exc:  # a bug or bad data we did not foresee: never exit
            if self.partition_count == 1:
                self._failed(self.partitions[0], exc, wait=stop.wait)
                return
            for leader in self.held():  # outside any one partition's work (see lead_once)
                self._failed(leader, exc, wait=None)
            stop.wait(self.standby_poll)


def check_clock_skew(clock: Clock) -> float:
    """Warn when this host's clock and PostgreSQL's disagree: the leader's clock decides
    due-ness, so a skewed leader fires early or late."""
    with connection.cursor() as cursor:
        before = time.time()
        cursor.execute("SELECT extract(epoch FROM clock_timestamp())")
        db_now = float(cursor.fetchone()[0])
        after = time.time()
    skew = clock.now().timestamp() - db_now - (after - before) / 2
    if abs(skew) > settings.SCHEDULER_CLOCK_SKEW_WARN_SECONDS:
        log_event(
            log,
            "scheduler.clock_skew",
            "clock skew: this host is %.3fs %s PostgreSQL",
            abs(skew),
            "ahead of" if skew > 0 else "behind",
            level=logging.WARNING,
            skew_seconds=round(skew, 3),
        )
    return skew
