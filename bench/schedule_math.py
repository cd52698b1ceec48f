"""Microseconds per `next_slot` call, far from and near a DST transition (pure Python, no
services): the figures ADR 0004 quotes."""

from __future__ import annotations

import statistics
import timeit
from datetime import UTC, datetime

from jobs.schedules import CronSchedule, next_slot

CASES = [
    ("fast", "*/5 * * * *", "Europe/Berlin", datetime(2026, 6, 10, 12, 2, tzinfo=UTC)),
    ("fast", "0 9 * * 1-5", "Europe/Berlin", datetime(2026, 6, 10, 12, 2, tzinfo=UTC)),
    ("fast", "0 9 * * 1-5", "UTC", datetime(2026, 6, 10, 12, 2, tzinfo=UTC)),
    ("slow", "*/5 * * * *", "Europe/Berlin", datetime(2026, 3, 29, 0, 40, tzinfo=UTC)),
    ("slow", "30 2 * * *", "Europe/Berlin", datetime(2026, 3, 28, 23, 0, tzinfo=UTC)),
    ("slow", "30 1 * * *", "America/New_York", datetime(2026, 11, 1, 4, 0, tzinfo=UTC)),
]


def run(number: int = 20_000, repeats: int = 3) -> list[dict]:
    results = []
    for path, expression, zone, after in CASES:
        schedule = CronSchedule(expression, zone)
        next_slot(schedule, after)  # warm the zone's transition table
        best = min(
            timeit.repeat(
                lambda s=schedule, a=after: next_slot(s, a), number=number, repeat=repeats
            )
        )
        micros = best / number * 1e6
        results.append({"path": path, "cron": expression, "zone": zone, "us": round(micros, 1)})
        print(f"{path:4}  {expression:14} {zone:18} {micros:6.1f} µs per next_slot", flush=True)
    fast = [r["us"] for r in results if r["path"] == "fast"]
    slow = [r["us"] for r in results if r["path"] == "slow"]
    print(f"median fast {statistics.median(fast):.1f} µs, slow {statistics.median(slow):.1f} µs")
    return results
