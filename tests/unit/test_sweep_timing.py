"""When a sweep's next pass begins (no database: the clock is passed in)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from beat.sweeps import TenantSweep

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_pass_that_outlasts_its_interval_is_followed_by_a_pause_of_the_interval():
    sweep = TenantSweep("relay", 10)
    assert sweep.due(_at(0))
    sweep.start([(1, "t_a"), (2, "t_b")], _at(0))
    sweep.take(1)
    sweep.finish_if_empty(_at(0))  # one tenant left: the pass goes on
    assert sweep.running and sweep.due(_at(6))
    sweep.take(1)
    sweep.finish_if_empty(_at(12))  # the pass ended 12 s after it began
    assert not sweep.due(_at(12))  # counted from its start it would be due at once
    assert not sweep.due(_at(21.9))
    assert sweep.due(_at(22))


def test_a_quick_pass_repeats_every_interval():
    sweep = TenantSweep("relay", 10)
    sweep.start([(1, "t_a")], _at(0))
    sweep.take(25)
    sweep.finish_if_empty(_at(0))
    assert not sweep.due(_at(9.9)) and sweep.due(_at(10))
    assert sweep.due(_at(3), force=True)


def test_a_pass_marked_started_but_never_ended_counts_from_its_start():
    """The takeover relay covers the periodic one by setting its start alone."""
    sweep = TenantSweep("relay", 10)
    sweep.last_started = _at(0)
    assert not sweep.due(_at(5)) and sweep.due(_at(10))
