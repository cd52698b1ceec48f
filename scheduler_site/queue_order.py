"""The order in which a worker polls its run queues: priorities strictly (high before
normal before low), and the shards of one priority in turn.

Kombu's Redis transport asks BRPOP for the queues in the order its queue cycle gives and
takes from the first non-empty one. Its `priority` cycle keeps one fixed order, which
makes the shards of one priority strict too: while a flooding tenant's shard has
messages, a queue listed after it never drains (with fair admission the broker holds few
messages, but the flooder's share of them is always there). Its `round_robin` cycle
rotates every queue, which loses the priorities. This one sorts by priority and, within a
priority, moves the queue it just took from to the back.
"""

from __future__ import annotations

from kombu.utils.scheduling import round_robin_cycle

RANK = {"high": 0, "normal": 1, "low": 2}


def _rank(queue: str) -> int:
    parts = queue.split(".")
    return RANK.get(parts[1], 1) if len(parts) == 3 and parts[0] == "runs" else 1


class PriorityThenRoundRobin(round_robin_cycle):
    """`queue_order_strategy` for the Redis transport (a dotted path kombu imports)."""

    def consume(self, n: int) -> list[str]:
        # A stable sort keeps the rotation within each priority.
        return sorted(self.items, key=_rank)[:n]
