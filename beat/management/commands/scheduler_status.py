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
        tenants = status.pop("tenants")
        status.pop("admission")
        partitions = status.pop("partitions")
        for key, value in status.items():
            self.stdout.write(f"{key:28} {value if value is not None else '-'}")
        if len(partitions) > 1:
            self.stdout.write("")
            self.stdout.write(
                f"{'partition':>9} {'leader':28} {'epoch':>7} {'index':>9} {'runs':>7} built"
            )
            for p in partitions:
                self.stdout.write(
                    f"{p['partition']:>9} {p['leader'] or '-':28} {p['epoch'] or '-':>7}"
                    f" {p['index_size']:>9} {p['runs_index_size']:>7}"
                    f" {'yes' if p['index_built'] else 'no'}"
                    + (" (rebuilding)" if p["index_rebuilding"] else "")
                )
        self.stdout.write("")
        self.stdout.write(
            f"{'tenant':24} {'in flight':>13} {'waiting':>8} {'oldest wait':>11}"
            f" {'weight':>6} {'fire lag p50/p99':>17} {'start lag p50/p99':>17}"
        )
        for row in tenants:
            if row.get("unreadable"):
                self.stdout.write(f"{row['tenant']:24} (its schema cannot be read)")
                continue
            self.stdout.write(
                f"{row['tenant']:24} {row['in_flight']:>6}/{row['max_concurrency']:<6}"
                f" {row['waiting']:>8} {_seconds(row['oldest_wait_seconds']):>11}"
                f" {row['weight']:>6} {_pair(row['fire_lag_p50'], row['fire_lag_p99']):>17}"
                f" {_pair(row['start_lag_p50'], row['start_lag_p99']):>17}"
            )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _pair(p50: float | None, p99: float | None) -> str:
    return f"{_seconds(p50)}/{_seconds(p99)}"
