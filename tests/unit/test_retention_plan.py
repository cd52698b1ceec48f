"""Retention planning (beat/retention_plan.py): cutoffs, turns between tenants, and whether a
batch fits before the next fire."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from beat.retention_plan import BatchSizer, RoundRobin, TenantTurn, cutoff_for, retention_days
from runs import states

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


def test_the_cutoff_is_now_minus_the_retention_and_zero_keeps_everything():
    assert cutoff_for(NOW, 30) == NOW - timedelta(days=30)
    assert cutoff_for(NOW, 1) == NOW - timedelta(days=1)
    assert cutoff_for(NOW, 0) is None


def test_a_tenants_own_retention_wins_over_the_default():
    assert retention_days(None, 30) == 30
    assert retention_days(90, 30) == 90
    assert retention_days(1, 0) == 1  # its own, even when the fleet keeps everything


def test_only_ended_runs_outside_the_dlq_are_prunable():
    assert set(states.PRUNABLE) == {states.SUCCEEDED, states.SKIPPED, states.CANCELLED}
    assert set(states.PRUNABLE) <= states.TERMINAL and states.DEAD not in states.PRUNABLE
    assert not set(states.PRUNABLE) & {*states.WAITING, *states.ACTIVE}


def _turn(tenant_id: int) -> TenantTurn:
    return TenantTurn(tenant_id, f"t_{tenant_id}", NOW)


def test_tenants_with_more_to_prune_go_to_the_back_of_the_line():
    turns = RoundRobin()
    turns.start([_turn(1), _turn(2), _turn(3)])
    order = []
    backlog = {1: 3, 2: 1, 3: 2}  # batches each tenant still has
    while (turn := turns.next()) is not None:
        order.append(turn.tenant_id)
        backlog[turn.tenant_id] -= 1
        if backlog[turn.tenant_id]:
            turns.again(turn)
    assert order == [1, 2, 3, 1, 3, 1]
    assert len(turns) == 0


def test_a_new_pass_replaces_what_was_left():
    turns = RoundRobin()
    turns.start([_turn(1)])
    turns.start([_turn(2), _turn(3)])
    assert [turns.next().tenant_id, turns.next().tenant_id, turns.next()] == [2, 3, None]


def test_a_batch_takes_as_many_runs_as_fit_before_the_next_due_run():
    sizer = BatchSizer(5000, seconds_per_run=0.0001, overhead_seconds=0.0, target_seconds=1)
    sizer.last_batch = 100.0
    assert sizer.size(100.0, None) == 5000  # nothing due
    assert sizer.size(100.0, 100.15) == 1000  # 0.1 s of room with a 1.5 margin
    assert sizer.size(100.0, 110.0) == 5000  # never more than the maximum
    assert sizer.size(100.0, 100.01) == 0  # not even 100 runs fit: fire first
    assert sizer.size(100.0, 99.0) == 0  # overdue


def test_a_leader_never_idle_enough_still_prunes_a_little_now_and_then():
    sizer = BatchSizer(5000, seconds_per_run=0.0001, starve_seconds=30.0)
    assert sizer.size(100.0, 100.001) == 100  # never pruned yet
    sizer.record(100.0, 0.01, 100)
    assert sizer.size(110.0, 110.001) == 0
    assert sizer.size(130.0, 130.001) == 100  # 30 s without a batch


def test_a_slow_database_gets_smaller_batches_and_a_failed_one_halves_them():
    sizer = BatchSizer(5000, seconds_per_run=0.0001, overhead_seconds=0.0, target_seconds=0.25)
    assert sizer.size(100.0, None) == 2500  # 0.25 s of batch at 0.1 ms a run
    sizer.failed(100.0, 2500, 2.0)  # a statement timeout after 2 s
    assert sizer.seconds_per_run == pytest.approx(0.0008)
    assert sizer.size(101.0, None) == 312
    for _ in range(50):
        sizer.failed(101.0, 100, 2.0)
    assert sizer.size(102.0, None) == 100  # never below the minimum


def test_the_time_per_run_follows_what_batches_took():
    sizer = BatchSizer(5000, seconds_per_run=0.0001, overhead_seconds=0.0, weight=0.5)
    sizer.record(0.0, 0.5, 1000)  # 0.5 ms a run
    assert sizer.seconds_per_run == pytest.approx(0.0003)
    sizer.record(1.0, 5.0, 10)  # too few runs to say anything about the rate
    assert sizer.seconds_per_run == pytest.approx(0.0003)
    for n in range(20):
        sizer.record(float(n), 0.02, 1000)
    assert sizer.seconds_per_run == pytest.approx(0.00002, rel=0.01)
