from django.core.management.base import BaseCommand

from beat.rebuild import rebuild_index
from core.redis import get_redis


class Command(BaseCommand):
    help = "Rebuild the Redis time indexes from PostgreSQL (safe while schedulers run)."

    def handle(self, *args, **opts) -> None:
        result = rebuild_index(get_redis())
        self.stdout.write(
            f"indexed {result.jobs} jobs and {result.runs} waiting runs "
            f"of {result.tenants} tenants in {result.seconds:.2f}s"
        )
