"""Property tests of the cron extensions (L, W, #, seconds) and of the wrappers, against the
independent brute-force reference of cron_reference.py, and against croniter where croniter
supports the syntax with the same meaning (the day rules, six fields with seconds first, the
macros).

Examples are bounded so that this module adds well under 20 s to the unit suite.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from jobs.schedules import (
    DST_GAP_CHOICES,
    DST_REPEAT_CHOICES,
    CronSchedule,
    ScheduleError,
    Slot,
    bounded,
    describe,
    excluding,
    exclusion_calendar,
    iter_slots,
    next_fire_or_none,
    next_slot_or_none,
    one_off,
    parse_cron,
    union,
)
from jobs.schedules.cron import compile_expression
from jobs.schedules.reference import croniter_next
from jobs.schedules.zones import year_transitions

from .cron_reference import ReferenceCron, reference_slots

SOME = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- strategies -----------------------------------------------------------------------------

DOM_RULES = st.one_of(
    st.just("L"),
    st.integers(1, 30).map(lambda n: f"L-{n}"),
    st.just("LW"),
    st.integers(1, 31).map(lambda d: f"{d}W"),
)
DOW_RULES = st.one_of(
    st.tuples(st.integers(0, 7), st.integers(1, 5)).map(lambda t: f"{t[0]}#{t[1]}"),
    st.integers(0, 7).map(lambda d: f"{d}L"),
)


def _plain(lo: int, hi: int) -> st.SearchStrategy[str]:
    value = st.integers(lo, hi)
    pair = st.tuples(value, value).map(sorted)
    return st.one_of(
        value.map(str),
        pair.map(lambda p: f"{p[0]}-{p[1]}"),
        st.integers(2, 10).map(lambda n: f"*/{n}"),
    )


def _day_field(rules, plain) -> st.SearchStrategy[str]:
    items = st.lists(st.one_of(rules, rules, plain), min_size=1, max_size=3).map(",".join)
    return st.one_of(st.just("*"), items, items)


DOMS = _day_field(DOM_RULES, _plain(1, 31))
DOWS = _day_field(DOW_RULES, _plain(0, 7))
MONTHS = st.one_of(st.just("*"), st.just("*"), st.lists(st.integers(1, 12), min_size=1,
                   max_size=3).map(lambda ms: ",".join(map(str, sorted(set(ms))))))  # fmt: skip
MINUTES = st.one_of(st.just("*/15"), st.integers(0, 59).map(str), st.just("0,30"), st.just("*"))
HOURS = st.one_of(st.integers(0, 23).map(str), st.just("1-3"), st.just("*"), st.just("9,17"))
SECONDS = st.one_of(st.just("0"), st.integers(0, 59).map(str), st.just("*/20"), st.just("5,35"))
RULED = st.tuples(MINUTES, HOURS, DOMS, MONTHS, DOWS).map(" ".join)
RULED6 = st.tuples(SECONDS, RULED).map(" ".join)


def _compiles(expression: str) -> bool:
    try:
        compile_expression(expression)
    except ScheduleError:
        return False
    return True


# --- the matcher against the reference, on naive wall-clock time -----------------------------


@SOME
@given(
    expression=st.one_of(RULED, RULED6),
    when=st.datetimes(min_value=datetime(1995, 1, 1), max_value=datetime(2060, 12, 31)),
)
def test_matcher_next_after_equals_the_reference(expression, when):
    assume(_compiles(expression))
    expected = ReferenceCron(expression).next_after(when)
    assert compile_expression(expression).next_after(when) == expected
    assert expected is not None  # accepted means it fires (within the 40-year horizon)


@SOME
@given(expression=RULED, day=st.dates(min_value=date(1999, 1, 1), max_value=date(2101, 12, 31)))
def test_day_matches_equals_the_reference(expression, day):
    assume(_compiles(expression))
    matcher = compile_expression(expression)
    in_month = bool(matcher.months >> day.month & 1)  # day_matches looks at the day fields only
    assert (in_month and matcher.day_matches(day)) == ReferenceCron(expression).day_matches(day)


@SOME
@given(expression=st.tuples(st.just("0 0"), DOMS, MONTHS, st.just("*")).map(" ".join))
def test_refused_day_of_month_rules_never_match_and_accepted_ones_do(expression):
    # the never-fires rule is exact: refused iff the reference finds no day in 8 years
    # (day-of-month rules repeat within 8 years: Feb 29 across 2100)
    reference = ReferenceCron(expression)
    found = reference.next_after(datetime(2096, 1, 1), years=9)
    assert _compiles(expression) == (found is not None)


# --- DST: day rules aimed at transition days, against the wall-clock walk -------------------

DST_ZONES = ["America/New_York", "Europe/London", "Europe/Berlin", "Australia/Lord_Howe",
             "Pacific/Apia", "America/Santiago", "Australia/Sydney", "America/Havana",
             "Pacific/Chatham"]  # fmt: skip


def _rules_for(day: date) -> list[tuple[str, str]]:
    """(field, item) rules that select ``day``, worked out from the calendar."""
    last = calendar.monthrange(day.year, day.month)[1]
    weekday = day.isoweekday() % 7
    rules = [("dow", f"{weekday}#{(day.day - 1) // 7 + 1}")]
    if day.day + 7 > last:
        rules.append(("dow", f"{weekday or 7}L"))
    if day.day == last:
        rules.append(("dom", "L"))
    elif last - day.day <= 30:
        rules.append(("dom", f"L-{last - day.day}"))
    if weekday in range(1, 6):
        rules.append(("dom", f"{day.day}W"))
        if all(date(day.year, day.month, d).weekday() > 4 for d in range(day.day + 1, last + 1)):
            rules.append(("dom", "LW"))
    return rules


@st.composite
def transition_cases(draw, six: bool = False):
    zone_name = draw(st.sampled_from(DST_ZONES))
    zone = ZoneInfo(zone_name)
    years = (2010, 2020) if zone_name == "Pacific/Apia" else (2020, 2032)
    transitions = [t for y in range(*years) for t in year_transitions(zone, y)]
    instant, before, after = draw(st.sampled_from(transitions))
    field, rule = draw(st.sampled_from(_rules_for((instant + before).date())))
    other = draw(st.one_of(st.just("*"), DOWS if field == "dom" else DOMS))
    dom, dow = (rule, other) if field == "dom" else (other, rule)
    walls = {instant + before, instant + after, instant + min(before, after) - timedelta(minutes=1)}
    hours = draw(st.lists(st.sampled_from(sorted({w.hour for w in walls})), min_size=1))
    hour = draw(st.one_of(st.just(",".join(map(str, sorted(set(hours))))), st.just("*")))
    # "0-59/15" selects what "*/15" does but is fixed-time (no "*"): both policies get drawn
    minutes = st.sampled_from(["*/15", "0-59/15", "0,30", "15,45"])
    minute = draw(st.one_of(minutes, st.integers(0, 59).map(str)))
    expression = f"{minute} {hour} {dom} * {dow}"
    if six:
        expression = f"{draw(st.sampled_from(['0', '*/20', '5,35', '59']))} {expression}"
    try:
        schedule = parse_cron(
            expression,
            timezone=zone_name,
            seed="p",
            dst_gap=draw(st.sampled_from(DST_GAP_CHOICES)),
            dst_repeat=draw(st.sampled_from(DST_REPEAT_CHOICES)),
            minimum_interval_seconds=1,
        )
    except ScheduleError:
        assume(False)
    hours_around = 1 if six else 3
    offset = draw(st.integers(-hours_around * 3600, hours_around * 3600))
    return schedule, (instant + timedelta(seconds=offset)).replace(tzinfo=UTC)


def _check(schedule, after: datetime, window: timedelta) -> None:
    until = after + window
    got = [(s.at, s.skip_reason) for s in iter_slots(schedule, after, until)]
    expected = reference_slots(
        schedule.expression, schedule.timezone, after, until, schedule.dst_gap, schedule.dst_repeat
    )
    assert got == expected


@SOME
@given(transition_cases())
def test_day_rules_on_transition_days_equal_the_wall_clock_walk(case):
    _check(*case, timedelta(hours=8))


@FEW
@given(transition_cases(six=True))
def test_six_field_near_transitions_equals_the_wall_clock_walk(case):
    _check(*case, timedelta(hours=2))


@st.composite
def random_cases(draw):
    zone_name = draw(st.sampled_from([*DST_ZONES, "UTC", "Asia/Kolkata"]))
    try:
        schedule = parse_cron(
            draw(RULED), timezone=zone_name, seed="r",
            dst_gap=draw(st.sampled_from(DST_GAP_CHOICES)),
            dst_repeat=draw(st.sampled_from(DST_REPEAT_CHOICES)),
        )  # fmt: skip
    except ScheduleError:
        assume(False)
    start = datetime(2024, 1, 1) + timedelta(seconds=draw(st.integers(0, 3 * 365 * 86400)))
    return schedule, start.replace(tzinfo=UTC)


@FEW
@given(random_cases())
def test_random_ruled_expressions_equal_the_wall_clock_walk(case):
    schedule, after = case
    _check(schedule, after, timedelta(hours=14))
    # and the next slot beyond the window is the reference's next match, mapped
    slot = next_slot_or_none(schedule, after)
    assert slot is not None and slot.at > after


# --- croniter, where it supports the syntax with the same meaning ----------------------------


_EQUAL_RANGE = re.compile(r"(?<![0-9])([0-9]+)-\1(?![0-9])")


def _croniter_form(expression: str) -> str | None:
    """The expression in croniter's dialect, or None where croniter 7 has no equivalent or
    a different meaning (see reference.py): no L-n or LW; nW alone, only up to 28 (croniter
    clamps a missing day to the month's end) and only with day-of-week ``*`` (croniter fails
    or ANDs it with a restricted weekday); # and dL only when day-of-month is ``*`` (croniter
    ignores a restricted day of month next to them); dL is spelt Ld; no mixing of # or dL
    with plain weekdays."""
    minute, hour, dom, month, dow = expression.split()
    dom_items, dow_items = dom.split(","), dow.split(",")
    for item in dom_items:
        if item.startswith("L-") or item == "LW":
            return None
        if item.endswith("W") and (len(dom_items) > 1 or int(item[:-1]) > 28 or dow != "*"):
            return None
    ruled_dow = [i for i in dow_items if "#" in i or i.endswith("L")]
    if ruled_dow and (dom != "*" or len(ruled_dow) != len(dow_items)):
        return None
    dow = ",".join(f"L{i[:-1]}" if i.endswith("L") else i for i in dow_items)
    return f"{minute} {hour} {dom} {month} {dow}"


_L_LIST = st.lists(st.one_of(st.just("L"), st.integers(1, 31).map(str)), min_size=1, max_size=3)
_PLAIN_DOW = st.one_of(st.just("*"), st.integers(0, 6).map(str), st.just("1-5"), st.just("0,6"))
CRONITER_DAYS = st.one_of(
    st.tuples(_L_LIST.map(lambda items: ",".join(["L", *items])), _PLAIN_DOW),
    st.tuples(st.integers(1, 28).map(lambda d: f"{d}W"), st.just("*")),
    st.tuples(st.just("*"), st.lists(DOW_RULES, min_size=1, max_size=2).map(",".join)),
)
CRONITER_EXPRESSIONS = st.tuples(MINUTES, HOURS, CRONITER_DAYS, MONTHS).map(
    lambda t: f"{t[0]} {t[1]} {t[2][0]} {t[3]} {t[2][1]}"
)


WHEN = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1))


def _croniter_comparable(expression: str) -> str:
    """The croniter spelling of a five-field expression both read alike (else the example
    is dropped: the known divergences of reference.py)."""
    assume(_compiles(expression))
    translated = _croniter_form(expression)
    assert translated is not None
    matcher = compile_expression(expression)
    assume(not (matcher.dom_any and expression.split()[2] != "*"))  # see reference.py
    assume(not (matcher.dow_any and expression.split()[4] != "*"))
    assume("/" not in expression.split()[4])  # croniter: "7/2" in weekdays
    assume(not _EQUAL_RANGE.search(expression))  # croniter 7: "3-3" is the whole field
    return translated


@SOME
@given(expression=CRONITER_EXPRESSIONS, when=WHEN)
def test_matcher_agrees_with_croniter_where_it_supports_the_syntax(expression, when):
    translated = _croniter_comparable(expression)
    matcher = compile_expression(expression)
    assume(matcher.dom_rules or matcher.dow_rules)
    assert matcher.next_after(when) == croniter_next(translated, when)


CRONITER_SECONDS = st.one_of(
    SECONDS,
    st.integers(2, 30).map(lambda n: f"*/{n}"),
    st.tuples(st.integers(0, 58), st.integers(1, 59)).map(
        lambda t: f"{min(t)}-{max(t[0] + 1, t[1])}"
    ),
)
PLAIN_FIVE = st.tuples(MINUTES, HOURS, st.just("*"), MONTHS, _PLAIN_DOW).map(" ".join)


@SOME
@given(
    second=CRONITER_SECONDS,
    five=st.one_of(PLAIN_FIVE, CRONITER_EXPRESSIONS),
    when=WHEN,
)
def test_six_fields_agree_with_croniter_seconds_first(second, five, when):
    """Seconds first, as croniter reads them with `second_at_beginning`: with plain fields
    and with the day rules croniter reads alike."""
    translated = _croniter_comparable(five)
    assume(not _EQUAL_RANGE.search(second))
    expression = f"{second} {five}"
    assume(_compiles(expression))
    got = compile_expression(expression).next_after(when)
    assert got == croniter_next(f"{second} {translated}", when, seconds=True)


MACROS = ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"]


@SOME
@given(macro=st.sampled_from(MACROS), when=WHEN)
def test_macros_agree_with_croniter(macro, when):
    schedule = parse_cron(macro, timezone="UTC", seed="m")
    assert compile_expression(schedule.expression).next_after(when) == croniter_next(macro, when)


def test_known_croniter_differences():
    """Pinned so that a croniter upgrade that changes them is noticed (reference.py)."""
    wall = datetime(2026, 1, 1)
    # 13th OR second Friday here; croniter ignores the day of month next to "#"
    assert compile_expression("0 0 13 * 5#2").next_after(wall) == datetime(2026, 1, 9)
    assert compile_expression("0 0 13 * 5#2").next_after(datetime(2026, 1, 9)) == datetime(
        2026, 1, 13
    )
    assert croniter_next("0 0 13 * 5#2", datetime(2026, 1, 9)) == datetime(2026, 2, 13)
    # 31W: no day in a month without a 31st here; croniter moves it to the month's end
    assert compile_expression("0 0 31W * *").next_after(datetime(2026, 2, 1)) == datetime(
        2026, 3, 31
    )
    assert croniter_next("0 0 31W * *", datetime(2026, 2, 1)) == datetime(2026, 2, 27)


# --- the wrappers against list-level references -----------------------------------------------

BASE = datetime(2026, 3, 1, tzinfo=UTC)
PARTS = st.sampled_from(
    [
        ("0 9 * * *", "Europe/Berlin"),
        ("0 3 * * *", "America/New_York"),
        ("30 2 * * 0L", "Europe/Berlin"),
        ("0 */6 * * *", "UTC"),
        ("15 1 L * *", "Australia/Lord_Howe"),
        ("0 8 * * 1#2", "Europe/London"),
    ]
)


def _part(spec, gap: str):
    return parse_cron(spec[0], timezone=spec[1], seed="w", dst_gap=gap)


def _list(schedule, after, until):
    return [(s.at, s.skip_reason) for s in iter_slots(schedule, after, until)]


@FEW
@given(specs=st.lists(PARTS, min_size=1, max_size=3), gap=st.sampled_from(DST_GAP_CHOICES),
       days=st.integers(0, 60))  # fmt: skip
def test_union_is_the_merge_of_its_parts(specs, gap, days):
    parts = [_part(spec, gap) for spec in specs]
    after = BASE + timedelta(days=days)
    until = after + timedelta(days=10)
    merged: dict[datetime, str | None] = {}
    for part in parts:
        for at, reason in _list(part, after, until):
            if at not in merged or reason is None:  # first part's reason, unless one fires
                merged[at] = reason if at not in merged else None
    assert _list(union(parts), after, until) == sorted(merged.items())


@FEW
@given(spec=PARTS, start=st.integers(0, 40 * 24), length=st.integers(1, 20 * 24),
       after=st.integers(-24, 60 * 24))  # fmt: skip
def test_bounds_filter_start_inclusive_end_exclusive(spec, start, length, after):
    schedule = _part(spec, "shift")
    lo = BASE + timedelta(hours=start)
    hi = lo + timedelta(hours=length)
    try:
        window = bounded(schedule, start=lo, end=hi)
    except ScheduleError:
        assume(False)
    moment = BASE + timedelta(hours=after)
    horizon = hi + timedelta(days=2)
    expected = [s for s in _list(schedule, moment, horizon) if lo <= s[0] < hi]
    assert _list(window, moment, horizon) == expected
    if not expected:
        assert next_slot_or_none(window, moment) is None
        assert next_fire_or_none(window, moment) is None


@FEW
@given(spec=PARTS, excluded=st.lists(st.integers(0, 40), max_size=6), span=st.integers(0, 5))
def test_exclusion_marks_exactly_the_slots_on_excluded_local_dates(spec, excluded, span):
    schedule = _part(spec, "shift")
    first = BASE.date()
    calendar_ = exclusion_calendar(
        "c", ranges=[(first + timedelta(d), first + timedelta(d + span)) for d in excluded]
    )
    try:
        wrapped = excluding(schedule, calendar_)
    except ScheduleError:
        assume(False)
    zone = ZoneInfo(spec[1])
    until = BASE + timedelta(days=50)
    expected = [
        (at, "excluded" if at.astimezone(zone).date() in calendar_ else reason)
        for at, reason in _list(schedule, BASE, until)
    ]
    assert _list(wrapped, BASE, until) == expected
    firing = [at for at, reason in expected if reason is None]
    if firing:
        assert next_fire_or_none(wrapped, BASE) == firing[0]


@FEW
@given(
    wall=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2032, 12, 31)),
    zone=st.sampled_from(DST_ZONES),
    gap=st.sampled_from(DST_GAP_CHOICES),
    repeat=st.sampled_from(["first", "last"]),
)
def test_one_off_is_the_slot_a_fixed_time_cron_gives_that_wall_minute(wall, zone, gap, repeat):
    wall = wall.replace(second=0, microsecond=0)
    once = one_off(wall, zone, dst_gap=gap, dst_repeat=repeat)
    expression = f"{wall.minute} {wall.hour} {wall.day} {wall.month} *"
    daily = parse_cron(expression, timezone=zone, seed="o", dst_gap=gap, dst_repeat=repeat)
    around = [(wall + timedelta(days=d)).replace(tzinfo=UTC) for d in (-2, 2)]
    assert [Slot(once.at, once.skip_reason)] == list(iter_slots(daily, *around))


# --- descriptions never raise ---------------------------------------------------------------


@SOME
@given(expression=st.one_of(RULED, RULED6, st.text(max_size=30)))
def test_describing_any_expression_never_raises(expression):
    words = describe(CronSchedule(expression, "UTC"))
    assert isinstance(words, str) and words
