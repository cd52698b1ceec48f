"""Exclusion calendars (pure data), the excluding wrapper (local dates, DST days, midnight
transitions) and the iCalendar import (DATE and DATE-TIME values, folded lines, refusals)."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta

import pytest

from jobs.schedules import (
    ExcludingSchedule,
    ExclusionCalendar,
    ScheduleError,
    Slot,
    bounded,
    describe,
    excluding,
    exclusion_calendar,
    interval_schedule,
    iter_slots,
    next_fire,
    next_slot,
    parse_cron,
    union,
)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def cron(expression: str, zone: str = "UTC", **policy):
    return parse_cron(expression, timezone=zone, seed="s", **policy)


def slots(schedule, after, until) -> list[tuple[datetime, str | None]]:
    return [(s.at, s.skip_reason) for s in iter_slots(schedule, after, until)]


def days(*isos: str) -> list[date]:
    return [date.fromisoformat(text) for text in isos]


# --- the calendar value type --------------------------------------------------------------


def test_calendar_normalises_dates_and_ranges():
    calendar = exclusion_calendar(
        "holidays",
        dates=days("2026-12-26", "2026-12-25", "2026-01-01"),
        ranges=[(date(2026, 12, 27), date(2026, 12, 31)), (date(2026, 12, 30), date(2027, 1, 1))],
    )
    assert calendar.spans == (
        (date(2026, 1, 1), date(2026, 1, 1)),
        (date(2026, 12, 25), date(2027, 1, 1)),  # adjacent and overlapping ranges merge
    )
    assert calendar.day_count == 9
    assert date(2026, 12, 31) in calendar and date(2027, 1, 1) in calendar  # inclusive
    assert date(2026, 12, 24) not in calendar and date(2027, 1, 2) not in calendar
    assert calendar.span_of(date(2026, 12, 28)) == (date(2026, 12, 25), date(2027, 1, 1))
    assert calendar == ExclusionCalendar("holidays", tuple(reversed(calendar.spans)))
    assert hash(calendar) == hash(ExclusionCalendar("holidays", calendar.spans))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dates": [datetime(2026, 1, 1)]}, "calendar: a date must be a date, got datetime"),
        ({"dates": ["2026-01-01"]}, "calendar: a date must be a date, got str"),
        ({"ranges": [(date(2026, 1, 2), date(2026, 1, 1))]},
         "calendar: range 2026-01-02..2026-01-01 ends before it starts"),
        ({"ranges": [(date(2026, 1, 2),)]},
         "calendar: a range must be a (first, last) pair of dates"),
    ],
)  # fmt: skip
def test_calendar_input_errors(kwargs, message):
    with pytest.raises(ScheduleError) as caught:
        exclusion_calendar("c", **kwargs)
    assert caught.value.field == "calendar"
    assert caught.value.message == message


@pytest.mark.parametrize("name", ["", "  ", None, "x" * 201])
def test_calendar_needs_a_name(name):
    with pytest.raises(ScheduleError):
        exclusion_calendar(name)  # type: ignore[arg-type]


# --- the excluding wrapper ----------------------------------------------------------------

XMAS = exclusion_calendar("xmas", dates=days("2026-12-24", "2026-12-25"))


def test_excluded_slots_are_skipped_with_reason_excluded():
    daily = excluding(cron("0 9 * * *", "Europe/Berlin"), XMAS)
    got = slots(daily, utc(2026, 12, 23), utc(2026, 12, 27))
    assert got == [
        (utc(2026, 12, 23, 8), None),
        (utc(2026, 12, 24, 8), "excluded"),
        (utc(2026, 12, 25, 8), "excluded"),
        (utc(2026, 12, 26, 8), None),
    ]
    assert next_fire(daily, utc(2026, 12, 23, 8)) == utc(2026, 12, 26, 8)


def test_the_local_date_decides_not_the_utc_date():
    # 00:30 in Tokyo on Dec 24 is Dec 23 15:30 UTC: excluded; 23:30 Tokyo on Dec 25 too
    late = excluding(cron("30 0,23 * * *", "Asia/Tokyo"), XMAS)
    got = slots(late, utc(2026, 12, 23, 12), utc(2026, 12, 26, 12))
    assert got == [
        (utc(2026, 12, 23, 14, 30), None),  # 23:30 on the 23rd
        (utc(2026, 12, 23, 15, 30), "excluded"),
        (utc(2026, 12, 24, 14, 30), "excluded"),
        (utc(2026, 12, 24, 15, 30), "excluded"),
        (utc(2026, 12, 25, 14, 30), "excluded"),
        (utc(2026, 12, 25, 15, 30), None),  # 00:30 on the 26th
    ]


def test_exclusion_on_a_spring_forward_day_covers_the_shifted_slot():
    spring = exclusion_calendar("spring", dates=days("2026-03-29"))
    shifted = excluding(cron("30 2 * * *", "Europe/Berlin"), spring)
    got = slots(shifted, utc(2026, 3, 28), utc(2026, 3, 30, 12))
    assert got == [
        (utc(2026, 3, 28, 1, 30), None),
        (utc(2026, 3, 29, 1), "excluded"),  # 03:00 CEST, the gap's substitute
        (utc(2026, 3, 30, 0, 30), None),
    ]
    skipped = excluding(cron("30 2 * * *", "Europe/Berlin", dst_gap="skip"), spring)
    assert slots(skipped, utc(2026, 3, 29), utc(2026, 3, 29, 12)) == [
        (utc(2026, 3, 29, 1), "excluded")  # excluded replaces "dst"
    ]


def test_exclusion_on_a_fall_back_day_covers_both_repeated_hours():
    fall = exclusion_calendar("fall", dates=days("2026-11-01"))
    hourly = excluding(cron("0 * * * *", "America/New_York"), fall)
    got = slots(hourly, utc(2026, 11, 1, 3), utc(2026, 11, 2, 6))
    excluded = [at for at, reason in got if reason == "excluded"]
    assert len(excluded) == 25  # 01:00 EDT and 01:00 EST both, a 25-hour local day
    assert excluded[0] == utc(2026, 11, 1, 4) and excluded[-1] == utc(2026, 11, 2, 4)
    assert next_fire(hourly, utc(2026, 11, 1, 3)) == utc(2026, 11, 1, 3) + timedelta(hours=26)


def test_exclusion_before_a_midnight_gap():
    # Santiago 2026-09-06: 00:00 -> 01:00 (-04 -> -03); excluding Sep 5, the next fire is the
    # first hour of Sep 6 that exists, 01:00 -03
    sep5 = exclusion_calendar("sep5", dates=days("2026-09-05"))
    hourly = excluding(cron("0 * * * *", "America/Santiago"), sep5)
    assert next_fire(hourly, utc(2026, 9, 5, 12)) == utc(2026, 9, 6, 4)
    assert next_slot(hourly, utc(2026, 9, 6, 3)) == Slot(
        utc(2026, 9, 6, 4)
    )  # 23:00 -04 was the last


def test_exclusion_before_a_midnight_fall_back_repeats_the_excluded_hour():
    # Santiago 2026-04-05 03:00 UTC: 24:00 -03 -> 23:00 -04, so 23:00 on Apr 4 happens twice
    apr4 = exclusion_calendar("apr4", dates=days("2026-04-04"))
    hourly = excluding(cron("0 * * * *", "America/Santiago"), apr4)
    assert slots(hourly, utc(2026, 4, 5, 1, 30), utc(2026, 4, 5, 4)) == [
        (utc(2026, 4, 5, 2), "excluded"),  # 23:00 -03
        (utc(2026, 4, 5, 3), "excluded"),  # 23:00 -04, Apr 4 again
        (utc(2026, 4, 5, 4), None),  # 00:00 -04 on Apr 5
    ]
    assert next_fire(hourly, utc(2026, 4, 4, 12)) == utc(2026, 4, 5, 4)


def test_next_fire_steps_over_a_long_range_at_once():
    year = exclusion_calendar("2027", ranges=[(date(2027, 1, 1), date(2027, 12, 31))])
    minutely = excluding(cron("* * * * *", "Europe/Berlin"), year)
    started = time.perf_counter()
    assert next_fire(minutely, utc(2026, 12, 31, 12)) == utc(2026, 12, 31, 12, 1)
    assert next_fire(minutely, utc(2026, 12, 31, 22, 59)) == utc(2027, 12, 31, 23)  # 00:00 CET
    assert time.perf_counter() - started < 0.5  # not half a million skipped minutes
    assert next_slot(minutely, utc(2026, 12, 31, 22, 59)) == Slot(utc(2026, 12, 31, 23), "excluded")


def test_an_interval_needs_a_zone_for_its_local_dates():
    hourly = interval_schedule(3600, anchor=utc(2026, 1, 1), minimum_seconds=60)
    with pytest.raises(ScheduleError) as caught:
        excluding(hourly, XMAS)
    assert caught.value.field == "timezone"
    wrapped = excluding(hourly, XMAS, timezone="Pacific/Auckland")  # +13 in December
    assert next_slot(wrapped, utc(2026, 12, 23, 10)) == Slot(utc(2026, 12, 23, 11), "excluded")
    assert next_fire(wrapped, utc(2026, 12, 23, 10)) == utc(2026, 12, 25, 11)


def test_a_union_takes_its_parts_common_zone_or_needs_one():
    berlin = union([cron("0 9 * * *", "Europe/Berlin"), cron("0 18 * * *", "Europe/Berlin")])
    assert excluding(berlin, XMAS).timezone == "Europe/Berlin"
    mixed = union([cron("0 9 * * *", "Europe/Berlin"), cron("0 9 * * *", "Asia/Tokyo")])
    with pytest.raises(ScheduleError):
        excluding(mixed, XMAS)
    # each part in its own zone: wrap the parts
    per_part = union([excluding(part, XMAS) for part in mixed.parts])
    got = slots(per_part, utc(2026, 12, 24, 20), utc(2026, 12, 25, 12))
    assert got == [(utc(2026, 12, 25, 0), "excluded"), (utc(2026, 12, 25, 8), "excluded")]


def test_a_calendar_that_excludes_every_slot_is_refused():
    window = bounded(cron("0 9 * * *"), start=utc(2026, 12, 24), end=utc(2026, 12, 26))
    with pytest.raises(ScheduleError) as caught:
        excluding(window, XMAS)
    assert caught.value.field == "calendar"
    assert caught.value.message == "the exclusion calendar excludes every slot to fire"
    ExcludingSchedule(window, XMAS, "UTC")  # stored values: not re-checked


def test_excluding_words():
    words = describe(excluding(cron("0 9 * * 1-5", "Europe/Berlin"), XMAS))
    assert words == (
        "At 09:00, Monday through Friday (Europe/Berlin), "
        "except on the dates of 'xmas' (Europe/Berlin)"
    )
