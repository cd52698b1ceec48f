"""Hypothesis properties 1-7 of the time-and-dst.md reference, checked against a brute-force oracle
that walks every UTC minute and asks zoneinfo directly what each one means."""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from jobs.schedules import (
    DST_GAP_CHOICES,
    DST_REPEAT_CHOICES,
    CronSchedule,
    ScheduleError,
    iter_slots,
    next_fire,
    next_slot,
    parse_cron,
    validate_timezone,
)
from jobs.schedules.cron import compile_expression
from jobs.schedules.reference import croniter_next
from jobs.schedules.zones import year_transitions

ZONES = [
    "UTC",
    "Europe/Berlin",
    "Europe/London",
    "Europe/Dublin",  # negative DST in tzdb
    "America/New_York",
    "US/Pacific",
    "America/Santiago",  # southern hemisphere, changes at midnight
    "America/St_Johns",  # -03:30 / -02:30
    "America/Havana",  # changes at midnight
    "Australia/Sydney",
    "Australia/Lord_Howe",  # 30-minute shift
    "Pacific/Chatham",  # +12:45 / +13:45
    "Asia/Kolkata",
    "Asia/Tokyo",
    "Africa/Casablanca",  # Ramadan transitions
    "Antarctica/Troll",  # two-hour shift
]
MINUTE = timedelta(minutes=1)
WINDOW = timedelta(hours=14)
FAST = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- strategies -----------------------------------------------------------------------------


def _items(lo: int, hi: int, values: st.SearchStrategy[int], hashes: list[str]):
    step = st.integers(1, min(hi - lo + 1, 30))
    pair = st.tuples(values, values).map(sorted)
    return st.one_of(
        values.map(str),
        pair.map(lambda p: f"{p[0]}-{p[1]}"),
        st.tuples(pair, step).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
        step.map(lambda n: f"*/{n}"),
        st.tuples(values, step).map(lambda t: f"{t[0]}/{t[1]}"),
        st.sampled_from(hashes),
    )


def _field(lo, hi, values, hashes, star_weight=1):
    items = st.lists(_items(lo, hi, values, hashes), min_size=1, max_size=3).map(",".join)
    return st.one_of(*[st.just("*")] * star_weight, items)


MINUTES = _field(0, 59, st.one_of(st.sampled_from([0, 15, 30, 45]), st.integers(0, 59)),
                 ["H", "H/15", "H/30", "H(0-29)"])  # fmt: skip
HOURS = _field(0, 23, st.one_of(st.integers(0, 3), st.integers(22, 23), st.integers(0, 23)),
               ["H", "H/6", "H(0-3)"])  # fmt: skip
DOMS = _field(1, 31, st.integers(1, 31), ["H", "H/10"], star_weight=4)
MONTHS = _field(1, 12, st.integers(1, 12), ["H", "H/3"], star_weight=4)
DOWS = _field(0, 7, st.integers(0, 7), ["H", "H(1-5)"], star_weight=3)
EXPRESSIONS = st.tuples(MINUTES, HOURS, DOMS, MONTHS, DOWS).map(" ".join)


@st.composite
def instants(draw, zone_name: str) -> datetime:
    zone = ZoneInfo(zone_name)
    year = draw(st.integers(2020, 2035))
    transitions = year_transitions(zone, year)
    if transitions and draw(st.integers(0, 2)):  # two times in three: near a transition
        moment = draw(st.sampled_from(transitions))[0]
        hours = draw(st.sampled_from([2, 2, 6]))
        moment += timedelta(seconds=draw(st.integers(-hours * 3600, hours * 3600)))
    else:
        moment = datetime(year, 1, 1) + timedelta(seconds=draw(st.integers(0, 365 * 86400)))
    if draw(st.booleans()):
        moment = moment.replace(second=0)
    aware = moment.replace(tzinfo=UTC)
    return aware.astimezone(zone) if draw(st.booleans()) else aware  # any aware input


@st.composite
def cases(draw) -> tuple[CronSchedule, datetime]:
    zone = draw(st.sampled_from(ZONES))
    try:
        schedule = parse_cron(
            draw(EXPRESSIONS),
            timezone=zone,
            seed=draw(st.text(max_size=8)),
            dst_gap=draw(st.sampled_from(DST_GAP_CHOICES)),
            dst_repeat=draw(st.sampled_from(DST_REPEAT_CHOICES)),
        )
    except ScheduleError:
        assume(False)
    return schedule, draw(instants(zone))


# --- the oracle -----------------------------------------------------------------------------


def _occurrences(zone: ZoneInfo, wall: datetime) -> list[datetime]:
    found = set()
    for fold in (0, 1):
        instant = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
        if instant.astimezone(zone).replace(tzinfo=None) == wall:
            found.add(instant)
    return sorted(found)


