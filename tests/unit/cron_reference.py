"""A slow, independent reference for cron with the day extensions and the seconds field, and
for the DST policy, used as the oracle of the property tests.

Nothing here comes from jobs.schedules: the fields are parsed again, and every day rule is
decided by looking at the days of the month (``calendar``), not by the formulas of
jobs/schedules/days.py: ``nW`` is "the weekday of the month closest to day n", ``LW`` "the
last day of the month that is a weekday", ``d#k`` "weekday d whose (day - 1) // 7 is k - 1",
``dL`` "weekday d with no same weekday a week later in the month". The DST mapping walks
wall-clock minutes (or seconds) and asks zoneinfo what each means, finding a gap's
transition by scanning, not bisecting.
"""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

_DOW_NAMES = {n: i for i, n in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
_MONTH_NAMES = {n: i + 1 for i, n in enumerate(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL",
                                                "AUG", "SEP", "OCT", "NOV", "DEC"))}  # fmt: skip
SECOND, MINUTE = timedelta(seconds=1), timedelta(minutes=1)


def _value(text: str, names: dict[str, int]) -> int:
    return names[text.upper()] if text.upper() in names else int(text)


def _plain(item: str, lo: int, top: int, names: dict[str, int]) -> set[int]:
    base, slash, step = item.partition("/")
    if base == "*":
        first, last = lo, top
    elif "-" in base:
        first, last = (_value(t, names) for t in base.split("-"))
    else:
        first = _value(base, names)
        last = max(top, first) if slash else first
    return set(range(first, last + 1, int(step) if slash else 1))


def _is_weekday(day: date) -> bool:
    return day.weekday() < 5


def _month_days(year: int, month: int) -> list[date]:
    return [date(year, month, d) for d in range(1, calendar.monthrange(year, month)[1] + 1)]


def _dom_rule(item: str, day: date) -> bool:
    days = _month_days(day.year, day.month)
    item = item.upper()
    if item == "LW":
        return day == [d for d in days if _is_weekday(d)][-1]
    if item.startswith("L"):
        offset = int(item[2:]) if item.startswith("L-") else 0
        return day.day == len(days) - offset
    target = int(item[:-1])  # nW
    if target > len(days):
        return False
    return day == min((d for d in days if _is_weekday(d)), key=lambda d: abs(d.day - target))


def _dow_rule(item: str, day: date) -> bool:
    weekday_of = day.isoweekday() % 7
    if "#" in item:
        name, _, nth = item.partition("#")
        return weekday_of == _value(name, _DOW_NAMES) % 7 and (day.day - 1) // 7 == int(nth) - 1
    same_next_week = day + timedelta(days=7)
    return weekday_of == _value(item[:-1], _DOW_NAMES) % 7 and same_next_week.month != day.month


