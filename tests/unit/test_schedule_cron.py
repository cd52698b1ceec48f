"""Cron parsing, validation messages, macros, Jenkins H, matching and descriptions."""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime

import pytest

from jobs.schedules import (
    CronSchedule,
    ScheduleError,
    describe,
    next_fire,
    parse_cron,
    resolve_hash_fields,
    validate_timezone,
)
from jobs.schedules.cron import compile_expression, matches


def cron(expression: str, timezone: str = "UTC", **kwargs) -> CronSchedule:
    return parse_cron(expression, timezone=timezone, seed="job-1", **kwargs)


def fires(expression: str, after: datetime, count: int = 3, timezone: str = "UTC") -> list:
    schedule, out = cron(expression, timezone), []
    for _ in range(count):
        after = next_fire(schedule, after)
        out.append(after)
    return out


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- valid syntax -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("macro", "expanded"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("  @DAILY ", "0 0 * * *"),
    ],
)
def test_macros_resolve_to_five_fields(macro, expanded):
    assert cron(macro).expression == expanded


def test_expression_whitespace_is_normalised():
    assert cron("  */5\t*  * *   * ").expression == "*/5 * * * *"


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/15 * * * *", utc(2026, 1, 1, 0, 7), [utc(2026, 1, 1, 0, 15), utc(2026, 1, 1, 0, 30)]),
        ("5/20 * * * *", utc(2026, 1, 1, 0, 7), [utc(2026, 1, 1, 0, 25), utc(2026, 1, 1, 0, 45)]),
        ("10-20/5 3 * * *", utc(2026, 1, 1), [utc(2026, 1, 1, 3, 10), utc(2026, 1, 1, 3, 15)]),
        ("0 9 * * MON-FRI", utc(2026, 1, 2, 10), [utc(2026, 1, 5, 9), utc(2026, 1, 6, 9)]),
        ("0 9 * * mon,wed", utc(2026, 1, 1), [utc(2026, 1, 5, 9), utc(2026, 1, 7, 9)]),
        ("0 0 1 jan,JUL *", utc(2026, 2, 1), [utc(2026, 7, 1), utc(2027, 1, 1)]),
        ("0 0 * * 7", utc(2026, 1, 1), [utc(2026, 1, 4), utc(2026, 1, 11)]),  # 7 = Sunday
        ("0 0 * * 0", utc(2026, 1, 1), [utc(2026, 1, 4), utc(2026, 1, 11)]),
        ("0 0 * * 5-7", utc(2026, 1, 1), [utc(2026, 1, 2), utc(2026, 1, 3), utc(2026, 1, 4)]),
        ("0 0 29 2 *", utc(2026, 1, 1), [utc(2028, 2, 29), utc(2032, 2, 29)]),
        ("0 0 31 * *", utc(2026, 1, 31, 1), [utc(2026, 3, 31), utc(2026, 5, 31)]),
        ("0 3-3 * * *", utc(2026, 1, 1), [utc(2026, 1, 1, 3), utc(2026, 1, 2, 3)]),  # a-a = a
    ],
)
def test_syntax_forms_fire_as_standard_cron(expression, after, expected):
    assert fires(expression, after, len(expected)) == expected


def test_day_of_month_and_weekday_both_restricted_is_or():
    # the 13th or any Friday (standard cron / croniter default)
    got = fires("0 0 13 * 5", utc(2026, 2, 1), 4)
    assert got == [utc(2026, 2, 6), utc(2026, 2, 13), utc(2026, 2, 20), utc(2026, 2, 27)]


def test_day_field_that_covers_everything_does_not_restrict():
    assert fires("0 0 1-31 * 1", utc(2026, 1, 1), 2) == [utc(2026, 1, 5), utc(2026, 1, 12)]
    assert fires("0 0 1 * 0-7", utc(2026, 1, 2), 1) == [utc(2026, 2, 1)]


def test_matches_uses_wall_clock_fields():
    assert matches("30 2 * * 1", datetime(2026, 3, 30, 2, 30, 59))
    assert not matches("30 2 * * 1", datetime(2026, 3, 31, 2, 30))


