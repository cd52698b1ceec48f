import time
import uuid

from django.conf import settings
from django.core.management.base import BaseCommand

from beat.amqp_writes import leader_writes
from beat.pending import PendingRuns
from beat.rebuild import IndexRebuild
from core import index
from core.keys import partition_count, rebuild_state_key
from core.redis import get_redis


class Command(BaseCommand):
    help = (
        "Rebuild the Redis time indexes from PostgreSQL and drop stale members. Safe while "
        "schedulers run: it only adds or lowers scores, and removes a member only if its job "
        "is gone or unschedulable."
    )

    def handle(self, *args, **opts) -> None:
        client = get_redis()
        for partition in range(partition_count()):  # each partition's index on its own
            self._rebuild(client, partition)

    def _rebuild(self, client, partition: int) -> None:
        lost = not index.is_built(client, partition)
        rebuild = IndexRebuild(
            client,
            leader_writes(client, lock_key="", token=None, partition=partition),
            state_key=f"{rebuild_state_key(partition)}:command:{uuid.uuid4().hex}",
            messages=PendingRuns(
                shard_count=settings.SCHEDULER_SHARD_COUNT, origin="rebuild_index"
            ),
        )
        started = time.monotonic()
        rebuild.start(lost=lost, prune=True)
        progress = rebuild.run_to_end()
        tenants = len(rebuild.tenants.all())
        where = f"partition {partition}: " if partition_count() > 1 else ""
        self.stdout.write(
            f"{where}indexed {progress.jobs} jobs and {progress.runs} waiting runs of "
            f"{tenants} tenants, removed {progress.pruned} stale members"
            + (f", published {progress.republished} queued runs again" if lost else "")
            + f" in {time.monotonic() - started:.2f}s"
        )
