"""The worker's queue order: priorities strict, the shards of one priority in turn."""

from __future__ import annotations

from kombu.utils.scheduling import cycle_by_name

from scheduler_site.celery import run_queue_names
from scheduler_site.queue_order import PriorityThenRoundRobin

QUEUES = run_queue_names(4)


def _cycle() -> PriorityThenRoundRobin:
    cycle = cycle_by_name("scheduler_site.queue_order:PriorityThenRoundRobin")()
    cycle.update(list(QUEUES))
    return cycle


def test_kombu_finds_the_cycle_by_its_dotted_path():
    assert isinstance(_cycle(), PriorityThenRoundRobin)


def test_high_before_normal_before_low_whatever_was_taken_last():
    cycle = _cycle()
    for taken in ("runs.high.2", "runs.low.0", "runs.normal.1"):
        cycle.rotate(taken)
        order = cycle.consume(len(QUEUES))
        ranks = [q.split(".")[1] for q in order]
        assert ranks == ["high"] * 4 + ["normal"] * 4 + ["low"] * 4


def test_the_shards_of_one_priority_take_turns():
    """A flooded shard that is always non-empty does not keep the next one waiting: after
    a take from it, it goes to the back of its priority."""
    cycle = _cycle()
    firsts = []
    for _ in range(8):
        first_normal = next(q for q in cycle.consume(len(QUEUES)) if ".normal." in q)
        firsts.append(first_normal)
        cycle.rotate(first_normal)
    assert firsts[:4] == ["runs.normal.0", "runs.normal.1", "runs.normal.2", "runs.normal.3"]
    assert firsts[4:] == firsts[:4]
