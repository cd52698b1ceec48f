"""Deficit round robin over tenants (beat/fair_share.py): shares follow weights over any
sequence of arrivals, no tenant with waiting runs starves, no burst credit, quotas hold,
and within a tenant higher priority then older due goes first."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from beat.fair_share import FairQueue, shares

UNLIMITED = 10**9


def _fill(queue: FairQueue, tenant, count: int, *, priority="normal", start=0.0) -> None:
    for n in range(count):
        queue.push(tenant, (tenant, n), priority=priority, due=start + n)


@settings(max_examples=50, deadline=None)
@given(
    weights=st.lists(st.integers(1, 6), min_size=2, max_size=5),
    budgets=st.lists(st.integers(1, 40), min_size=30, max_size=80),
    arrivals=st.data(),
)
def test_backlogged_tenants_share_admissions_by_weight(weights, budgets, arrivals):
    """Arrivals come in any pattern, but every tenant keeps runs waiting: each one's share
    of what was taken is its share of the weights, within one take's worth."""
    queue = FairQueue()
    tenants = list(range(len(weights)))
    for tenant in tenants:
        _fill(queue, tenant, max(budgets) + 1)
    got: dict[int, int] = dict.fromkeys(tenants, 0)
    for budget in budgets:
        for tenant in tenants:  # arrivals of any size, never letting a queue run dry
            extra = arrivals.draw(st.integers(0, 50))
            _fill(queue, tenant, extra + max(0, budget + 1 - queue.waiting(tenant)))
        taken = queue.take(budget, lambda t: UNLIMITED, lambda t: weights[t])
        assert len(taken) == budget
        for tenant, count in shares(taken).items():
            got[tenant] += count
    total, weight_sum = sum(got.values()), sum(weights)
    for tenant in tenants:
        expected = total * weights[tenant] / weight_sum
        assert abs(got[tenant] - expected) <= 2 * max(budgets) + max(weights), (got, weights)


@settings(max_examples=200, deadline=None)
@given(
    weights=st.lists(st.integers(1, 6), min_size=2, max_size=6),
    arrivals=st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=20),
)
def test_no_tenant_with_waiting_runs_starves(weights, arrivals):
    """One run taken at a time: a tenant with waiting runs is served within one round of
    the others' weights, whatever arrives meanwhile."""
    queue = FairQueue()
    tenants = list(range(len(weights)))
    waited: dict[int, int] = dict.fromkeys(tenants, 0)
    bound = sum(weights)
    for step in arrivals:
        for tenant in tenants:
            _fill(queue, tenant, step[tenant])
        taken = queue.take(1, lambda t: UNLIMITED, lambda t: weights[t])
        served = {t for t, _ in taken}
        for tenant in tenants:
            if tenant in served or not queue.waiting(tenant):
                waited[tenant] = 0
            else:
                waited[tenant] += 1
            assert waited[tenant] <= bound, (tenant, waited, weights)


def _longest_streak(taken: list, tenant) -> int:
    longest = streak = 0
    for who, _ in taken:
        streak = streak + 1 if who == tenant else 0
        longest = max(longest, streak)
    return longest


@settings(max_examples=100, deadline=None)
@given(
    weights=st.lists(st.integers(1, 6), min_size=2, max_size=5),
    before=st.integers(0, 40),
    idle_budgets=st.lists(st.integers(1, 20), max_size=30),
    budgets=st.lists(st.integers(1, 40), min_size=1, max_size=20),
)
def test_a_tenant_back_from_idle_gets_at_most_one_quantum_in_a_turn(
    weights, before, idle_budgets, budgets
):
    """Tenant 0 is served, empties its queue, stays idle for any number of takes of any
    size while the others stay backlogged, then comes back with a flood: whatever credit
    it had or the takes' sizes, one turn gives it at most its weight (runs taken for it
    one after another, a turn going on into the next take when a take's room ran out),
    and over the takes since its return it is ahead of its weight share by at most a
    quantum and a round of partial turns."""
    queue = FairQueue()
    tenants = list(range(len(weights)))
    for tenant in tenants[1:]:
        _fill(queue, tenant, 2_000)  # more than all the takes below: backlogged throughout
    _fill(queue, 0, before)

    def take(budget: int) -> list:
        return queue.take(budget, lambda t: UNLIMITED, lambda t: weights[t])

    while queue.waiting(0):  # served until its queue is empty (no starvation)
        take(7)
    for budget in idle_budgets:  # idle, as long as it likes
        take(budget)
    _fill(queue, 0, 1_000, start=1e6)
    taken = [item for budget in budgets for item in take(budget)]
    assert _longest_streak(taken, 0) <= weights[0]
    mine = sum(1 for who, _ in taken if who == 0)
    assert mine <= len(taken) * weights[0] / sum(weights) + 2 * weights[0]


def test_a_tenant_at_its_quota_earns_no_credit_meanwhile():
    queue = FairQueue()
    _fill(queue, "a", 10_000)
    _fill(queue, "b", 10_000)
    free = {"a": UNLIMITED, "b": 0}
    for _ in range(100):
        taken = queue.take(3, lambda t: free[t], lambda t: 1)
        assert {t for t, _ in taken} == {"a"}
    free["b"] = UNLIMITED
    after = shares(queue.take(10, lambda t: free[t], lambda t: 1))
    assert after == {"a": 5, "b": 5}


def test_no_tenant_gets_more_than_its_free_slots():
    queue = FairQueue()
    _fill(queue, "a", 50)
    _fill(queue, "b", 50)
    taken = shares(queue.take(None, lambda t: {"a": 2, "b": 7}[t], lambda t: 1))
    assert taken == {"a": 2, "b": 7}
    assert queue.waiting("a") == 48


