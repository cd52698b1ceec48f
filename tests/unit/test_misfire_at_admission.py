"""The misfire policy applied when prepared runs come up for admission late (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from beat.planning import DueSlotRun, MisfireRules, misfire_at_admission

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _runs(*ages: int) -> list[DueSlotRun]:
    return [DueSlotRun(f"r{age}", NOW - timedelta(seconds=age)) for age in ages]


def _rules(policy: str, grace: int = 10, max_runs: int = 100) -> MisfireRules:
    return MisfireRules(policy, grace, max_runs, 86400)


def test_runs_within_the_grace_are_admitted_whatever_the_policy():
    for policy in ("skip", "run_once", "run_all"):
        assert misfire_at_admission(_runs(0, 5, 10), rules=_rules(policy), now=NOW) == (
            ["r10", "r5", "r0"],
            [],
        )


def test_skip_drops_every_late_run():
    assert misfire_at_admission(_runs(80, 79, 3), rules=_rules("skip"), now=NOW) == (
        ["r3"],
        ["r80", "r79"],
    )


def test_run_once_keeps_the_newest_late_run_unless_an_on_time_one_runs():
    assert misfire_at_admission(_runs(80, 79, 78), rules=_rules("run_once"), now=NOW) == (
        ["r78"],
        ["r80", "r79"],
    )
    assert misfire_at_admission(_runs(80, 79, 1), rules=_rules("run_once"), now=NOW) == (
        ["r1"],
        ["r80", "r79"],
    )


def test_run_all_keeps_the_newest_late_runs_up_to_the_limit():
    admitted, skipped = misfire_at_admission(
        _runs(80, 79, 78), rules=_rules("run_all", max_runs=2), now=NOW
    )
    assert (admitted, skipped) == (["r79", "r78"], ["r80"])


@given(
    ages=st.lists(st.integers(0, 10_000), min_size=1, max_size=30, unique=True),
    policy=st.sampled_from(["skip", "run_once", "run_all"]),
    grace=st.integers(0, 600),
)
def test_every_run_is_admitted_or_skipped_exactly_once(ages, policy, grace):
    runs = _runs(*ages)
    admitted, skipped = misfire_at_admission(runs, rules=_rules(policy, grace), now=NOW)
    assert sorted(admitted + skipped) == sorted(r.run_id for r in runs)
    assert not set(admitted) & set(skipped)
    on_time = {r.run_id for r in runs if r.due_at >= NOW - timedelta(seconds=grace)}
    assert on_time <= set(admitted)  # nothing on time is ever skipped
