"""The runscheduler process: a standby until it takes the lease, then the leader loop.

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

import logging
import threading
import time

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from core import index
from core.clock import Clock
from core.keys import faults_key, wake_key
from core.logs import log_event

from .alerting import Alerting
from .amqp_writes import leader_writes
from .engine import Engine, EngineConfig
from .lease import Lease, LeaseLost, process_identity
from .metrics import announce, iteration_done
from .session import bounded_leader_session
from .store import FencingError

log = logging.getLogger("beat.loop")

STEP_DOWN_ERRORS = (LeaseLost, FencingError, redis.RedisError, OperationalError, InterfaceError)
MAX_ERROR_BACKOFF_SECONDS = 30.0


class SchedulerProcess:
    def __init__(
        self,
        *,
        client: redis.Redis,
        clock: Clock,
        config: EngineConfig | None = None,
        lease_seconds: float | None = None,
        holder: str | None = None,
    ) -> None:
        self.client = client
        self.clock = clock
        self.config = config or EngineConfig.from_settings()
        self.holder = holder or process_identity()
        lease_seconds = lease_seconds or settings.SCHEDULER_LEASE_SECONDS
        self.lease = Lease(client, holder=self.holder, expire_seconds=int(lease_seconds))
        # Renew well inside the lease; this also caps how long an idle leader sleeps.
        self.max_sleep = self.lease.expire_seconds / 4
        self.standby_poll = min(0.2, self.max_sleep)
        self.engine: Engine | None = None
        self.alerting: Alerting | None = None  # the leader's alert sweep and delivery thread
        self.iterations = 0
        self.error_backoff = 0.0

    # --- leadership ------------------------------------------------------------------------
    def try_lead(self) -> bool:
        if self.lease.held:
            return True
        if not self.lease.try_acquire():
            return False
        bounded_leader_session()
        self.engine = Engine(
            client=self.client,
            clock=self.clock,
            epoch=self.lease.epoch,
            config=self.config,
            origin=self.holder,
            writes=leader_writes(self.client, self.lease.lock_key, self.lease.token),
            checkpoint=self.lease.renew_if_due,
        )
        self.engine.faults.adopt(self.client, faults_key())
        self.ensure_index()
        self.engine.relay(force=True)
        self.alerting = Alerting(self.engine)
        self.alerting.start()
        return True

    def step_down(self, reason: str) -> None:
        self.lease.step_down(reason)
        if self.alerting is not None:
            self.alerting.stop()  # it claims nothing more: its claims are fenced anyway
            self.alerting = None
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
        if not index.is_built(self.client):
            engine.start_rebuild(lost=True)

    # --- one leader iteration ------------------------------------------------------------
    def lead_once(self) -> float:
        """Do everything due now; return how long to sleep (seconds)."""
        engine = self.engine
        started = time.monotonic()
        step = self._step
        step("the iteration's start")
        self.lease.renew()
        bounded_leader_session()
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
        self.iterations += 1
        busy = (
            processed >= self.config.materialise_batch
            or engine.materialise_interrupted
            or engine.fire_limited
        )
        if busy or not rebuilt or engine.sweeps_running():
            return 0.0  # more work waits: go on after renewing
        # Runs waiting for admission go as slots free up: an ended attempt wakes the
        # leader, and it looks again at least every poll interval (a lost wake-up).
        cap = self.max_sleep
        if engine.runs_waiting_for_admission():
            cap = min(cap, self.config.admission.poll_seconds)
        next_due = engine.next_due()
        if next_due is None:
            return cap
        return max(0.0, min(cap, next_due - self.clock.now().timestamp()))

    def _step(self, name: str) -> None:
        self.lease.step = name

    def wait(self, seconds: float) -> None:
        """Sleep until `seconds` pass or something wakes the leader."""
        if seconds < 0.002:
            return
        popped = self.client.blpop([wake_key()], timeout=seconds)
        if popped is None:
            return
        messages = [popped[1], *self._drain_wake()]
        for raw in messages:
            self._handle_wake(raw.decode())

    def _drain_wake(self) -> list[bytes]:
        pipe = self.client.pipeline()
        pipe.lrange(wake_key(), 0, -1)
        pipe.delete(wake_key())
        return pipe.execute()[0]

    def _handle_wake(self, message: str) -> None:
        kind, _, rest = message.partition(":")
        if kind == "release" and self.engine is not None:
            tenant_id, _, job_id = rest.partition(":")
            self.engine.release_held(int(tenant_id), int(job_id))

    # --- the process -----------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        check_clock_skew(self.clock)
        log_event(
            log,
            "scheduler.started",
            "runscheduler %s started; waiting for the lease",
            self.holder,
            holder=self.holder,
        )
        while not stop.is_set():
            self.run_once(stop)
        if self.alerting is not None:
            self.alerting.stop(wait_seconds=5.0)
        if self.lease.held:
            self.lease.release()
            log_event(log, "leader.lease_released", "released the lease on shutdown")

    def run_once(self, stop: threading.Event) -> None:
        """One turn of the process loop: lead (or try to), and survive whatever happens."""
        announce(self.client, self.holder, self.lease.expire_seconds)
        try:
            if not self.try_lead():
                stop.wait(self.standby_poll)
                return
            self.wait(self.lead_once())
            self.error_backoff = 0.0
        except STEP_DOWN_ERRORS as exc:
            self.step_down(f"{exc.__class__.__name__}: {exc}")
            stop.wait(self.standby_poll)
        except Exception as exc:  # a bug or bad data we did not foresee: never exit
            log_event(
                log,
                "leader.error",
                "unexpected error in the scheduler loop",
                level=logging.ERROR,
                exc_info=True,
                error=exc.__class__.__name__,
            )
            self.step_down(f"unexpected {exc.__class__.__name__}: {exc}")
            self.error_backoff = min(max(self.error_backoff * 2, 1.0), MAX_ERROR_BACKOFF_SECONDS)
            log_event(
                log,
                "leader.backoff",
                "backing off %.0fs before trying to lead again",
                self.error_backoff,
                level=logging.WARNING,
                seconds=self.error_backoff,
            )
            stop.wait(self.error_backoff)


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
