"""How a runscheduler process decides which partitions to take and which to give up.

Pure arithmetic over what every process can read from Redis: the live processes (those
seen looking within the last second) and who holds each partition's lease. The Redis
lock decides who actually holds a partition and the fencing epoch stops whoever noticed
late, so this plan only has to converge, never to be exact: a process whose view is stale
at worst takes nothing this turn or gives one partition up that it takes back later. See
docs/adr/0020.

The rules, applied by each process to itself each turn:
- its share is `ceil(P / live processes)`;
- it takes a free partition while it holds fewer than its share and no live process holds
  fewer than it does (the least loaded move first, so partitions spread evenly);
- a partition free for longer than `orphan_seconds` is taken by anyone (a process that
  died may still be counted as live for a moment: its partitions must not wait for that);
- once every partition is led, it gives up one partition per turn, its highest, when it
  holds more than its share or two more than the least loaded live process (which then
  takes it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    take: tuple[int, ...]  # free partitions to try, in order (each try may lose the race)
    release: int | None  # the partition to give up this turn


def share(partitions: int, live: int) -> int:
    """The most partitions one of `live` processes should lead."""
    return math.ceil(partitions / max(live, 1))


def plan(
    *,
    me: str,
    partitions: int,
    live: Sequence[str],
    holders: Mapping[int, str | None],
    free_for: Mapping[int, float],
    orphan_seconds: float,
    blocked: frozenset[int] = frozenset(),
) -> Plan:
    """`holders`: partition -> the process holding its lease (None: free); `free_for`: how
    long each free partition has been seen free; `blocked`: partitions this process must
    not take now (its own back-off after an error there)."""
    alive = set(live) | {me}
    held_by: dict[str, list[int]] = {name: [] for name in alive}
    for partition in range(partitions):
        holder = holders.get(partition)
        if holder in held_by:
            held_by[holder].append(partition)
    mine = sorted(held_by[me])
    cap = share(partitions, len(alive))
    least_other = min((len(v) for k, v in held_by.items() if k != me), default=math.inf)

    free = [p for p in range(partitions) if holders.get(p) is None and p not in blocked]
    release = None
    # Giving up waits until nothing is free: while partitions are free they are being
    # taken (an orphan by anyone, over its share), and a release then would only free one
    # more, which the next orphan rule hands to someone over its share again.
    settled = not any(holders.get(p) is None for p in range(partitions))
    if settled and mine and (len(mine) > cap or len(mine) - least_other >= 2):
        release = mine[-1]
    take: list[int] = []
    if release is None:
        count = len(mine)
        for partition in free:
            orphaned = free_for.get(partition, 0.0) >= orphan_seconds
            if orphaned or (count < cap and count <= least_other):
                take.append(partition)
                count += 1
    return Plan(take=tuple(take), release=release)
