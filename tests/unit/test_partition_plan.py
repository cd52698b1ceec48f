"""The partition plan: shares, spreading, orphans, and convergence from any start."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from beat.partition_plan import plan, share
from core.partitions import partition_of


def test_one_partition_is_everything_at_p1():
    assert all(partition_of(t, 1) == 0 for t in range(1, 200))


def test_partitions_are_stable_and_spread():
    counts = [0] * 4
    for tenant in range(1, 4001):
        assert partition_of(tenant, 4) == partition_of(tenant, 4)
        counts[partition_of(tenant, 4)] += 1
    assert min(counts) > 800  # 1,000 each on average


def test_share_is_the_ceiling():
    assert share(4, 3) == 2
    assert share(4, 4) == 1
    assert share(1, 5) == 1
    assert share(4, 0) == 4


def test_a_lone_process_takes_every_free_partition():
    p = plan(me="a", partitions=4, live=["a"], holders={}, free_for={}, orphan_seconds=1)
    assert p.take == (0, 1, 2, 3) and p.release is None


def test_the_least_loaded_moves_first():
    holders = {0: "b"}
    a = plan(me="a", partitions=4, live=["a", "b"], holders=holders, free_for={}, orphan_seconds=1)
    b = plan(me="b", partitions=4, live=["a", "b"], holders=holders, free_for={}, orphan_seconds=1)
    assert a.take == (1, 2)  # a holds none, b one: a takes up to its share of 2
    assert b.take == ()


def test_an_overloaded_process_gives_up_its_highest():
    holders = dict.fromkeys(range(4), "a")
    a = plan(me="a", partitions=4, live=["a", "b"], holders=holders, free_for={}, orphan_seconds=1)
    assert a.release == 3 and a.take == ()


def test_two_more_than_the_least_loaded_gives_one_up_even_within_the_share():
    holders = {0: "a", 1: "a", 2: "b", 3: "b"}
    live = ["a", "b", "c"]  # share 2, c holds none
    a = plan(me="a", partitions=4, live=live, holders=holders, free_for={}, orphan_seconds=1)
    assert a.release == 1


def test_a_long_free_partition_is_taken_by_anyone():
    holders = {0: "a", 1: "a", 2: "b"}
    live = ["a", "b", "dead"]  # the dead process is still announced
    kwargs = dict(partitions=4, live=live, holders=holders, orphan_seconds=1.0)
    assert plan(me="a", free_for={3: 0.2}, **kwargs).take == ()
    assert plan(me="a", free_for={3: 1.5}, **kwargs).take == (3,)


def test_a_blocked_partition_is_not_taken():
    p = plan(
        me="a",
        partitions=2,
        live=["a"],
        holders={},
        free_for={},
        orphan_seconds=1,
        blocked=frozenset({0}),
    )
    assert p.take == (1,)


def _converge(partitions: int, names: list[str], holders: dict, rng: random.Random) -> dict:
    """Turns in random process order, the lock deciding races, until nothing changes."""
    for _ in range(200):
        changed = False
        for me in rng.sample(names, len(names)):
            p = plan(
                me=me,
                partitions=partitions,
                live=names,
                holders=holders,
                free_for={},
                orphan_seconds=1e9,
            )
            if p.release is not None:
                holders[p.release] = None
                changed = True
            for partition in p.take:
                if holders.get(partition) is None:  # the Redis lock: first one wins
                    holders[partition] = me
                    changed = True
        if not changed:
            return holders
    raise AssertionError(f"no convergence: {holders}")


@settings(max_examples=200, deadline=None)
@given(
    partitions=st.integers(1, 16),
    processes=st.integers(1, 6),
    seed=st.integers(0, 10_000),
)
def test_any_start_converges_to_an_even_spread_with_every_partition_led(
    partitions, processes, seed
):
    rng = random.Random(seed)
    names = [f"p{i}" for i in range(processes)]
    holders = {p: rng.choice([*names, None]) for p in range(partitions)}
    final = _converge(partitions, names, holders, rng)
    assert all(final.get(p) is not None for p in range(partitions))
    loads = [sum(1 for h in final.values() if h == n) for n in names]
    assert max(loads) - min(loads) <= 1