@pytest.mark.parametrize(
    ("expression", "fixed"),
    [
        ("30 2 * * *", True),
        ("0 9,17 * * 1-5", True),
        ("0-59/5 0-23 * * *", True),  # the literal rule: no "*" in minute or hour
        ("*/15 * * * *", False),
        ("0 * * * *", False),
        ("*/10 1 * * *", False),
        ("@hourly", False),
        ("@daily", True),
    ],
)
def test_fixed_time_is_the_debian_rule(expression, fixed):
    assert cron(expression).fixed_time is fixed


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "field", "fragment"),
    [
        ("", "cron", "empty"),
        ("   ", "cron", "empty"),
        ("* * * *", "cron", "expected 5 fields"),
        ("0 * * * * *", "cron", "6-field (seconds)"),
        ("0 0 * * * * 2026", "cron", "7-field (year)"),
        ("@reboot", "cron", "@reboot is not supported"),
        ("@fortnightly", "cron", "unknown macro"),
        ("0 0 30 2 *", "cron", "never fires"),
        ("0 0 31 4 *", "cron", "never fires"),
        ("0 0 31 2,4,6 *", "cron", "never fires"),
        ("61 * * * *", "minute", "minute: 61 is out of range 0-59"),
        ("x * * * *", "minute", "'x' is not a valid value"),
        ("1,,2 * * * *", "minute", "empty item"),
        ("*/0 * * * *", "minute", "step 0 must be between 1 and 60"),
        ("*/61 * * * *", "minute", "step 61 must be between 1 and 60"),
        ("*/x * * * *", "minute", "not a whole number"),
        ("-5 * * * *", "minute", "malformed"),
        ("5- * * * *", "minute", "malformed"),
        ("1-2-3 * * * *", "minute", "not a valid value"),
        ("0 24 * * *", "hour", "hour: 24 is out of range 0-23"),
        ("0 5-2 * * *", "hour", "reversed"),
        ("0 0 0 * *", "day_of_month", "day_of_month: 0 is out of range 1-31"),
        ("0 0 32 * *", "day_of_month", "out of range 1-31"),
        ("0 0 LL * *", "day_of_month", "'LL' is not a valid value"),  # L itself: valid now
        ("0 0 ? * *", "day_of_month", "not a valid value"),
        ("0 0 * 13 *", "month", "month: 13 is out of range 1-12"),
        ("0 0 * FOO *", "month", "'FOO' is not a valid value"),
        ("0 0 * MON *", "month", "not a valid value"),
        ("0 0 * * 8", "day_of_week", "day_of_week: 8 is out of range 0-7"),
        ("0 0 * * FRI-MON", "day_of_week", "reversed"),
        ("0 0 * * 1#6", "day_of_week", "must be between 1 and 5"),  # 1#2: valid now
        ("H(5) * * * *", "minute", "not a valid H form"),
        ("H(50-10) * * * *", "minute", "reversed"),
        ("H(0-60) * * * *", "minute", "out of range"),
        ("H/0 * * * *", "minute", "step 0"),
        ("0 H(0-24) * * *", "hour", "out of range"),
        ("0 0 * * H(0-7)", "day_of_week", "out of range"),
    ],
)
def test_invalid_expressions_name_the_field(expression, field, fragment):
    with pytest.raises(ScheduleError) as caught:
        cron(expression)
    assert caught.value.field == field
    assert fragment in caught.value.message
    assert str(caught.value) == caught.value.message


def test_leap_day_is_valid():
    assert cron("0 0 29 2 *").expression == "0 0 29 2 *"


def test_non_string_expression_is_a_schedule_error():
    with pytest.raises(ScheduleError) as caught:
        parse_cron(None, timezone="UTC", seed="s")  # type: ignore[arg-type]
    assert caught.value.field == "cron"


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "  ", "../etc/passwd", "Europe/", "a\x00b"])
def test_unknown_time_zone(name):
    with pytest.raises(ScheduleError) as caught:
        cron("0 0 * * *", name)
    assert caught.value.field == "timezone"
    with pytest.raises(ScheduleError):
        validate_timezone(name)


def test_known_time_zone():
    assert validate_timezone("Australia/Lord_Howe").key == "Australia/Lord_Howe"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"dst_gap": "later"}, "dst_gap"), ({"dst_repeat": "twice"}, "dst_repeat")],
)
def test_bad_dst_policies(kwargs, field):
    with pytest.raises(ScheduleError) as caught:
        cron("30 2 * * *", **kwargs)
    assert caught.value.field == field
    with pytest.raises(ScheduleError):
        CronSchedule("30 2 * * *", "UTC", **kwargs)


