import signal
import threading

from django.core.management.base import BaseCommand

from beat.lease import log_redis_unreachable
from beat.loop import SchedulerProcess
from core.clock import SystemClock
from core.gc_pause import freeze_startup_objects
from core.pgbackend.base import require_session_connection
from core.redis import REDIS_ERRORS, get_redis


class Command(BaseCommand):
    help = "Run a scheduler process: leader when it holds the lease, standby otherwise."

    def handle(self, *args, **opts) -> None:
        # Session advisory locks fence the leader, and a new leader ends a frozen one's
        # session by its pid: neither survives a transaction-pooling PgBouncer.
        require_session_connection("runscheduler")
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        client = None
        while client is None:  # a cluster client reads the slot map as it is made
            try:
                client = get_redis()
            except REDIS_ERRORS as exc:
                log_redis_unreachable(exc)
                if stop.wait(1.0):
                    return
        process = SchedulerProcess(client=client, clock=SystemClock())
        freeze_startup_objects()
        process.run(stop)
