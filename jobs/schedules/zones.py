"""Time zones: validation and a cached table of UTC offset transitions per (zone, year).

zoneinfo has no API listing transitions, so a year is scanned one day at a time and each
change of UTC offset is bisected to the second. Instants here are naive UTC datetimes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from .errors import ScheduleError

SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)
NEAR = timedelta(days=2)  # wider than any offset change a transition makes
Transition = tuple[datetime, timedelta, timedelta]  # (instant, offset before, offset after)


def validate_timezone(name: str) -> ZoneInfo:
    """The ZoneInfo for an IANA name, or ScheduleError(field="timezone")."""
    if not isinstance(name, str) or not name.strip():
        raise ScheduleError("timezone must be a non-empty IANA time zone name", "timezone")
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError, UnicodeError) as exc:
        raise ScheduleError(f"unknown time zone {name[:64]!r}", "timezone") from exc


def offset_at(zone: ZoneInfo, instant: datetime) -> timedelta:
    """The zone's UTC offset at a naive UTC instant."""
    return zone.fromutc(instant.replace(tzinfo=zone)).utcoffset()


def _bisect(zone: ZoneInfo, lo: datetime, hi: datetime, lo_offset: timedelta) -> datetime:
    """The first instant in (lo, hi] whose offset differs from ``lo_offset`` (to the second)."""
    low, high = 0, int((hi - lo).total_seconds())
    while high - low > 1:
        mid = (low + high) // 2
        if offset_at(zone, lo + mid * SECOND) == lo_offset:
            low = mid
        else:
            high = mid
    return lo + high * SECOND


@lru_cache(maxsize=8192)
def year_transitions(zone: ZoneInfo, year: int) -> tuple[Transition, ...]:
    """Offset changes at instants in [year-01-01, year+1-01-01) UTC, in order."""
    if not 2 <= year <= 9997:
        return ()
    start, end = datetime(year, 1, 1), datetime(year + 1, 1, 1)
    prev_at = start - SECOND
    prev = offset_at(zone, prev_at)
    found: list[Transition] = []
    at = start
    while True:
        current = offset_at(zone, at)
        if current != prev:
            instant = _bisect(zone, prev_at, at, prev)
            if instant < end:
                found.append((instant, prev, offset_at(zone, instant)))
        if at >= end:
            return tuple(found)
        prev_at, prev = at, current
        at = min(at + DAY, end)


@lru_cache(maxsize=8192)
def year_offset_bounds(zone: ZoneInfo, year: int) -> tuple[timedelta, timedelta]:
    """The smallest and largest UTC offset in effect at some instant of the year."""
    offsets = {offset_at(zone, datetime(max(year, 2), 1, 1))}
    for _, before, after in year_transitions(zone, year):
        offsets.update((before, after))
    return min(offsets), max(offsets)


def offset_bounds(zone: ZoneInfo, instant: datetime) -> tuple[timedelta, timedelta]:
    """Offset bounds over the instant's year and its neighbours (covers instant +- 1 day)."""
    return _three_year_bounds(zone, instant.year)


@lru_cache(maxsize=8192)
def _three_year_bounds(zone: ZoneInfo, year: int) -> tuple[timedelta, timedelta]:
    years = [year_offset_bounds(zone, year + k) for k in (-1, 0, 1)]
    return min(b[0] for b in years), max(b[1] for b in years)


def transitions_between(zone: ZoneInfo, lo: datetime, hi: datetime) -> list[Transition]:
    """All transitions with lo <= instant <= hi."""
    return [
        t
        for year in range(lo.year, hi.year + 1)
        for t in year_transitions(zone, year)
        if lo <= t[0] <= hi
    ]


def is_quiet(zone: ZoneInfo, after: datetime, candidate: datetime) -> bool:
    """True when no transition can affect wall times mapping into [after, candidate]:
    none lies within |offset change| (+ 1 minute) of that interval."""
    for year in range((after - NEAR).year, (candidate + NEAR).year + 1):
        for instant, before, after_offset in year_transitions(zone, year):
            reach = abs(after_offset - before) + MINUTE
            if after - reach <= instant <= candidate + reach:
                return False
    return True


def transition_in(zone: ZoneInfo, lo: datetime, hi: datetime) -> datetime:
    """The transition instant in (lo, hi] (where a gap's wall times are moved to)."""
    for instant, _, _ in transitions_between(zone, lo, hi):
        if instant > lo:
            return instant
    return _bisect(zone, lo, hi, offset_at(zone, lo))
