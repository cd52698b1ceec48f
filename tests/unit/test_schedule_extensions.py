"""Cron extensions: L, L-n, nW, LW in day-of-month; d#k and dL in day-of-week; the six-field
form with seconds. Month ends, leap years, DST days, errors and the never-fires rule.

Expected instants are written out by hand (weekdays checked against a calendar)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobs.schedules import (
    CronSchedule,
    ScheduleError,
    describe,
    iter_slots,
    next_fire,
    parse_cron,
    resolve_hash_fields,
)
from jobs.schedules.cron import compile_expression


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def cron(expression: str, timezone: str = "UTC", **kwargs) -> CronSchedule:
    return parse_cron(expression, timezone=timezone, seed="job-1", **kwargs)


def fires(expression: str, after: datetime, count: int, timezone: str = "UTC", **kw) -> list:
    schedule, out = cron(expression, timezone, **kw), []
    for _ in range(count):
        after = next_fire(schedule, after)
        out.append(after)
    return out


def days(expression: str, after: datetime, count: int) -> list[str]:
    return [f"{at:%Y-%m-%d}" for at in fires(expression, after, count)]


# --- day of month: L, L-n, nW, LW ---------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # the last day, across 31/30/28/29-day months
        ("0 0 L * *", utc(2026, 1, 1), ["2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30"]),
        ("0 0 L 2 *", utc(2027, 3, 1), ["2028-02-29", "2029-02-28"]),  # leap year
        ("0 0 L 2 *", utc(2099, 3, 1), ["2100-02-28", "2101-02-28"]),  # 2100 is not leap
        ("0 0 L-3 * *", utc(2026, 1, 1), ["2026-01-28", "2026-02-25", "2026-03-28"]),
        ("0 0 L-1 2 *", utc(2027, 3, 1), ["2028-02-28", "2029-02-27"]),
        # L-30: day 1 of 31-day months only
        ("0 0 L-30 * *", utc(2026, 1, 2), ["2026-03-01", "2026-05-01", "2026-07-01"]),
        ("0 0 L-28 2 *", utc(2026, 1, 1), ["2028-02-01", "2032-02-01"]),  # leap Februaries
        # nW: Saturday -> Friday before, Sunday -> Monday after, weekdays unchanged
        ("0 0 15W * *", utc(2026, 1, 1), ["2026-01-15", "2026-02-16", "2026-03-16"]),
        ("0 0 15W 8 *", utc(2026, 1, 1), ["2026-08-14", "2027-08-16"]),  # Sat; Sun
        # never across the month: the 1st a Saturday -> Monday the 3rd (not Friday the 31st)
        ("0 0 1W 8 *", utc(2026, 1, 1), ["2026-08-03", "2027-08-02"]),  # Sat; Sun
        # the last day a Sunday -> Friday (not Monday the 1st of the next month)
        ("0 0 31W 5 *", utc(2026, 1, 1), ["2026-05-29", "2027-05-31"]),
        ("0 0 30W 11 *", utc(2025, 1, 1), ["2025-11-28", "2026-11-30"]),  # Sun 30; Mon 30
        # 29W in February: only leap years; Feb 29 2032 is a Sunday -> Friday 27
        ("0 0 29W 2 *", utc(2026, 1, 1), ["2028-02-29", "2032-02-27", "2036-02-29"]),
        # 31W: no day in 30-day months (like a plain 31), never moved into them
        ("0 0 31W * *", utc(2026, 3, 1), ["2026-03-31", "2026-05-29", "2026-07-31"]),
        # LW: the last weekday; Sat 28 Feb 2026 -> Fri 27; Sun 31 May -> Fri 29
        ("0 0 LW * *", utc(2026, 1, 1), ["2026-01-30", "2026-02-27", "2026-03-31"]),
        ("0 0 LW 5 *", utc(2026, 1, 1), ["2026-05-29", "2027-05-31"]),
        ("0 0 LW 2 *", utc(2027, 3, 1), ["2028-02-29", "2029-02-28"]),  # Tue; Wed
        # lists: each item selects its days, the field their union
        ("0 0 1,L * *", utc(2026, 1, 1), ["2026-01-31", "2026-02-01", "2026-02-28"]),
        ("0 0 1W,15W 8 *", utc(2026, 1, 1), ["2026-08-03", "2026-08-14", "2027-08-02"]),
        ("0 0 l,lw 1 *", utc(2026, 1, 1), ["2026-01-30", "2026-01-31", "2027-01-29"]),  # case
    ],
)
def test_day_of_month_extensions(expression, after, expected):
    assert days(expression, after, len(expected)) == expected


# --- day of week: d#k, dL ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("0 0 * * 1#2", utc(2026, 1, 1), ["2026-01-12", "2026-02-09", "2026-03-09"]),
        ("0 0 * * MON#1", utc(2026, 1, 1), ["2026-01-05", "2026-02-02", "2026-03-02"]),
        ("0 0 * * 0#1", utc(2026, 1, 1), ["2026-01-04", "2026-02-01", "2026-03-01"]),
        ("0 0 * * 7#1", utc(2026, 1, 1), ["2026-01-04", "2026-02-01", "2026-03-01"]),  # 7 = 0
        # a fifth Friday only in months that have five
        ("0 0 * * 5#5", utc(2026, 1, 1), ["2026-01-30", "2026-05-29", "2026-07-31"]),
        # ... and in February only in a leap year whose Feb 1 is a Friday: 2036, then 2064
        ("0 0 * 2 5#5", utc(2026, 1, 1), ["2036-02-29", "2064-02-29"]),
        # ... which across 2100 (not leap) can take exactly 40 years: the search horizon
        ("0 0 * 2 1#5", utc(2072, 3, 1), ["2112-02-29"]),
        ("0 0 * * 5L", utc(2026, 1, 1), ["2026-01-30", "2026-02-27", "2026-03-27"]),
        ("0 0 * * friL", utc(2026, 1, 1), ["2026-01-30", "2026-02-27", "2026-03-27"]),
        ("0 0 * * 0L", utc(2026, 1, 1), ["2026-01-25", "2026-02-22", "2026-03-29"]),
        ("0 0 * * 7L", utc(2026, 1, 1), ["2026-01-25", "2026-02-22", "2026-03-29"]),
        ("0 0 * 2 0L", utc(2031, 3, 1), ["2032-02-29"]),  # Feb 29 2032 is a Sunday
        # lists: the first Monday and the third Wednesday; every Monday and the last Friday
        ("0 0 * 1 1#1,3#3", utc(2026, 1, 1), ["2026-01-05", "2026-01-21", "2027-01-04"]),
        ("0 0 * 1 1,5L", utc(2026, 1, 20), ["2026-01-26", "2026-01-30", "2027-01-04"]),
    ],
)
def test_day_of_week_extensions(expression, after, expected):
    assert days(expression, after, len(expected)) == expected


# --- combining the two day fields ---------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # both restricted: either matches (OR), extensions or not
        ("0 0 13 * 5#2", utc(2026, 1, 1), ["2026-01-09", "2026-01-13", "2026-02-13"]),
        ("0 0 L * 1", utc(2026, 1, 25), ["2026-01-26", "2026-01-31", "2026-02-02"]),
        ("0 0 L * 5L", utc(2026, 1, 1), ["2026-01-30", "2026-01-31", "2026-02-27"]),
        ("0 0 15W * 0#1", utc(2026, 2, 1), ["2026-02-16", "2026-03-01", "2026-03-16"]),
        # one field covers its range: the other alone decides (AND with "every day")
        ("0 0 L * 0-6", utc(2026, 1, 1), ["2026-01-31", "2026-02-28"]),
        ("0 0 1-31 * 5L", utc(2026, 1, 1), ["2026-01-30", "2026-02-27"]),
        ("0 0 *,L * 1", utc(2026, 1, 1), ["2026-01-05", "2026-01-12"]),  # "*,L" is full
    ],
)
def test_day_fields_combine_with_the_or_rule(expression, after, expected):
    assert days(expression, after, len(expected)) == expected


def test_matcher_matches_agrees_with_next_after_on_rule_days():
    matcher = compile_expression("0 12 LW * 1#2")
    assert matcher.matches(datetime(2026, 2, 27, 12))  # last weekday of February 2026
    assert matcher.matches(datetime(2026, 2, 9, 12))  # second Monday
    assert not matcher.matches(datetime(2026, 2, 28, 12))  # Saturday, the last day
    assert not matcher.matches(datetime(2026, 2, 16, 12))  # third Monday


# --- never fires, errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 L-29 2 *",  # February has at most 29 days: L-29 would be day 0
        "0 0 L-30 2 *",
        "0 0 L-30 4,6,9,11 *",
        "0 0 31W 4 *",  # no 31st in April; W never moves a missing day into the month
        "0 0 30W 2 *",
        "0 0 31W,30W 2 *",
        "0 0 30,L-29 2 *",
    ],
)
def test_extensions_that_can_never_fire_are_refused(expression):
    with pytest.raises(ScheduleError) as caught:
        cron(expression)
    assert caught.value.field == "cron"
    assert "never fires" in caught.value.message


@pytest.mark.parametrize(
    "expression",
    ["0 0 L-28 2 *", "0 0 29W 2 *", "0 0 L-29 2,3 *", "0 0 31W 4 5#5", "0 0 * 2 3#5"],
)
def test_extensions_that_fire_rarely_are_accepted(expression):
    assert next_fire(cron(expression), utc(2026, 1, 1)) > utc(2026, 1, 1)


@pytest.mark.parametrize(
    ("expression", "field", "message"),
    [
        ("0 0 LL * *", "day_of_month", "day_of_month: 'LL' is not a valid value; the L and W "
         "forms are L, L-n, LW and nW (e.g. 15W)"),
        ("0 0 L-0 * *", "day_of_month", "day_of_month: 'L-0': the offset after L- must be "
         "between 1 and 30"),
        ("0 0 L-31 * *", "day_of_month", "the offset after L- must be between 1 and 30"),
        ("0 0 L- * *", "day_of_month", "'L-' is not a valid value"),
        ("0 0 0W * *", "day_of_month", "day_of_month: '0W': 0 is out of range 1-31"),
        ("0 0 32W * *", "day_of_month", "'32W': 32 is out of range 1-31"),
        ("0 0 1-5W * *", "day_of_month", "'1-5W' is not a valid value"),
        ("0 0 15W/2 * *", "day_of_month", "'15W/2' is not a valid value"),
        ("0 0 L-3W * *", "day_of_month", "'L-3W' is not a valid value"),
        ("0 0 W * *", "day_of_month", "'W' is not a valid value"),
        ("0 0 * * L", "day_of_week", "day_of_week: 'L' alone is not supported: name the "
         "weekday, e.g. 5L for the last Friday"),
        ("0 0 * * 1#0", "day_of_week", "day_of_week: '1#0': the occurrence after # must be "
         "between 1 and 5"),
        ("0 0 * * 1#6", "day_of_week", "must be between 1 and 5"),
        ("0 0 * * 1#", "day_of_week", "must be between 1 and 5"),
        ("0 0 * * #2", "day_of_week", "# takes a single weekday (1#2 = the second Monday)"),
        ("0 0 * * 1-5#2", "day_of_week", "'1-5#2': # takes a single weekday"),
        ("0 0 * * 8#1", "day_of_week", "day_of_week: 8 is out of range 0-7"),
        ("0 0 * * FOO#1", "day_of_week", "'FOO' is not a valid value"),
        ("0 0 * * 1-5L", "day_of_week", "'1-5L': L takes a single weekday (5L = the last "
         "Friday)"),
        ("0 0 * * 8L", "day_of_week", "8 is out of range 0-7"),
        ("0 0 * L *", "month", "month: 'L' is not a valid value"),  # only the day fields
        ("L * * * *", "minute", "minute: 'L' is not a valid value"),
    ],
)  # fmt: skip
def test_extension_errors_name_the_field(expression, field, message):
    with pytest.raises(ScheduleError) as caught:
        cron(expression)
    assert caught.value.field == field
    assert message in caught.value.message


def test_fixed_time_rule_is_unchanged_by_day_rules():
    assert cron("30 2 L * *").fixed_time
    assert cron("0 9 * * 1#1").fixed_time
    assert not cron("*/5 9 LW * *").fixed_time


# --- L, W and # on DST days ---------------------------------------------------------------


def slots(expression, zone, after, until, **policy):
    return [
        (s.at, s.skip_reason) for s in iter_slots(cron(expression, zone, **policy), after, until)
    ]


def test_last_sunday_of_march_in_berlin_is_the_spring_gap():
    # 02:30 does not exist on 2026-03-29: shifted to the transition, 03:00 CEST = 01:00 UTC
    got = slots("30 2 * 3 0L", "Europe/Berlin", utc(2026, 3, 1), utc(2026, 3, 31))
    assert got == [(utc(2026, 3, 29, 1), None)]
    skip = slots("30 2 * 3 0L", "Europe/Berlin", utc(2026, 3, 1), utc(2026, 3, 31), dst_gap="skip")
    assert skip == [(utc(2026, 3, 29, 1), "dst")]


def test_last_day_of_october_rule_on_the_fall_back_day_fires_once():
    # 2026-10-25 is the last Sunday; 02:30 happens twice; fixed-time: first occurrence (CEST)
    got = slots("30 2 * 10 7L", "Europe/Berlin", utc(2026, 10, 1), utc(2026, 11, 1))
    assert got == [(utc(2026, 10, 25, 0, 30), None)]
    both = slots("30 2 * 10 7L", "Europe/Berlin", utc(2026, 10, 1), utc(2026, 11, 1),
                 dst_repeat="both")  # fmt: skip
    assert both == [(utc(2026, 10, 25, 0, 30), None), (utc(2026, 10, 25, 1, 30), None)]


def test_second_sunday_of_march_in_new_york_and_its_first_sunday_of_november():
    spring = slots("30 2 * 3 0#2", "America/New_York", utc(2026, 3, 1), utc(2026, 4, 1))
    assert spring == [(utc(2026, 3, 8, 7), None)]  # 03:00 EDT
    fall = slots("30 1 * 11 SUN#1", "America/New_York", utc(2026, 11, 1), utc(2026, 12, 1))
    assert fall == [(utc(2026, 11, 1, 5, 30), None)]  # 01:30 EDT, not again at 06:30 UTC
    hourly = slots("0 * * 11 SUN#1", "America/New_York", utc(2026, 11, 1, 4), utc(2026, 11, 1, 8))
    assert [at for at, _ in hourly] == [utc(2026, 11, 1, h) for h in (5, 6, 7, 8)]  # elapsed


def test_lord_howe_half_hour_gap_on_a_first_sunday():
    # 2026-10-04 02:00 -> 02:30 (+10:30 -> +11); 02:15 is shifted to the transition
    got = slots("15 2 * 10 0#1", "Australia/Lord_Howe", utc(2026, 9, 1), utc(2026, 11, 1))
    assert got == [(utc(2026, 10, 3, 15, 30), None)]


def test_apia_skipped_day_with_l_minus_one():
    # Pacific/Apia skipped the whole of 2011-12-30 (-10:00 -> +14:00): L-1 of December that
    # year has no wall time at all; a fixed-time job shifts to the transition instant
    got = slots("0 12 L-1 12 *", "Pacific/Apia", utc(2011, 12, 1), utc(2012, 12, 31))
    assert got == [(utc(2011, 12, 30, 10), None), (utc(2012, 12, 29, 22), None)]  # +14:00 DST


def test_fixed_time_rule_on_the_fall_back_day_in_the_southern_hemisphere():
    # Australia/Sydney falls back on the first Sunday of April (2026-04-05, 03:00 -> 02:00)
    got = slots("30 2 * 4 0#1", "Australia/Sydney", utc(2026, 4, 1), utc(2026, 4, 30))
    assert got == [(utc(2026, 4, 4, 15, 30), None)]  # 02:30 AEDT, the first occurrence


# --- the six-field form -------------------------------------------------------------------


def test_six_fields_are_refused_without_a_minimum_interval():
    with pytest.raises(ScheduleError) as caught:
        cron("0 0 9 * * *")
    assert caught.value.field == "cron"
    assert caught.value.message == (
        "expected 5 fields (minute hour day-of-month month day-of-week), got 6; "
        "the 6-field (seconds) form is not accepted here"
    )


def test_six_fields_with_a_bad_seconds_field_still_say_the_form_is_refused():
    with pytest.raises(ScheduleError) as caught:
        cron("x 0 9 * * *")  # no minimum: the form is the problem, not the value
    assert caught.value.field == "cron"


@pytest.mark.parametrize("seconds", ["0", "30", "59", "H"])
@pytest.mark.parametrize("minimum", [1, 60, 3600])
def test_a_single_seconds_value_is_accepted_with_any_minimum(seconds, minimum):
    schedule = cron(f"{seconds} 0 9 * * *", minimum_interval_seconds=minimum)
    assert len(schedule.expression.split()) == 6


@pytest.mark.parametrize(
    ("seconds", "minimum", "gap"),
    [
        ("*/15", 60, 15),
        ("*/15", 16, 15),
        ("0,30", 60, 30),
        ("0,30", 31, 30),
        ("0,59", 2, 1),  # 59 -> 0 of the next minute: one second apart
        ("10,50", 21, 20),  # 50 -> 10 of the next minute: twenty seconds
        ("*", 2, 1),
    ],
)
def test_seconds_closer_than_the_minimum_are_refused(seconds, minimum, gap):
    with pytest.raises(ScheduleError) as caught:
        cron(f"{seconds} * * * * *", minimum_interval_seconds=minimum)
    assert caught.value.field == "second"
    unit = "second" if gap == 1 else "seconds"
    assert caught.value.message.startswith(
        f"second: {seconds!r} fires {gap} {unit} apart, more often than the minimum interval "
        f"of {minimum} seconds; use a single second (e.g. 0)"
    )


@pytest.mark.parametrize(
    ("seconds", "minimum"), [("*/15", 15), ("*/15", 1), ("0,30", 30), ("*", 1), ("10,50", 20)]
)
def test_seconds_at_least_the_minimum_apart_are_accepted(seconds, minimum):
    cron(f"{seconds} * * * * *", minimum_interval_seconds=minimum)


def test_minimum_below_one_counts_as_one():
    cron("* * * * * *", minimum_interval_seconds=0)


def test_minimum_must_be_an_int():
    with pytest.raises(TypeError):
        cron("0 * * * * *", minimum_interval_seconds="60")  # type: ignore[arg-type]


def test_seconds_field_errors_name_the_second_field():
    for expression, fragment in [("60 * * * * *", "second: 60 is out of range 0-59"),
                                 ("*/0 * * * * *", "step 0 must be between 1 and 60"),
                                 ("L * * * * *", "second: 'L' is not a valid value")]:  # fmt: skip
        with pytest.raises(ScheduleError) as caught:
            cron(expression, minimum_interval_seconds=1)
        assert caught.value.field == "second"
        assert fragment in caught.value.message


def test_seven_fields_are_still_refused():
    with pytest.raises(ScheduleError) as caught:
        cron("0 0 0 * * * 2026", minimum_interval_seconds=1)
    assert "7-field (year) form is not supported" in caught.value.message


def test_six_field_firing_times():
    got = fires("*/20 0 9 * * *", utc(2026, 1, 1, 8), 4, minimum_interval_seconds=20)
    assert got == [utc(2026, 1, 1, 9, 0, 0), utc(2026, 1, 1, 9, 0, 20), utc(2026, 1, 1, 9, 0, 40),
                   utc(2026, 1, 2, 9, 0, 0)]  # fmt: skip
    assert fires("30 * * * * *", utc(2026, 1, 1, 0, 0, 30), 2, minimum_interval_seconds=60) == [
        utc(2026, 1, 1, 0, 1, 30),
        utc(2026, 1, 1, 0, 2, 30),
    ]
    # strictly after, with a fractional second
    after = datetime(2026, 1, 1, 0, 0, 29, 999999, tzinfo=UTC)
    assert fires("30 * * * * *", after, 1, minimum_interval_seconds=60) == [
        utc(2026, 1, 1, 0, 0, 30)
    ]
    assert fires("0 0 0 L * *", utc(2026, 1, 1), 1, minimum_interval_seconds=60) == [
        utc(2026, 1, 31)
    ]


def test_six_field_matches_checks_the_second():
    matcher = compile_expression("30 0 9 * * *")
    assert matcher.matches(datetime(2026, 1, 1, 9, 0, 30))
    assert not matcher.matches(datetime(2026, 1, 1, 9, 0, 0))
    assert compile_expression("0 9 * * *").matches(datetime(2026, 1, 1, 9, 0, 30))  # 5 fields


def test_six_field_h_keeps_the_five_field_positions():
    five = resolve_hash_fields("H H * * *", "job-7").split()
    six = resolve_hash_fields("H H H * * *", "job-7").split()
    assert six[1:3] == five[:2]  # the minute and hour hash as in the five-field form
    assert 0 <= int(six[0]) <= 59


@pytest.mark.parametrize(
    ("expression", "fixed"),
    [("*/10 30 2 * * *", True), ("0 30 * * * *", False), ("0 */5 2 * * *", False),
     ("* 0 9 * * *", True)],
)  # fmt: skip
def test_six_field_fixed_time_looks_at_minute_and_hour(expression, fixed):
    assert cron(expression, minimum_interval_seconds=1).fixed_time is fixed


def test_six_field_fixed_time_in_berlin_gap_and_repeat():
    spring = slots("*/20 30 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), utc(2026, 3, 29, 12),
                   minimum_interval_seconds=20)  # fmt: skip
    assert spring == [(utc(2026, 3, 29, 1), None)]  # three wall times in the gap, one run
    fall = slots("*/20 30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), utc(2026, 10, 25, 12),
                 minimum_interval_seconds=20)  # fmt: skip
    assert fall == [(utc(2026, 10, 25, 0, 30, s), None) for s in (0, 20, 40)]  # first only


def test_six_field_elapsed_time_in_new_york_fall_back():
    got = slots("0 30 * * * *", "America/New_York", utc(2026, 11, 1, 5), utc(2026, 11, 1, 7),
                minimum_interval_seconds=60)  # fmt: skip
    assert [at for at, _ in got] == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30)]


# --- descriptions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("0 0 L * *", "At 00:00, on the last day of the month"),
        ("0 0 L-3 * *", "At 00:00, on the last day of the month minus 3 days"),
        ("0 0 15W * *", "At 00:00, on the weekday nearest day 15 of the month"),
        ("0 0 LW * *", "At 00:00, on the last weekday of the month"),
        ("0 0 * * 1#2", "At 00:00, on the second Monday of the month"),
        ("0 0 * * 5L", "At 00:00, on the last Friday of the month"),
        ("0 0 * * 7L", "At 00:00, on the last Sunday of the month"),
        # where cron-descriptor garbles lists or hides the OR of the two day fields
        ("0 0 1,L * *", "At 00:00, on day 1 and the last day of the month"),
        ("0 9 1W,15W * *", "At 09:00, on the weekday nearest day 1 of the month and the "
         "weekday nearest day 15 of the month"),
        ("0 0 * * 1,5L", "At 00:00, on Monday and the last Friday of the month"),
        ("0 0 13 * 5#2", "At 00:00, on day 13, or on the second Friday of the month"),
        ("0 9 L * 1-5", "At 09:00, on the last day of the month, or on Monday through Friday"),
        ("0 0 L 2 *", "At 00:00, on the last day of the month, only in February"),
        ("*/15 9-17 LW */3 *", "Every 15 minutes, between 09:00 and 17:59, on the last weekday "
         "of the month, every 3 months"),
        ("10 30 9 L * *", "At 09:30:10, on the last day of the month"),
        ("30 0 9 * * 1-5", "At 09:00:30, Monday through Friday"),  # cron-descriptor's own
    ],
)  # fmt: skip
def test_describe_extensions(expression, words):
    assert describe(CronSchedule(expression, "Europe/Berlin")) == f"{words} (Europe/Berlin)"


def test_describe_never_raises_on_a_bad_hand_built_schedule():
    assert describe(CronSchedule("0 0 L-99 * *", "UTC")) == "0 0 L-99 * * (UTC)"