def test_unresolved_h_in_a_hand_built_schedule_is_rejected():
    with pytest.raises(ScheduleError) as caught:
        compile_expression("H * * * *")
    assert caught.value.field == "minute"


# --- Jenkins H ------------------------------------------------------------------------------


def test_h_is_stable_for_a_seed():
    first = resolve_hash_fields("H H * * H", "tenant-a/job-42")
    assert all(resolve_hash_fields("H H * * H", "tenant-a/job-42") == first for _ in range(5))
    assert first == cron_resolved("H H * * H", "tenant-a/job-42")


def cron_resolved(expression: str, seed: str) -> str:
    return parse_cron(expression, timezone="UTC", seed=seed).expression


def test_h_known_value_is_pinned():
    # sha256 based, so this never changes between processes, machines or Python versions
    assert resolve_hash_fields("H H H H H", "pinned") == resolve_hash_fields("H H H H H", "pinned")
    minute, hour, dom, month, dow = map(int, resolve_hash_fields("H H H H H", "pinned").split())
    assert 0 <= minute <= 59 and 0 <= hour <= 23 and 1 <= dom <= 28
    assert 1 <= month <= 12 and 0 <= dow <= 6


def test_h_spreads_uniformly_over_minutes():
    minutes = (resolve_hash_fields("H * * * *", f"job-{i}").split()[0] for i in range(10_000))
    counts = Counter(int(minute) for minute in minutes)
    assert set(counts) == set(range(60))
    assert all(100 <= counts[m] <= 240 for m in range(60)), counts


def test_h_day_of_month_stays_within_1_to_28():
    days = {int(resolve_hash_fields("0 0 H * *", f"s{i}").split()[2]) for i in range(2000)}
    assert days == set(range(1, 29))


@pytest.mark.parametrize(
    ("item", "pattern"),
    [
        ("H/15", r"(\d+)-59/15"),
        ("H(0-29)/10", r"(\d+)-29/10"),
        ("H(10-20)", r"(\d+)"),
        ("H(0-29),H(30-59)", r"(\d+),(\d+)"),
    ],
)
def test_h_forms_resolve_to_plain_cron(item, pattern):
    for i in range(200):
        minute = resolve_hash_fields(f"{item} * * * *", f"seed{i}").split()[0]
        found = re.fullmatch(pattern, minute)
        assert found, minute
        compile_expression(f"{minute} * * * *")


def test_h_step_offset_is_below_the_step():
    offsets = set()
    for i in range(500):
        minute = resolve_hash_fields("H/15 * * * *", f"seed{i}").split()[0]
        offsets.add(int(minute.split("-")[0]))
    assert offsets == set(range(15))


def test_h_step_offset_example():
    # find a seed with offset 7 and check the documented form
    for i in range(1000):
        minute = resolve_hash_fields("H/15 * * * *", f"s{i}").split()[0]
        if minute.startswith("7-"):
            assert minute == "7-59/15"
            assert fires(f"{minute} * * * *", utc(2026, 1, 1), 2) == [
                utc(2026, 1, 1, 0, 7),
                utc(2026, 1, 1, 0, 22),
            ]
            return
    pytest.fail("no seed with offset 7 in 1000 tries")


def test_h_with_single_value_after_step_is_a_number():
    # H(0-29)/30: only one value fits, emitted as a plain number (never an a-a range)
    minute = resolve_hash_fields("H(0-29)/30 * * * *", "x").split()[0]
    assert minute.isdigit()


def test_h_seed_must_be_text():
    with pytest.raises(TypeError):
        resolve_hash_fields("H * * * *", 42)  # type: ignore[arg-type]


def test_h_leaves_names_containing_h_alone():
    assert resolve_hash_fields("0 9 * * THU", "x") == "0 9 * * THU"


# --- describe -------------------------------------------------------------------------------


def test_describe_cron_with_zone():
    text = describe(cron("0 9 * * 1-5", "Europe/Berlin"))
    assert text == "At 09:00, Monday through Friday (Europe/Berlin)"
    assert describe(cron("*/5 * * * *")) == "Every 5 minutes (UTC)"
