"""Microseconds per `next_slot` call, far from and near a DST transition (pure Python, no
services): the figures ADR 0004 quotes. Then the same for each schedule extension (day rules
L/W/#, the six-field form, unions, bounds, exclusions, one-offs) far from a transition, and
for a few of them next to a fall-back transition (where the DST slow path runs)."""

from __future__ import annotations

import statistics
import timeit
from datetime import UTC, date, datetime

from jobs.schedules import (
    CronSchedule,
    bounded,
    excluding,
    exclusion_calendar,
    interval_schedule,
    next_slot,
    one_off,
    union,
)

CASES = [
    ("fast", "*/5 * * * *", "Europe/Berlin", datetime(2026, 6, 10, 12, 2, tzinfo=UTC)),
    ("fast", "0 9 * * 1-5", "Europe/Berlin", datetime(2026, 6, 10, 12, 2, tzinfo=UTC)),
    ("fast", "0 9 * * 1-5", "UTC", datetime(2026, 6, 10, 12, 2, tzinfo=UTC)),
    ("slow", "*/5 * * * *", "Europe/Berlin", datetime(2026, 3, 29, 0, 40, tzinfo=UTC)),
    ("slow", "30 2 * * *", "Europe/Berlin", datetime(2026, 3, 28, 23, 0, tzinfo=UTC)),
    ("slow", "30 1 * * *", "America/New_York", datetime(2026, 11, 1, 4, 0, tzinfo=UTC)),
]

JUNE = datetime(2026, 6, 10, 12, 2, tzinfo=UTC)
FALL_BACK = datetime(2026, 10, 25, 0, 59, 50, tzinfo=UTC)  # Berlin repeats 02:00-03:00 next


def _berlin(expression: str) -> CronSchedule:
    return CronSchedule(expression, "Europe/Berlin")


# (label, schedule, after): each extension far from a transition, next to its plain peer
EXTENSIONS = [
    ("plain 0 9 1 * *", _berlin("0 9 1 * *"), JUNE),
    ("L     0 9 L * *", _berlin("0 9 L * *"), JUNE),
    ("L-n   0 9 L-3 * *", _berlin("0 9 L-3 * *"), JUNE),
    ("W     0 9 15W * *", _berlin("0 9 15W * *"), JUNE),
    ("LW    0 9 LW * *", _berlin("0 9 LW * *"), JUNE),
    ("#     0 9 * * 1#2", _berlin("0 9 * * 1#2"), JUNE),
    ("dL    0 9 * * 5L", _berlin("0 9 * * 5L"), JUNE),
    ("#5    0 9 * * 5#5", _berlin("0 9 * * 5#5"), JUNE),
    ("OR    0 9 13 * 5#2", _berlin("0 9 13 * 5#2"), JUNE),
    ("sec   */15 * * * * *", _berlin("*/15 * * * * *"), JUNE),
    ("sec   30 0 9 * * 1-5", _berlin("30 0 9 * * 1-5"), JUNE),
    (
        "union cron+cron+interval",
        union(
            [
                _berlin("0 9 * * 1-5"),
                CronSchedule("0 3 * * *", "America/New_York"),
                interval_schedule(7200, anchor=JUNE, minimum_seconds=60),
            ]
        ),
        JUNE,
    ),
    (
        "bounded 0 9 * * 1-5",
        bounded(_berlin("0 9 * * 1-5"), start=JUNE, end=datetime(2027, 1, 1, tzinfo=UTC)),
        JUNE,
    ),
    (
        "excluding 0 9 * * 1-5",
        excluding(
            _berlin("0 9 * * 1-5"),
            exclusion_calendar(
                "holidays",
                dates=[date(2026, m, d) for m in range(1, 13) for d in (1, 15)],
            ),
        ),
        JUNE,
    ),
    ("one-off", one_off(datetime(2026, 12, 24, 18), "Europe/Berlin"), JUNE),
    # the DST slow path enumerates every matching wall time the shifted hour could hold:
    # per second, that is thousands (the known cost of sub-minute expressions there)
    ("slow  30 2 L-6 10 * (fall-back)", _berlin("30 2 L-6 10 *"), FALL_BACK),
    ("slow  */15 * * * * * (fall-back)", _berlin("*/15 * * * * *"), FALL_BACK),
    ("slow  * * * * * * (fall-back)", _berlin("* * * * * *"), FALL_BACK),
]


def _time(schedule, after, number: int, repeats: int, budget: float | None = None) -> float:
    next_slot(schedule, after)  # warm the zone's transition table and the caches
    if budget is not None:  # a slow case: fewer calls, so the whole run stays short
        once = timeit.timeit(lambda: next_slot(schedule, after), number=1)
        number = max(5, min(number, int(budget / max(once, 1e-9))))
    best = min(
        timeit.repeat(lambda s=schedule, a=after: next_slot(s, a), number=number, repeat=repeats)
    )
    return best / number * 1e6


def run(number: int = 20_000, repeats: int = 3) -> list[dict]:
    results = []
    for path, expression, zone, after in CASES:
        micros = _time(CronSchedule(expression, zone), after, number, repeats)
        results.append({"path": path, "cron": expression, "zone": zone, "us": round(micros, 1)})
        print(f"{path:4}  {expression:14} {zone:18} {micros:6.1f} µs per next_slot", flush=True)
    fast = [r["us"] for r in results if r["path"] == "fast"]
    slow = [r["us"] for r in results if r["path"] == "slow"]
    print(f"median fast {statistics.median(fast):.1f} µs, slow {statistics.median(slow):.1f} µs")
    for label, schedule, after in EXTENSIONS:
        micros = _time(schedule, after, number, repeats, budget=number * 20e-6)
        results.append({"path": "ext", "cron": label, "zone": "", "us": round(micros, 1)})
        print(f"ext   {label:34} {micros:8.1f} µs per next_slot", flush=True)
    return results
