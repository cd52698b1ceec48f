import signal
import threading

from django.core.management.base import BaseCommand

from beat.loop import SchedulerProcess
from core.clock import SystemClock
from core.gc_pause import freeze_startup_objects
from core.redis import get_redis


class Command(BaseCommand):
    help = "Run a scheduler process: leader when it holds the lease, standby otherwise."

    def handle(self, *args, **opts) -> None:
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        process = SchedulerProcess(client=get_redis(), clock=SystemClock())
        freeze_startup_objects()
        process.run(stop)