class ReferenceCron:
    """Five fields, or six with seconds first; both day fields restricted: OR."""

    def __init__(self, expression: str):
        fields = expression.split()
        if len(fields) == 5:
            fields = ["0", *fields]
        self.six = len(expression.split()) == 6
        sec, minute, hour, dom, month, dow = fields
        self.seconds = set().union(*(_plain(i, 0, 59, {}) for i in sec.split(",")))
        self.minutes = set().union(*(_plain(i, 0, 59, {}) for i in minute.split(",")))
        self.hours = set().union(*(_plain(i, 0, 23, {}) for i in hour.split(",")))
        self.months = set().union(*(_plain(i, 1, 12, _MONTH_NAMES) for i in month.split(",")))
        self.dom_rules = [i for i in dom.split(",") if any(c in i.upper() for c in "LW")]
        self.dow_rules = [i for i in dow.split(",") if "#" in i or i.upper().endswith("L")]
        doms = [i for i in dom.split(",") if i not in self.dom_rules]
        dows = [i for i in dow.split(",") if i not in self.dow_rules]
        self.doms = set().union(set(), *(_plain(i, 1, 31, {}) for i in doms))
        self.dows = {
            v % 7 for v in set().union(set(), *(_plain(i, 0, 6, _DOW_NAMES) for i in dows))
        }
        self.dom_star = self.doms >= set(range(1, 32))
        self.dow_star = self.dows >= set(range(7))
        self.fixed = "*" not in minute and "*" not in hour

    def day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        by_dom = day.day in self.doms or any(_dom_rule(r, day) for r in self.dom_rules)
        by_dow = day.isoweekday() % 7 in self.dows or any(_dow_rule(r, day) for r in self.dow_rules)
        if self.dom_star and self.dow_star:
            return True
        if self.dom_star:
            return by_dow
        if self.dow_star:
            return by_dom
        return by_dom or by_dow

    def matches(self, wall: datetime) -> bool:
        return (
            wall.second in self.seconds
            and wall.minute in self.minutes
            and wall.hour in self.hours
            and self.day_matches(wall.date())
        )

    def next_after(self, wall: datetime, years: int = 41) -> datetime | None:
        """The first matching wall time strictly after ``wall``: day by day, then through
        the day's hours, minutes and seconds."""
        day = wall.date()
        for _ in range(366 * years):
            if self.day_matches(day):
                same_day = day == wall.date()  # skip the hours already past, for speed
                for h in sorted(h for h in self.hours if not same_day or h >= wall.hour):
                    for m in sorted(self.minutes):
                        if same_day and (h, m) < (wall.hour, wall.minute):
                            continue
                        for s in sorted(self.seconds):
                            found = datetime(day.year, day.month, day.day, h, m, s)
                            if found > wall:
                                return found
            day += timedelta(days=1)
        return None


# --- the DST policy, by walking wall-clock time -------------------------------------------


def _occurrences(zone: ZoneInfo, wall: datetime) -> list[datetime]:
    """The naive UTC instants showing ``wall``: 1, 2 (repeated) or 0 (in a gap)."""
    found = set()
    for fold in (0, 1):
        instant = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC).replace(tzinfo=None)
        if instant.replace(tzinfo=UTC).astimezone(zone).replace(tzinfo=None) == wall:
            found.add(instant)
    return sorted(found)


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    return instant.replace(tzinfo=UTC).astimezone(zone).utcoffset()


@lru_cache(maxsize=4096)
def _gap_transition(zone: ZoneInfo, wall: datetime) -> datetime:
    """The instant a gap containing ``wall`` starts: scanned minute by minute, then second
    by second, from the earliest instant the wall time could belong to."""
    before = wall.replace(tzinfo=zone, fold=0).utcoffset()  # PEP 495: fold=0 is "before"
    after = wall.replace(tzinfo=zone, fold=1).utcoffset()
    moment = wall - after
    while _offset(zone, moment + MINUTE) != after:
        moment += MINUTE
    while _offset(zone, moment) != after:
        moment += SECOND
    assert moment <= wall - before
    return moment


def reference_slots(
    expression: str, zone_name: str, after: datetime, until: datetime, gap: str, repeat: str
) -> list[tuple[datetime, str | None]]:
    """Slots with after < at <= until (aware UTC), by the policy of time-and-dst.md."""
    cron, zone = ReferenceCron(expression), ZoneInfo(zone_name)
    lo, hi = after.astimezone(UTC).replace(tzinfo=None), until.astimezone(UTC).replace(tzinfo=None)
    probes = [lo + timedelta(hours=h) for h in range(-48, int((hi - lo) / timedelta(hours=1)) + 49)]
    offsets = [_offset(zone, p) for p in probes]
    step = SECOND if cron.six else MINUTE
    wall = (lo + min(offsets)).replace(second=0, microsecond=0)
    found: dict[datetime, str | None] = {}
    while wall <= hi + max(offsets):
        if cron.matches(wall):
            occurrences = _occurrences(zone, wall)
            reason = None
            if not occurrences and cron.fixed:
                occurrences = [_gap_transition(zone, wall)]
                reason = None if gap == "shift" else "dst"
            elif len(occurrences) == 2 and cron.fixed and repeat != "both":
                occurrences = occurrences[:1] if repeat == "first" else occurrences[1:]
            for instant in occurrences:
                if found.get(instant, "none") is not None:  # a firing slot wins
                    found[instant] = reason
        wall += step
    return [(at.replace(tzinfo=UTC), found[at]) for at in sorted(found) if lo < at <= hi]
