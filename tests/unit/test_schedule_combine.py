"""Several specs per job (union), start/end bounds, one-off schedules and the "ended" signal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobs.schedules import (
    BoundedSchedule,
    OneOffSchedule,
    ScheduleEnded,
    ScheduleError,
    Slot,
    UnionSchedule,
    bounded,
    describe,
    excluding,
    exclusion_calendar,
    interval_schedule,
    iter_slots,
    next_fire,
    next_fire_or_none,
    next_slot,
    next_slot_or_none,
    one_off,
    parse_cron,
    union,
)

CET = timezone(timedelta(hours=1))


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def cron(expression: str, zone: str = "UTC", **policy):
    return parse_cron(expression, timezone=zone, seed="s", **policy)


def every(seconds: int, anchor: datetime):
    return interval_schedule(seconds, anchor=anchor, minimum_seconds=1)


def slots(schedule, after, until=None) -> list[tuple[datetime, str | None]]:
    return [(s.at, s.skip_reason) for s in iter_slots(schedule, after, until)]


# --- union --------------------------------------------------------------------------------


def test_union_slot_shared_by_two_parts_fires_once():
    # 09:00 Berlin (08:00 UTC in winter) and every 6 hours from 02:00 UTC: 08:00 is shared
    both = union([cron("0 9 * * *", "Europe/Berlin"), every(6 * 3600, utc(2026, 1, 1, 2))])
    got = slots(both, utc(2026, 1, 1), utc(2026, 1, 2))
    assert got == [(utc(2026, 1, 1, h), None) for h in (2, 8, 14, 20)]  # 08:00 once


def test_union_of_crons_in_two_zones_dedupes_only_when_the_instants_coincide():
    # 09:00 Berlin and 03:00 New York are the same instant except between the two DST
    # starts (US 2026-03-08, EU 2026-03-29), when they are an hour apart
    pair = union([cron("0 9 * * *", "Europe/Berlin"), cron("0 3 * * *", "America/New_York")])
    got = [at for at, _ in slots(pair, utc(2026, 3, 6), utc(2026, 3, 31))]
    shared = [utc(2026, 3, d, 8) for d in (6, 7)] + [utc(2026, 3, d, 7) for d in (29, 30)]
    apart = [utc(2026, 3, d, h) for d in range(8, 29) for h in (7, 8)]
    assert got == sorted(shared + apart)
    assert len(got) == len(set(got))


def test_union_firing_wins_over_a_skip_at_the_same_instant():
    # 02:30 Berlin on 2026-03-29 is in the gap: dst_gap="skip" records a skip at 01:00 UTC,
    # exactly when 03:00 CEST fires in the other part
    skipping = cron("30 2 * * *", "Europe/Berlin", dst_gap="skip")
    firing = cron("0 3 * * *", "Europe/Berlin")
    for parts in ([skipping, firing], [firing, skipping]):
        got = slots(union(parts), utc(2026, 3, 28, 12), utc(2026, 3, 29, 12))
        assert got == [(utc(2026, 3, 29, 1), None)]
    assert slots(skipping, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12)) == [
        (utc(2026, 3, 29, 1), "dst")
    ]


def test_union_of_two_skips_at_one_instant_keeps_the_first_parts_reason():
    day = exclusion_calendar("closed", dates=[datetime(2026, 3, 29).date()])
    excluded = excluding(cron("0 3 * * *", "Europe/Berlin"), day)  # 01:00 UTC, "excluded"
    gap = cron("30 2 * * *", "Europe/Berlin", dst_gap="skip")  # 01:00 UTC, "dst"
    window = (utc(2026, 3, 29), utc(2026, 3, 29, 2))
    assert slots(union([excluded, gap]), *window) == [(utc(2026, 3, 29, 1), "excluded")]
    assert slots(union([gap, excluded]), *window) == [(utc(2026, 3, 29, 1), "dst")]


def test_union_next_fire_is_the_earliest_firing_part():
    parts = union([cron("0 12 * * *"), one_off(utc(2026, 1, 1, 6)), cron("0 9 * * *")])
    assert next_fire(parts, utc(2026, 1, 1)) == utc(2026, 1, 1, 6)
    assert next_fire(parts, utc(2026, 1, 1, 6)) == utc(2026, 1, 1, 9)


def test_union_ends_when_every_part_has_ended():
    two = union([one_off(utc(2026, 1, 1, 6)), one_off(utc(2026, 1, 2, 6))])
    assert slots(two, utc(2025, 1, 1)) == [(utc(2026, 1, 1, 6), None), (utc(2026, 1, 2, 6), None)]
    assert next_slot_or_none(two, utc(2026, 1, 2, 6)) is None
    with pytest.raises(ScheduleEnded):
        next_slot(two, utc(2026, 1, 2, 6))


def test_union_flattens_nested_unions_and_drops_repeated_parts():
    a, b = cron("0 9 * * *"), cron("0 17 * * *")
    assert union([union([a, b]), a]).parts == (a, b)
    assert union([a, a]) == UnionSchedule((a,))


def test_union_needs_schedules():
    with pytest.raises(ScheduleError) as caught:
        union([])
    assert caught.value.field == "parts"
    with pytest.raises(TypeError):
        union(["0 9 * * *"])  # type: ignore[list-item]


def test_union_words():
    words = describe(union([cron("0 9 * * 1-5", "Europe/Berlin"), every(7200, utc(2026, 1, 1))]))
    assert words == "At 09:00, Monday through Friday (Europe/Berlin); Every 2 hours"


# --- start (inclusive) and end (exclusive) ------------------------------------------------


HOURLY = cron("0 * * * *")


def test_start_is_inclusive_and_end_is_exclusive():
    window = bounded(HOURLY, start=utc(2026, 1, 1, 10), end=utc(2026, 1, 1, 13))
    got = slots(window, utc(2026, 1, 1))
    assert got == [(utc(2026, 1, 1, h), None) for h in (10, 11, 12)]  # 10:00 yes, 13:00 no


def test_bounds_between_slots():
    window = bounded(HOURLY, start=utc(2026, 1, 1, 10, 0, 0, 1), end=utc(2026, 1, 1, 12, 59))
    assert slots(window, utc(2026, 1, 1)) == [
        (utc(2026, 1, 1, 11), None),
        (utc(2026, 1, 1, 12), None),
    ]


def test_consecutive_windows_share_no_slot():
    first = bounded(HOURLY, start=utc(2026, 1, 1, 10), end=utc(2026, 1, 1, 12))
    second = bounded(HOURLY, start=utc(2026, 1, 1, 12), end=utc(2026, 1, 1, 14))
    assert [at.hour for at, _ in slots(union([first, second]), utc(2026, 1, 1))] == [10, 11, 12, 13]


def test_after_the_last_slot_the_schedule_has_ended():
    window = bounded(HOURLY, start=utc(2026, 1, 1, 10), end=utc(2026, 1, 1, 13))
    last = utc(2026, 1, 1, 12)
    assert next_slot(window, last - timedelta(microseconds=1)) == Slot(last)
    assert next_slot_or_none(window, last) is None
    assert next_fire_or_none(window, last) is None
    with pytest.raises(ScheduleEnded) as caught:
        next_slot(window, last)
    assert caught.value.after == last
    assert str(caught.value) == "the schedule has no slot after 2026-01-01T12:00:00+00:00"
    with pytest.raises(ScheduleEnded):
        next_fire(window, last)
    assert not isinstance(caught.value, ScheduleError)  # not bad input: a finished schedule


def test_before_the_start_the_first_slot_is_at_or_after_the_start():
    window = bounded(HOURLY, start=utc(2026, 6, 1, 10, 30))
    assert next_slot(window, utc(2020, 1, 1)).at == utc(2026, 6, 1, 11)
    assert next_fire(window, utc(2026, 6, 1, 12)) == utc(2026, 6, 1, 13)  # unbounded end


def test_end_only():
    window = bounded(HOURLY, end=utc(2026, 1, 1, 2))
    assert slots(window, utc(2026, 1, 1)) == [(utc(2026, 1, 1, 1), None)]


def test_bounds_of_an_interval_keep_its_anchor_grid():
    window = bounded(every(3600, utc(2026, 1, 1, 0, 0, 7)), start=utc(2026, 1, 1, 5))
    assert next_slot(window, utc(2026, 1, 1)).at == utc(2026, 1, 1, 5, 0, 7)


def test_bounds_in_other_offsets_are_instants():
    window = bounded(HOURLY, start=datetime(2026, 1, 1, 11, tzinfo=CET))
    assert window.start == utc(2026, 1, 1, 10)
    assert window.start.tzinfo is UTC
    assert next_slot(window, utc(2026, 1, 1)).at == utc(2026, 1, 1, 10)


def test_bounds_are_checked():
    with pytest.raises(ScheduleError) as caught:
        bounded(HOURLY, start=utc(2026, 1, 2), end=utc(2026, 1, 1))
    assert (caught.value.field, caught.value.message) == ("end", "end must be later than start")
    with pytest.raises(ScheduleError):
        bounded(HOURLY, start=utc(2026, 1, 1), end=utc(2026, 1, 1))  # empty window
    with pytest.raises(TypeError):
        bounded(HOURLY, start=datetime(2026, 1, 1))  # naive


def test_a_window_without_a_slot_to_fire_is_refused():
    yearly = cron("0 0 1 1 *")
    with pytest.raises(ScheduleError) as caught:
        bounded(yearly, start=utc(2026, 6, 1), end=utc(2026, 7, 1))
    assert caught.value.field == "end"
    assert caught.value.message == "the schedule has no slot to fire between start and end"
    # only a skipped slot inside: still nothing to fire
    gap = cron("30 2 29 3 *", "Europe/Berlin", dst_gap="skip")
    with pytest.raises(ScheduleError):
        bounded(gap, start=utc(2026, 3, 28), end=utc(2026, 3, 30))
    BoundedSchedule(yearly, utc(2026, 6, 1), utc(2026, 7, 1))  # stored values: not re-checked


def test_bounded_words():
    window = bounded(cron("0 9 * * *", "Europe/Berlin"), start=utc(2026, 5, 1), end=utc(2026, 6, 1))
    assert describe(window) == (
        "At 09:00 (Europe/Berlin), from 2026-05-01 02:00+02:00, "
        "ending before 2026-06-01 02:00+02:00"
    )
    assert describe(bounded(HOURLY, end=utc(2026, 6, 1))) == (
        "Every hour (UTC), ending before 2026-06-01 00:00 UTC"
    )


# --- one-off schedules --------------------------------------------------------------------


def test_one_off_wall_time_in_a_zone():
    once = one_off(datetime(2026, 5, 1, 9, 30), "Europe/Berlin")
    assert once == OneOffSchedule(utc(2026, 5, 1, 7, 30), "Europe/Berlin")
    assert slots(once, utc(2026, 1, 1)) == [(utc(2026, 5, 1, 7, 30), None)]
    assert next_slot_or_none(once, utc(2026, 5, 1, 7, 30)) is None  # strictly after
    assert describe(once) == "Once at 2026-05-01 09:30+02:00 (Europe/Berlin)"


def test_one_off_in_a_gap_follows_the_gap_policy():
    shifted = one_off(datetime(2026, 3, 29, 2, 30), "Europe/Berlin")
    assert next_slot(shifted, utc(2026, 1, 1)) == Slot(utc(2026, 3, 29, 1))  # 03:00 CEST
    skipped = one_off(datetime(2026, 3, 29, 2, 30), "Europe/Berlin", dst_gap="skip")
    assert next_slot(skipped, utc(2026, 1, 1)) == Slot(utc(2026, 3, 29, 1), "dst")
    assert next_fire_or_none(skipped, utc(2026, 1, 1)) is None  # its only slot is skipped
    assert describe(skipped).endswith(", skipped (in a DST gap)")


def test_one_off_in_a_half_hour_gap():
    once = one_off(datetime(2026, 10, 4, 2, 15), "Australia/Lord_Howe")
    assert once.at == utc(2026, 10, 3, 15, 30)


def test_one_off_ambiguous_wall_time_takes_the_first_occurrence_unless_told():
    wall = datetime(2026, 11, 1, 1, 30)  # New York, twice: EDT then EST
    assert one_off(wall, "America/New_York").at == utc(2026, 11, 1, 5, 30)
    assert one_off(wall, "America/New_York", dst_repeat="last").at == utc(2026, 11, 1, 6, 30)
    with pytest.raises(ScheduleError) as caught:
        one_off(wall, "America/New_York", dst_repeat="both")
    assert caught.value.field == "dst_repeat"
    assert caught.value.message == "a one-off fires once: dst_repeat must be first or last"


def test_one_off_aware_instant_and_bad_input():
    assert one_off(datetime(2026, 5, 1, 9, tzinfo=CET), "Asia/Tokyo").at == utc(2026, 5, 1, 8)
    with pytest.raises(ScheduleError) as caught:
        one_off(datetime(2026, 5, 1), "Mars/Olympus")
    assert caught.value.field == "timezone"
    with pytest.raises(ScheduleError):
        one_off(datetime(2026, 5, 1), "UTC", dst_gap="later")
    with pytest.raises(TypeError):
        one_off("2026-05-01T09:00", "UTC")  # type: ignore[arg-type]


def test_one_off_bounded_and_in_a_union():
    once = one_off(utc(2026, 5, 1, 9))
    assert slots(bounded(once, end=utc(2026, 5, 2)), utc(2026, 1, 1)) == [
        (utc(2026, 5, 1, 9), None)
    ]
    with pytest.raises(ScheduleError):
        bounded(once, start=utc(2026, 5, 2))
    merged = union([once, cron("0 9 1 5 *")])
    assert slots(merged, utc(2026, 4, 30), utc(2027, 5, 2)) == [
        (utc(2026, 5, 1, 9), None),
        (utc(2027, 5, 1, 9), None),
    ]
