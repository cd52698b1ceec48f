"""DST behaviour: the vectors of the time-and-dst.md reference, and every policy across spring
and fall transitions in both hemispheres and across a 30-minute shift (Lord Howe).

Expected instants are written out by hand from the policy, in UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from jobs.schedules import Slot, iter_slots, next_fire, next_slot, parse_cron
from jobs.schedules.zones import year_transitions


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def slots(expression, zone, after, until, **policy) -> list[tuple[datetime, str | None]]:
    schedule = parse_cron(expression, timezone=zone, seed="s", **policy)
    return [(s.at, s.skip_reason) for s in iter_slots(schedule, after, until)]


u = utc


def fire(at: datetime) -> tuple[datetime, None]:
    return at, None


def skipped(at: datetime) -> tuple[datetime, str]:
    return at, "dst"


GAPS = ("shift", "skip")
REPEATS = ("first", "last", "both")
CEST, CET = timezone(timedelta(hours=2)), timezone(timedelta(hours=1))


# --- the reference vectors ------------------------------------------------------------------


def test_vector_berlin_spring_gap_fires_at_three_cest():
    schedule = parse_cron("30 2 * * *", timezone="Europe/Berlin", seed="s")
    at = next_fire(schedule, datetime(2026, 3, 28, 12, tzinfo=CET))
    assert at == datetime(2026, 3, 29, 3, 0, tzinfo=CEST) == utc(2026, 3, 29, 1)
    assert at.tzinfo is UTC


def test_vector_berlin_fall_fires_once_at_0230_cest():
    got = slots("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), utc(2026, 10, 26, 12))
    assert got == [fire(datetime(2026, 10, 25, 2, 30, tzinfo=CEST)), fire(utc(2026, 10, 26, 1, 30))]


def test_vector_new_york_fall_fires_once_at_0530_utc():
    got = slots("30 1 * * *", "America/New_York", utc(2026, 11, 1), utc(2026, 11, 1, 23))
    assert got == [fire(utc(2026, 11, 1, 5, 30))]


def test_vector_pacific_hourly_fires_at_both_one_oclocks():
    got = slots("0 * * * *", "US/Pacific", utc(2026, 11, 1, 7, 30), utc(2026, 11, 1, 10))
    pdt, pst = timezone(timedelta(hours=-7)), timezone(timedelta(hours=-8))
    assert got == [
        fire(datetime(2026, 11, 1, 1, tzinfo=pdt)),  # 08:00 UTC
        fire(datetime(2026, 11, 1, 1, tzinfo=pst)),  # 09:00 UTC
        fire(utc(2026, 11, 1, 10)),
    ]


def test_vector_weekly_across_spring_forward_is_the_same_week():
    schedule = parse_cron("0 12 * * 0", timezone="Europe/Berlin", seed="s")
    start = datetime(2022, 3, 24, tzinfo=ZoneInfo("Europe/Berlin"))
    assert next_fire(schedule, start) == datetime(2022, 3, 27, 12, tzinfo=CEST)


# --- fixed-time jobs, every policy ----------------------------------------------------------
# Transitions in 2026 (UTC): Berlin spring 03-29 01:00, fall 10-25 01:00; New York spring
# 03-08 07:00, fall 11-01 06:00; Sydney fall 04-04 16:00, spring 10-03 16:00; Lord Howe
# fall 04-04 15:00 (+11 -> +10:30), spring 10-03 15:30 (+10:30 -> +11).

SPRING = [
    # (zone, expression, after, transition instant, the next normal fire)
    ("Europe/Berlin", "30 2 * * *", u(2026, 3, 28, 12), u(2026, 3, 29, 1), u(2026, 3, 30, 0, 30)),
    ("Europe/Berlin", "0,30 2 * * *", u(2026, 3, 28, 12), u(2026, 3, 29, 1), u(2026, 3, 30, 0)),
    ("America/New_York", "30 2 * * *", u(2026, 3, 7, 12), u(2026, 3, 8, 7), u(2026, 3, 9, 6, 30)),
    ("Australia/Sydney", "30 2 * * *", u(2026, 10, 3), u(2026, 10, 3, 16), u(2026, 10, 4, 15, 30)),
    (
        "Australia/Lord_Howe",
        "15 2 * * *",
        u(2026, 10, 3),
        u(2026, 10, 3, 15, 30),
        u(2026, 10, 4, 15, 15),
    ),
]


@pytest.mark.parametrize("repeat", REPEATS)
@pytest.mark.parametrize("gap", GAPS)
@pytest.mark.parametrize(("zone", "expression", "after", "moved", "following"), SPRING)
def test_fixed_time_in_a_gap(zone, expression, after, moved, following, gap, repeat):
    got = slots(expression, zone, after, following, dst_gap=gap, dst_repeat=repeat)
    first = fire(moved) if gap == "shift" else skipped(moved)
    assert got == [first, fire(following)]


FALL = [
    # (zone, expression, after, first occurrence, second occurrence, next day's fire)
    (
        "Europe/Berlin",
        "30 2 * * *",
        u(2026, 10, 24, 12),
        u(2026, 10, 25, 0, 30),
        u(2026, 10, 25, 1, 30),
        u(2026, 10, 26, 1, 30),
    ),
    (
        "America/New_York",
        "30 1 * * *",
        u(2026, 10, 31, 12),
        u(2026, 11, 1, 5, 30),
        u(2026, 11, 1, 6, 30),
        u(2026, 11, 2, 6, 30),
    ),
    (
        "Australia/Sydney",
        "30 2 * * *",
        u(2026, 4, 4),
        u(2026, 4, 4, 15, 30),
        u(2026, 4, 4, 16, 30),
        u(2026, 4, 5, 16, 30),
    ),
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        u(2026, 4, 4),
        u(2026, 4, 4, 14, 45),
        u(2026, 4, 4, 15, 15),
        u(2026, 4, 5, 15, 15),
    ),
]


@pytest.mark.parametrize("gap", GAPS)
@pytest.mark.parametrize("repeat", REPEATS)
@pytest.mark.parametrize(("zone", "expression", "after", "first", "second", "following"), FALL)
def test_fixed_time_in_a_repeated_hour(
    zone, expression, after, first, second, following, repeat, gap
):
    got = slots(expression, zone, after, following, dst_gap=gap, dst_repeat=repeat)
    expected = {"first": [first], "last": [second], "both": [first, second]}[repeat]
    assert got == [fire(at) for at in [*expected, following]]


@pytest.mark.parametrize("repeat", REPEATS)
def test_fixed_stepped_list_in_berlin_fall(repeat):
    got = slots(
        "0,30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), utc(2026, 10, 25, 12),
        dst_repeat=repeat,
    )  # fmt: skip
    first = [utc(2026, 10, 25, 0), utc(2026, 10, 25, 0, 30)]
    second = [utc(2026, 10, 25, 1), utc(2026, 10, 25, 1, 30)]
    expected = {"first": first, "last": second, "both": first + second}[repeat]
    assert got == [fire(at) for at in expected]


@pytest.mark.parametrize("gap", GAPS)
def test_gap_slots_and_a_normal_slot_at_the_same_instant_collapse(gap):
    # 02:00 and 02:30 are in the gap (moved to 03:00 CEST); 03:00 itself is a normal slot
    got = slots(
        "0,30 2,3 * * *", "Europe/Berlin", utc(2026, 3, 29), utc(2026, 3, 29, 2), dst_gap=gap
    )
    assert got == [fire(utc(2026, 3, 29, 1)), fire(utc(2026, 3, 29, 1, 30))]


def test_skip_policy_yields_one_skipped_slot_for_several_gap_times():
    got = slots(
        "0,20,40 2 * * *", "Europe/Berlin", utc(2026, 3, 29), utc(2026, 3, 29, 23), dst_gap="skip"
    )
    assert got == [skipped(utc(2026, 3, 29, 1))]


def test_next_fire_passes_over_a_skipped_slot():
    schedule = parse_cron("30 2 * * *", timezone="Europe/Berlin", seed="s", dst_gap="skip")
    after = utc(2026, 3, 28, 12)
    assert next_slot(schedule, after) == Slot(utc(2026, 3, 29, 1), "dst")
    assert next_fire(schedule, after) == utc(2026, 3, 30, 0, 30)


def test_after_the_first_occurrence_first_policy_does_not_fire_again():
    schedule = parse_cron("30 1 * * *", timezone="America/New_York", seed="s")
    for after in (utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 10), utc(2026, 11, 1, 6, 29)):
        assert next_fire(schedule, after) == utc(2026, 11, 2, 6, 30)


def test_after_the_moved_instant_the_gap_does_not_fire_again():
    schedule = parse_cron("30 2 * * *", timezone="Europe/Berlin", seed="s")
    assert next_fire(schedule, utc(2026, 3, 29, 1)) == utc(2026, 3, 30, 0, 30)


# --- elapsed-time (non-fixed) jobs ignore the policy ----------------------------------------


@pytest.mark.parametrize("repeat", REPEATS)
@pytest.mark.parametrize("gap", GAPS)
def test_stepped_jobs_follow_elapsed_time(gap, repeat):
    policy = {"dst_gap": gap, "dst_repeat": repeat}
    spring = slots(
        "*/30 * * * *", "Europe/Berlin", utc(2026, 3, 29), utc(2026, 3, 29, 1, 30), **policy
    )
    assert spring == [
        fire(utc(2026, 3, 29, 0, 30)),
        fire(utc(2026, 3, 29, 1)),
        fire(utc(2026, 3, 29, 1, 30)),
    ]
    fall = slots("*/30 * * * *", "Europe/Berlin", utc(2026, 10, 25), utc(2026, 10, 25, 2), **policy)
    assert [at for at, _ in fall] == [
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1),
        utc(2026, 10, 25, 1, 30),
        utc(2026, 10, 25, 2),
    ]
    in_gap_hour = slots(
        "*/10 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), utc(2026, 3, 30, 1), **policy
    )
    assert [at for at, _ in in_gap_hour] == [utc(2026, 3, 30, 0, m) for m in range(0, 60, 10)]
    repeated = slots(
        "*/20 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), utc(2026, 10, 25, 12), **policy
    )
    assert [at for at, _ in repeated] == [
        utc(2026, 10, 25, h, m) for h in (0, 1) for m in (0, 20, 40)
    ]


def test_lord_howe_quarter_hourly_across_the_half_hour_fall_back():
    got = slots(
        "*/15 * * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 14, 20), utc(2026, 4, 4, 15, 30)
    )
    assert [at for at, _ in got] == [
        utc(2026, 4, 4, 14, 30),
        utc(2026, 4, 4, 14, 45),
        utc(2026, 4, 4, 15),
        utc(2026, 4, 4, 15, 15),
        utc(2026, 4, 4, 15, 30),
    ]


def test_lord_howe_quarter_hourly_across_the_half_hour_gap():
    # 02:00 and 02:15 (+10:30) do not exist; 02:30 (+11) is 15:30 UTC
    got = slots("*/15 * * * *", "Australia/Lord_Howe", utc(2026, 10, 3, 15), utc(2026, 10, 3, 16))
    assert [at for at, _ in got] == [
        utc(2026, 10, 3, 15, 15),
        utc(2026, 10, 3, 15, 30),
        utc(2026, 10, 3, 15, 45),
        utc(2026, 10, 3, 16),
    ]


# --- zones without DST, midnight changes, odd offsets ---------------------------------------


@pytest.mark.parametrize(("zone", "offset"), [("UTC", 0), ("Asia/Tokyo", 9), ("Asia/Kolkata", 5.5)])
def test_zones_without_dst(zone, offset):
    got = slots("30 2 * * *", zone, utc(2026, 3, 1), utc(2026, 3, 3))
    local = timezone(timedelta(hours=offset))
    expected = [datetime(2026, 3, d, 2, 30, tzinfo=local) for d in (1, 2, 3)]
    assert [at for at, _ in got] == [e for e in expected if utc(2026, 3, 1) < e <= utc(2026, 3, 3)]


def test_santiago_midnight_gap_moves_midnight_to_one_oclock():
    zone = ZoneInfo("America/Santiago")
    (spring,) = [t for t in year_transitions(zone, 2026) if t[2] > t[1]]
    moved = spring[0].replace(tzinfo=UTC)
    assert moved.astimezone(zone).replace(tzinfo=None).time().isoformat() == "01:00:00"
    got = slots(
        "0 0 * * *", "America/Santiago", moved - timedelta(hours=12), moved + timedelta(hours=2)
    )
    assert got == [fire(moved)]


def test_year_transitions_are_exact():
    berlin = year_transitions(ZoneInfo("Europe/Berlin"), 2026)
    assert [t[0] for t in berlin] == [datetime(2026, 3, 29, 1), datetime(2026, 10, 25, 1)]
    lord_howe = year_transitions(ZoneInfo("Australia/Lord_Howe"), 2026)
    assert [(t[0], t[2] - t[1]) for t in lord_howe] == [
        (datetime(2026, 4, 4, 15), timedelta(minutes=-30)),
        (datetime(2026, 10, 3, 15, 30), timedelta(minutes=30)),
    ]
    assert year_transitions(ZoneInfo("UTC"), 2026) == ()


def test_after_in_any_zone_gives_utc_results():
    schedule = parse_cron("0 9 * * *", timezone="Europe/Berlin", seed="s")
    after = datetime(2026, 6, 1, 20, tzinfo=ZoneInfo("America/Los_Angeles"))
    assert next_fire(schedule, after) == utc(2026, 6, 2, 7)
    assert next_fire(schedule, after).tzinfo is UTC


def test_naive_after_is_a_type_error():
    schedule = parse_cron("0 9 * * *", timezone="Europe/Berlin", seed="s")
    with pytest.raises(TypeError):
        next_slot(schedule, datetime(2026, 1, 1))
    with pytest.raises(TypeError):
        next_fire(schedule, datetime(2026, 1, 1))
    with pytest.raises(TypeError):
        iter_slots(schedule, datetime(2026, 1, 1))
    with pytest.raises(TypeError):
        iter_slots(schedule, utc(2026, 1, 1), datetime(2026, 1, 2))