def _oracle_at(schedule: CronSchedule, zone: ZoneInfo, u: datetime, matcher=None):
    """None: no slot at u; else (u, skip_reason)."""
    matcher = matcher or compile_expression(schedule.expression)
    fixed = schedule.fixed_time
    local = u.astimezone(zone)
    wall = local.replace(tzinfo=None)
    if matcher.matches(wall):
        occurrences = _occurrences(zone, wall)
        if len(occurrences) == 1 or not fixed or schedule.dst_repeat == "both":
            return u, None
        if u == occurrences[0 if schedule.dst_repeat == "first" else -1]:
            return u, None
    before = (u - timedelta(microseconds=1)).astimezone(zone).utcoffset()
    if fixed and local.utcoffset() > before:  # u starts a gap: which wall times vanished?
        start = u.replace(tzinfo=None) + before
        walls = (start + k * MINUTE for k in range((local.utcoffset() - before) // MINUTE))
        if any(matcher.matches(w) for w in walls):
            return u, None if schedule.dst_gap == "shift" else "dst"
    return None


def oracle(schedule: CronSchedule, after: datetime, until: datetime) -> list:
    zone, matcher = ZoneInfo(schedule.timezone), compile_expression(schedule.expression)
    u = after.astimezone(UTC).replace(second=0, microsecond=0) + MINUTE
    found = []
    while u <= until:
        slot = _oracle_at(schedule, zone, u, matcher)
        if slot is not None:
            found.append(slot)
        u += MINUTE
    return found


# --- properties 1-4: exact agreement with the oracle ----------------------------------------


@st.composite
def transition_cases(draw) -> tuple[CronSchedule, datetime]:
    """Expressions aimed at the wall times a transition skips or repeats, from nearby."""
    zone_name = draw(st.sampled_from([z for z in ZONES if year_transitions(ZoneInfo(z), 2026)]))
    zone, year = ZoneInfo(zone_name), draw(st.integers(2020, 2035))
    instant, before, after = draw(st.sampled_from(year_transitions(zone, year)))
    walls = {instant + before, instant + after, instant + min(before, after) - MINUTE}
    hours = draw(st.lists(st.sampled_from(sorted({w.hour for w in walls})), min_size=1))
    minutes = draw(st.one_of(st.just("*/15"), st.lists(st.integers(0, 59), min_size=1)))
    expression = f"{minutes if isinstance(minutes, str) else ','.join(map(str, minutes))} "
    expression += f"{','.join(map(str, sorted(set(hours))))} * * *"
    schedule = parse_cron(
        expression,
        timezone=zone_name,
        seed="t",
        dst_gap=draw(st.sampled_from(DST_GAP_CHOICES)),
        dst_repeat=draw(st.sampled_from(DST_REPEAT_CHOICES)),
    )
    start = instant + timedelta(seconds=draw(st.integers(-3 * 3600, 3 * 3600)))
    return schedule, start.replace(tzinfo=UTC)


def _check_against_oracle(schedule: CronSchedule, after: datetime, window: timedelta) -> None:
    until = after + window
    got = [(s.at, s.skip_reason) for s in iter_slots(schedule, after, until)]
    assert got == oracle(schedule, after, until)
    instants_ = [at for at, _ in got]
    assert all(at.tzinfo is UTC for at in instants_)
    assert all(at > after for at in instants_)  # property 1
    assert instants_ == sorted(set(instants_))  # property 4: strictly increasing


@FAST
@given(cases())
def test_slots_equal_the_brute_force_walk(case):
    _check_against_oracle(*case, WINDOW)


@FAST
@given(transition_cases())
def test_slots_near_transitions_equal_the_brute_force_walk(case):
    _check_against_oracle(*case, timedelta(hours=8))


@FAST
@given(cases())
def test_next_fire_is_the_first_matching_instant(case):
    schedule, after = case
    fired = next_fire(schedule, after)
    assert fired > after  # property 1
    zone = ZoneInfo(schedule.timezone)
    wall = fired.astimezone(zone).replace(tzinfo=None)
    substitute = _oracle_at(schedule, zone, fired)  # property 2: matches, or the policy's
    assert substitute == (fired, None)  # substitute for a skipped wall time
    assert compile_expression(schedule.expression).matches(wall) or schedule.fixed_time
    horizon = min(fired - MINUTE, after + WINDOW)  # property 3: nothing matches in between
    assert [s for s in oracle(schedule, after, horizon) if s[1] is None] == []


# --- property 5: every call ends quickly ----------------------------------------------------


@settings(max_examples=150, deadline=timedelta(seconds=2))
@given(cases(), st.integers(1, 30))
def test_repeated_calls_terminate(case, count):
    schedule, after = case
    for _ in range(count):
        after = next_slot(schedule, after).at


# --- property 6: a fixed-time daily job fires exactly once per local day --------------------


DAILY_ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe",
               "America/Santiago", "America/Havana", "Pacific/Chatham", "America/St_Johns",
               "Europe/London", "Africa/Casablanca", "Antarctica/Troll"]  # fmt: skip


def _fires_per_local_day(expression: str, zone_name: str, year: int) -> Counter:
    zone = ZoneInfo(zone_name)
    schedule = parse_cron(expression, timezone=zone_name, seed="daily")
    start = datetime(year, 1, 1, tzinfo=zone) - timedelta(microseconds=1)
    until = datetime(year + 1, 1, 1, tzinfo=zone) - timedelta(microseconds=1)
    days = Counter(s.at.astimezone(zone).date() for s in iter_slots(schedule, start, until))
    assert all(s.skip_reason is None for s in iter_slots(schedule, start, until))
    return days


def _assert_once_per_day(days: Counter, year: int) -> None:
    expected = (datetime(year + 1, 1, 1) - datetime(year, 1, 1)).days
    assert len(days) == expected
    assert set(days.values()) == {1}, [d for d, n in days.items() if n != 1]


@settings(max_examples=40, deadline=None)
@given(
    zone=st.sampled_from(DAILY_ZONES),
    hour=st.one_of(st.integers(0, 3), st.integers(0, 23)),
    minute=st.sampled_from([0, 15, 30, 45, 59]),
    year=st.integers(2020, 2035),
)
def test_fixed_daily_job_fires_once_per_local_day(zone, hour, minute, year):
    _assert_once_per_day(_fires_per_local_day(f"{minute} {hour} * * *", zone, year), year)


def test_fixed_daily_job_once_per_day_whole_year_named_zones():
    for zone in ("Europe/Berlin", "America/New_York", "Australia/Sydney", "America/Santiago"):
        for expression in ("30 2 * * *", "0 0 * * *", "30 1 * * *", "30 23 * * *"):
            _assert_once_per_day(_fires_per_local_day(expression, zone, 2026), 2026)


# --- property 7: invalid input raises ScheduleError only ------------------------------------

JUNK = st.text(alphabet="0123456789*/-,()HhLW#?@ JANFEBMONSUNreboothly\t", max_size=40)


@settings(max_examples=500, deadline=None)
@given(expression=st.one_of(JUNK, st.text(max_size=30)), zone=st.sampled_from(ZONES))
def test_arbitrary_text_is_accepted_or_rejected_with_schedule_error(expression, zone):
    try:
        schedule = parse_cron(expression, timezone=zone, seed="x")
    except ScheduleError as exc:
        assert exc.field in {"cron", "minute", "hour", "day_of_month", "month", "day_of_week"}
        return
    next_fire(schedule, datetime(2026, 1, 1, tzinfo=UTC))


@settings(max_examples=200, deadline=None)
@given(name=st.text(max_size=30))
def test_arbitrary_time_zone_names(name):
    try:
        validate_timezone(name)
    except ScheduleError as exc:
        assert exc.field == "timezone"


@settings(max_examples=100, deadline=None)
@given(gap=st.text(max_size=8), repeat=st.text(max_size=8))
def test_arbitrary_policies(gap, repeat):
    try:
        parse_cron("0 2 * * *", timezone="UTC", seed="x", dst_gap=gap, dst_repeat=repeat)
    except ScheduleError as exc:
        assert exc.field in {"dst_gap", "dst_repeat"}


# --- the fast matcher agrees with croniter (where their semantics agree) --------------------

_EQUAL_RANGE = re.compile(r"(?<![0-9])([0-9]+)-\1(?![0-9])")


@settings(max_examples=400, deadline=None)
@given(expression=EXPRESSIONS, seed=st.text(max_size=4), when=instants("UTC"))
def test_matcher_agrees_with_croniter(expression, seed, when):
    try:
        resolved = parse_cron(expression, timezone="UTC", seed=seed).expression
    except ScheduleError:
        assume(False)
    fields = resolved.split()
    matcher = compile_expression(resolved)
    assume(not _EQUAL_RANGE.search(resolved))  # croniter 7: "3-3" is the whole field
    assume(not (matcher.dom_any and fields[2] != "*" and fields[4] != "*"))  # see reference.py
    assume(not (matcher.dow_any and fields[4] != "*" and fields[2] != "*"))
    assume(not re.search(r"(?<![-0-9])[0-9]+/", fields[4]))  # croniter: "7/2" in weekdays
    wall = when.replace(tzinfo=None)
    assert matcher.next_after(wall) == croniter_next(resolved, wall)
