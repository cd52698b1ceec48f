"""Which waiting runs go next: deficit round robin over tenants, pure arithmetic.

Each tenant with waiting runs is on a ring. A visit adds the tenant's quantum (its weight)
to its deficit, and the tenant then sends runs while its deficit covers them (one run
costs 1), it has free slots under its quota, and the take's budget (the broker's room)
lasts. So, over any stretch in which
tenants stay backlogged, each one's share of admissions is its share of the weights;
nobody with waiting runs and a free slot is skipped for more than one round (no
starvation); and credit does not pile up: a tenant that empties its queue, or cannot send
because it is at its quota, drops its deficit, so an idle tenant returns with at most one
quantum (no burst).

Within a tenant, runs go by priority (high, normal, low), then oldest due first, then the
order they arrived in.
"""

from __future__ import annotations

import contextlib
import heapq
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any

PRIORITY_RANK = {"high": 0, "normal": 1, "low": 2}

# A waiting run: (priority rank, due, arrival number, item). Tuples compare in C; the
# arrival number is unique, so the item itself is never compared. (A dataclass with
# order=True compared in Python: pushing and taking 10,000 runs cost about 200 ms of the
# leader's fire, more than publishing them.)
_Waiting = tuple[int, float, int, Any]
_ITEM = 3
_DUE = 1


class FairQueue:
    """Runs waiting for admission, per tenant, and the round robin that picks among them."""

    def __init__(self) -> None:
        self._queues: dict[Hashable, list[_Waiting]] = {}
        self._deficit: dict[Hashable, int] = {}
        self._ring: deque[Hashable] = deque()
        self._seq = 0

    # --- what waits --------------------------------------------------------------------
    def push(self, tenant: Hashable, item: Any, *, priority: str, due: float) -> None:
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = []
            self._ring.append(tenant)
            self._deficit[tenant] = 0
        self._seq += 1
        heapq.heappush(queue, (PRIORITY_RANK.get(priority, 1), due, self._seq, item))

    def waiting(self, tenant: Hashable) -> int:
        return len(self._queues.get(tenant, ()))

    def tenants(self) -> list[Hashable]:
        return list(self._ring)

    def items(self, tenant: Hashable) -> list[Any]:
        return [w[_ITEM] for w in self._queues.get(tenant, ())]

    def oldest_due(self, tenant: Hashable) -> float | None:
        queue = self._queues.get(tenant)
        return min(w[_DUE] for w in queue) if queue else None

    def remove(self, tenant: Hashable, keep: Callable[[Any], bool]) -> list[Any]:
        """Drop the tenant's waiting items for which `keep` is false; returns them."""
        queue = self._queues.get(tenant)
        if not queue:
            return []
        dropped = [w[_ITEM] for w in queue if not keep(w[_ITEM])]
        if dropped:
            rest = [w for w in queue if keep(w[_ITEM])]
            heapq.heapify(rest)
            self._queues[tenant] = rest
            if not rest:
                self._forget(tenant)
        return dropped

    def drain(self) -> list[Any]:
        """Everything waiting, the queue left empty."""
        items = [w[_ITEM] for queue in self._queues.values() for w in queue]
        self._queues.clear()
        self._deficit.clear()
        self._ring.clear()
        return items

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    # --- what goes -----------------------------------------------------------------------
    def take(
        self,
        budget: int | None,
        free: Callable[[Hashable], int],
        weight: Callable[[Hashable], int],
    ) -> list[tuple[Hashable, Any]]:
        """Up to `budget` items (None: no bound), each tenant at most `free(tenant)` of
        them, chosen by deficit round robin with quantum `weight(tenant)` (at least 1)."""
        slots = {t: max(free(t), 0) for t in self._ring}
        able = [t for t in self._ring if slots[t] > 0]
        for tenant in self._ring:
            if slots[tenant] == 0:
                self._deficit[tenant] = 0  # at its quota: it earns no credit meanwhile
        if not able:
            return []
        sendable = sum(min(slots[t], len(self._queues[t])) for t in able)
        if (
            len(able) == len(self._ring)
            and sendable == len(self)
            and (budget is None or budget >= sendable)
        ):
            return self._take_all()  # what the rounds below would end with, item by item
        room = sendable if budget is None else min(budget, sendable)
        weights = {t: max(int(weight(t)), 1) for t in able}
        taken: list[tuple[Hashable, Any]] = []
        idle_turns = 0
        while room > 0 and self._ring and idle_turns < len(self._ring):
            tenant = self._ring[0]
            queue = self._queues[tenant]
            if slots.get(tenant, 0) <= 0:
                self._deficit[tenant] = 0
                self._ring.rotate(-1)
                idle_turns += 1
                continue
            idle_turns = 0
            # A fixed quantum (the weight), whatever this take's room: a visit the last
            # take cut short goes on with the credit it had, so shares hold as room varies.
            if self._deficit[tenant] < 1:
                self._deficit[tenant] += weights[tenant]
            while self._deficit[tenant] >= 1 and queue and room > 0 and slots[tenant] > 0:
                taken.append((tenant, heapq.heappop(queue)[_ITEM]))
                self._deficit[tenant] -= 1
                slots[tenant] -= 1
                room -= 1
            if not queue:
                self._forget(tenant)
            elif slots[tenant] <= 0:
                self._deficit[tenant] = 0
                self._ring.rotate(-1)
            elif self._deficit[tenant] < 1:
                self._ring.rotate(-1)
            # else: the budget ran out mid-visit; the tenant goes on first next time
        return taken

    def _take_all(self) -> list[tuple[Hashable, Any]]:
        """Everything, when every tenant has a slot for each of its items and the budget
        covers them all: the rounds would empty every queue (and so forget every tenant's
        deficit) whatever their order, so the items go in one pass, in priority order
        within each tenant."""
        taken = [(tenant, w[_ITEM]) for tenant in self._ring for w in sorted(self._queues[tenant])]
        self._queues.clear()
        self._deficit.clear()
        self._ring.clear()
        return taken

    def _forget(self, tenant: Hashable) -> None:
        self._queues.pop(tenant, None)
        self._deficit.pop(tenant, None)
        with contextlib.suppress(ValueError):
            self._ring.remove(tenant)


def shares(taken: Iterable[tuple[Hashable, Any]]) -> dict[Hashable, int]:
    """How many of the taken items each tenant got (for tests and benchmarks)."""
    counts: dict[Hashable, int] = {}
    for tenant, _ in taken:
        counts[tenant] = counts.get(tenant, 0) + 1
    return counts
