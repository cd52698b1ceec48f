"""Interval schedules (anchored, no drift), jitter, interval descriptions and type checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.schedules import (
    MAX_INTERVAL_SECONDS,
    IntervalSchedule,
    ScheduleError,
    Slot,
    describe,
    interval_schedule,
    iter_slots,
    jitter_seconds_for,
    next_fire,
    next_slot,
)

ANCHOR = datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC)


def every(seconds: int, anchor: datetime = ANCHOR) -> IntervalSchedule:
    return interval_schedule(seconds, anchor=anchor, minimum_seconds=60)


def test_fires_on_the_anchor_grid_strictly_after():
    schedule = every(300)
    assert next_fire(schedule, ANCHOR) == ANCHOR + timedelta(seconds=300)
    assert next_fire(schedule, ANCHOR - timedelta(microseconds=1)) == ANCHOR
    assert next_fire(schedule, ANCHOR + timedelta(seconds=299)) == ANCHOR + timedelta(seconds=300)
    assert next_slot(schedule, ANCHOR) == Slot(ANCHOR + timedelta(seconds=300), None)


def test_before_the_anchor_the_grid_extends_backwards():
    assert next_fire(every(3600), ANCHOR - timedelta(hours=5, minutes=1)) == ANCHOR - timedelta(
        hours=5
    )


def test_no_drift_after_a_million_periods():
    schedule = every(61)
    far = ANCHOR + timedelta(seconds=61 * 10**6)
    assert next_fire(schedule, far - timedelta(microseconds=1)) == far
    assert next_fire(schedule, far) == far + timedelta(seconds=61)


def test_iteration_is_exact_and_bounded():
    schedule = every(90)
    got = [s.at for s in iter_slots(schedule, ANCHOR, ANCHOR + timedelta(minutes=6))]
    assert got == [ANCHOR + timedelta(seconds=90 * k) for k in range(1, 5)]


def test_anchor_in_another_zone_is_stored_as_utc():
    anchor = datetime(2026, 3, 29, 3, 0, tzinfo=timezone(timedelta(hours=2)))
    schedule = every(3600, anchor)
    assert schedule.anchor == datetime(2026, 3, 29, 1, tzinfo=UTC)
    assert schedule.anchor.tzinfo is UTC
    assert IntervalSchedule(3600, anchor).anchor.tzinfo is UTC


def test_intervals_ignore_dst():
    schedule = every(3600, datetime(2026, 10, 25, tzinfo=UTC))
    after = datetime(2026, 10, 25, 2, 30, tzinfo=timezone(timedelta(hours=2)))  # 00:30 UTC
    got = [s.at for s in iter_slots(schedule, after, after + timedelta(hours=3))]
    assert got == [datetime(2026, 10, 25, h, tzinfo=UTC) for h in (1, 2, 3)]


@pytest.mark.parametrize(
    ("seconds", "fragment"),
    [
        (59, "at least 60"),
        (0, "at least 60"),
        (-5, "at least 60"),
        (MAX_INTERVAL_SECONDS + 1, "at most"),
        (1.5, "whole number"),
        ("60", "whole number"),
        (True, "whole number"),
    ],
)
def test_invalid_intervals(seconds, fragment):
    with pytest.raises(ScheduleError) as caught:
        interval_schedule(seconds, anchor=ANCHOR, minimum_seconds=60)
    assert caught.value.field == "interval_seconds"
    assert fragment in caught.value.message


def test_limits_are_inclusive():
    assert every(60).seconds == 60
    assert every(MAX_INTERVAL_SECONDS).seconds == 366 * 86400


def test_naive_datetimes_are_type_errors():
    with pytest.raises(TypeError):
        interval_schedule(60, anchor=datetime(2026, 1, 1), minimum_seconds=60)
    with pytest.raises(TypeError):
        next_slot(every(60), datetime(2026, 1, 1))
    with pytest.raises(TypeError):
        jitter_seconds_for("s", datetime(2026, 1, 1), 30)


@settings(max_examples=200, deadline=None)
@given(
    seconds=st.integers(60, MAX_INTERVAL_SECONDS),
    offset=st.integers(-(10**10), 10**10),
)
def test_next_is_the_next_grid_point(seconds, offset):
    schedule = every(seconds)
    after = ANCHOR + timedelta(microseconds=offset * 997)
    fired = next_fire(schedule, after)
    assert after < fired <= after + timedelta(seconds=seconds)
    assert (fired - ANCHOR) % timedelta(seconds=seconds) == timedelta(0)


# --- jitter ---------------------------------------------------------------------------------


def test_jitter_is_deterministic_and_in_range():
    at = datetime(2026, 5, 1, 12, tzinfo=UTC)
    values = [jitter_seconds_for(f"job-{i}", at, 30) for i in range(2000)]
    assert values == [jitter_seconds_for(f"job-{i}", at, 30) for i in range(2000)]
    assert min(values) == 0 and max(values) == 30
    assert set(values) == set(range(31))


def test_jitter_depends_on_the_instant_not_its_zone():
    at = datetime(2026, 5, 1, 12, tzinfo=UTC)
    same = at.astimezone(timezone(timedelta(hours=5)))
    assert jitter_seconds_for("job", at, 600) == jitter_seconds_for("job", same, 600)
    later = [jitter_seconds_for("job", at + timedelta(minutes=k), 600) for k in range(50)]
    assert len(set(later)) > 10


def test_jitter_pinned_value_is_stable_across_processes():
    # sha256 of "job\x00" + isoformat: a fixed number forever (never Python's hash())
    import hashlib

    at = datetime(2026, 5, 1, 12, tzinfo=UTC)
    digest = hashlib.sha256(b"job\x002026-05-01T12:00:00+00:00").digest()
    assert jitter_seconds_for("job", at, 600) == int.from_bytes(digest[:8], "big") % 601


def test_zero_jitter_and_bad_jitter():
    at = datetime(2026, 5, 1, 12, tzinfo=UTC)
    assert jitter_seconds_for("job", at, 0) == 0
    for bad in (-1, 1.5, None):
        with pytest.raises(ScheduleError) as caught:
            jitter_seconds_for("job", at, bad)  # type: ignore[arg-type]
        assert caught.value.field == "jitter_seconds"


# --- describe -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (60, "Every minute"),
        (300, "Every 5 minutes"),
        (90, "Every 90 seconds"),
        (3600, "Every hour"),
        (5400, "Every 90 minutes"),
        (7200, "Every 2 hours"),
        (86400, "Every day"),
        (7 * 86400, "Every 7 days"),
    ],
)
def test_describe_intervals(seconds, words):
    assert describe(interval_schedule(seconds, anchor=ANCHOR, minimum_seconds=1)) == words
