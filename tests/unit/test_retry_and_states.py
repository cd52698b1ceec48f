from __future__ import annotations

import random

import pytest

from runs import states
from runs.retry import RetryPolicy, backoff_ceiling, retry_delay, should_retry

POLICY = RetryPolicy(
    max_attempts=4, backoff_seconds=10, backoff_multiplier=3, backoff_max_seconds=60, jitter=False
)


def test_backoff_grows_by_the_multiplier_up_to_the_cap():
    assert [backoff_ceiling(POLICY, n) for n in (1, 2, 3, 4)] == [10, 30, 60, 60]


def test_full_jitter_stays_within_zero_and_the_ceiling():
    jittery = RetryPolicy(4, 10, 3, 60, jitter=True)
    rng = random.Random(7)
    delays = [retry_delay(jittery, 2, rng) for _ in range(500)]
    assert all(0 <= d <= 30 for d in delays)
    assert max(delays) > 20 and min(delays) < 10  # spread, not a constant


def test_retry_until_max_attempts():
    assert [should_retry(POLICY, n) for n in (1, 3, 4)] == [True, True, False]


def test_huge_exponents_do_not_overflow():
    assert backoff_ceiling(RetryPolicy(1000, 1, 10, 5), 999) == 5


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("queued", "running"),
        ("running", "retrying"),
        ("dead", "retrying"),
        ("scheduled", "skipped"),
    ],
)
def test_allowed_transitions(a, b):
    states.check_transition(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("succeeded", "queued"),
        ("skipped", "running"),
        ("cancelled", "queued"),
        ("queued", "succeeded"),
        ("dead", "queued"),
        ("retrying", "running"),
    ],
)
def test_illegal_transitions_raise(a, b):
    with pytest.raises(states.IllegalTransition):
        states.check_transition(a, b)


def test_conditional_update_sources_follow_the_table():
    assert set(states.CLAIMABLE) == {"scheduled", "queued"}
    assert set(states.ADMITTABLE) == {"scheduled", "retrying"}
    assert set(states.CANCELLABLE) == {"scheduled", "queued", "running", "retrying"}
    assert states.REPLAYABLE == ("dead",)
    assert {"succeeded", "dead", "skipped", "cancelled"} == states.TERMINAL