def test_weights_three_to_one():
    queue = FairQueue()
    _fill(queue, "a", 100_000)
    _fill(queue, "b", 100_000)
    got = {"a": 0, "b": 0}
    for _ in range(1000):
        for tenant, count in shares(
            queue.take(7, lambda t: UNLIMITED, lambda t: {"a": 3, "b": 1}[t])
        ).items():
            got[tenant] += count
    assert abs(got["a"] / 7000 - 0.75) < 0.01


def test_weights_hold_when_the_room_changes_from_take_to_take():
    """The broker's room varies (a burst of ends, then one at a time): shares still follow
    the weights; a visit cut short at a large take does not carry its credit over."""
    queue = FairQueue()
    _fill(queue, "a", 100_000)
    _fill(queue, "b", 100_000)
    got = {"a": 0, "b": 0}
    for n in range(2000):
        room = 20 if n % 10 == 0 else 1
        for tenant, count in shares(
            queue.take(room, lambda t: UNLIMITED, lambda t: {"a": 3, "b": 1}[t])
        ).items():
            got[tenant] += count
    assert abs(got["a"] / (got["a"] + got["b"]) - 0.75) < 0.02, got


@settings(max_examples=30, deadline=None)
@given(
    weights=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    pattern=st.lists(st.integers(1, 45), min_size=1, max_size=6),
)
def test_shares_follow_the_weights_closely_whatever_the_room_does(weights, pattern):
    """Over many takes of varying room (the broker's, at each fire), every tenant always
    backlogged: each share is within 5% of its weight's share (found by a review: a
    per-take quantum scale drifted 3:1 to 0.68)."""
    queue, n, got = FairQueue(), 0, [0] * len(weights)
    for budget in pattern * (1500 // len(pattern)):
        for tenant in range(len(weights)):
            while queue.waiting(tenant) < 50:
                queue.push(tenant, n, priority="normal", due=n)
                n += 1
        for tenant, count in shares(
            queue.take(budget, lambda t: UNLIMITED, lambda t: weights[t])
        ).items():
            got[tenant] += count
    total = sum(got)
    for tenant, weight in enumerate(weights):
        want = weight / sum(weights)
        assert abs(got[tenant] / total - want) <= 0.05 * want, (got, weights, pattern)


def test_within_a_tenant_higher_priority_then_oldest_due_goes_first():
    queue = FairQueue()
    queue.push("a", "low-old", priority="low", due=1)
    queue.push("a", "normal-new", priority="normal", due=9)
    queue.push("a", "high-newest", priority="high", due=10)
    queue.push("a", "normal-old", priority="normal", due=2)
    taken = [item for _, item in queue.take(None, lambda t: UNLIMITED, lambda t: 1)]
    assert taken == ["high-newest", "normal-old", "normal-new", "low-old"]


def test_a_flood_of_low_priority_runs_delays_neither_high_ones_nor_other_tenants():
    queue = FairQueue()
    _fill(queue, "flood", 10_000, priority="low")
    queue.push("flood", "urgent", priority="high", due=99_999)
    queue.push("quiet", "tick", priority="normal", due=99_999)
    taken = [item for _, item in queue.take(2, lambda t: UNLIMITED, lambda t: 1)]
    assert sorted(taken) == ["tick", "urgent"]


def test_remove_and_drain():
    queue = FairQueue()
    _fill(queue, "a", 5)
    dropped = queue.remove("a", keep=lambda item: item[1] % 2 == 0)
    assert dropped == [("a", 1), ("a", 3)]
    assert queue.waiting("a") == 3
    assert sorted(queue.drain()) == [("a", 0), ("a", 2), ("a", 4)]
    assert len(queue) == 0 and queue.tenants() == []


def _one_at_a_time(queue: FairQueue, free, weight) -> list:
    """Everything, taken by the rounds one item per take (the shortcut never applies
    while more than one item waits)."""
    taken: list = []
    while len(queue):
        step = queue.take(1, free, weight)  # `free` covers each tenant's whole queue
        assert step
        taken += step
    return taken


@settings(max_examples=200, deadline=None)
@given(
    waiting=st.lists(
        st.lists(st.sampled_from(["high", "normal", "low"]), min_size=1, max_size=12),
        min_size=1,
        max_size=6,
    ),
    weights=st.lists(st.integers(1, 5), min_size=6, max_size=6),
    spare=st.integers(0, 5),
    then=st.lists(st.integers(1, 4), min_size=6, max_size=6),
)
def test_a_take_that_fits_everything_matches_the_rounds(waiting, weights, spare, then):
    """When every tenant has a slot for each of its runs and the budget covers them all,
    `take` sends everything in one pass: the same runs as the rounds, each tenant's in the
    same order, and the queue left as the rounds leave it (the next take shares alike)."""

    def build() -> FairQueue:
        queue = FairQueue()
        for tenant, priorities in enumerate(waiting):
            for n, priority in enumerate(priorities):
                queue.push(tenant, (tenant, n), priority=priority, due=float(n % 3))
        return queue

    budget = sum(len(p) for p in waiting) + spare

    def free(tenant):
        return len(waiting[tenant]) + spare

    def weight(tenant):
        return weights[tenant]

    fast, slow = build(), build()
    got = fast.take(budget, free, weight)
    want = _one_at_a_time(slow, free, weight)
    for tenant in range(len(waiting)):
        assert [i for t, i in got if t == tenant] == [i for t, i in want if t == tenant]
    assert sorted(got) == sorted(want) and len(fast) == len(slow) == 0
    for queue in (fast, slow):
        for tenant, count in enumerate(then):
            _fill(queue, tenant, count * 3)
    assert shares(fast.take(6, lambda t: UNLIMITED, weight)) == shares(
        slow.take(6, lambda t: UNLIMITED, weight)
    )
