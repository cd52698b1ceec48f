import json

from django.core.management.base import BaseCommand, CommandParser

from beat.status import scheduler_status
from core.clock import SystemClock
from core.redis import get_redis


class Command(BaseCommand):
    help = "Who leads, the lease epoch, the index size and how much due work is unfired."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **opts) -> None:
        status = scheduler_status(get_redis(), SystemClock().now())
        if opts["json"]:
            self.stdout.write(json.dumps(status))
            return
        for key, value in status.items():
            self.stdout.write(f"{key:28} {value if value is not None else '-'}")
