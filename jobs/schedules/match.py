"""The fast matcher: finds the next naive wall-clock minute matching five field bit masks.

Each field is an int whose bit v is set when value v is selected, so "the next allowed value
>= x" is a shift and a lowest-set-bit, and a whole search costs a few microseconds.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

MINUTE = timedelta(minutes=1)
MONTH_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # index = month, leap Feb
FULL_DOM = ((1 << 32) - 1) & ~1  # bits 1..31
FULL_DOW = (1 << 7) - 1  # bits 0..6, 0 = Sunday
SEARCH_YEARS = 40  # a satisfiable expression matches within 8 years (Feb 29 across 2100)


def next_bit(mask: int, x: int) -> int:
    """The smallest set bit of ``mask`` at position >= x, or -1."""
    rest = mask >> x
    if not rest:
        return -1
    return x + (rest & -rest).bit_length() - 1


def days_in_month(year: int, month: int) -> int:
    if month == 2 and not (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)):
        return 28
    return MONTH_DAYS[month]


class CronMatcher:
    """Immutable compiled form of a resolved cron expression."""

    __slots__ = ("dom_any", "doms", "dow_any", "dows", "dows2", "hours", "minutes", "months")

    def __init__(self, minutes: int, hours: int, doms: int, months: int, dows: int):
        self.minutes, self.hours, self.doms, self.months, self.dows = (
            minutes,
            hours,
            doms,
            months,
            dows,
        )
        self.dows2 = dows | (dows << 7)  # two weeks of bits, for wrap-around searches
        self.dom_any = doms == FULL_DOM
        self.dow_any = dows == FULL_DOW

    @property
    def dom_only(self) -> bool:
        """Only the day-of-month field restricts days (the day-of-week field is ``*``)."""
        return not self.dom_any and self.dow_any

    def day_matches(self, day: date) -> bool:
        dom_ok = bool(self.doms >> day.day & 1)
        dow_ok = bool(self.dows >> ((day.weekday() + 1) % 7) & 1)
        if self.dom_any or self.dow_any:
            return dom_ok and dow_ok
        return dom_ok or dow_ok

    def matches(self, wall: datetime) -> bool:
        """Does the naive wall-clock time's minute match? (seconds are ignored)"""
        return bool(
            self.minutes >> wall.minute & 1
            and self.hours >> wall.hour & 1
            and self.months >> wall.month & 1
            and self.day_matches(wall)
        )

    def _next_day(self, year: int, month: int, day: int) -> int:
        """The first matching day >= ``day`` in this month, or -1."""
        last = days_in_month(year, month)
        if day > last:
            return -1
        by_dom = next_bit(self.doms, day)
        if self.dow_any:
            return by_dom if by_dom <= last else -1
        weekday = (date(year, month, day).weekday() + 1) % 7
        by_dow = day + next_bit(self.dows2, weekday) - weekday
        # dom_any: only the weekday restricts; otherwise both do and either may match (OR)
        found = by_dow if self.dom_any or by_dom < 0 else min(by_dom, by_dow)
        return found if found <= last else -1

    def next_after(self, moment: datetime) -> datetime | None:
        """The first matching naive minute strictly after ``moment`` (None: none in 40 years)."""
        start = moment.replace(second=0, microsecond=0) + MINUTE
        year, month, day = start.year, start.month, start.day
        hour, minute = start.hour, start.minute
        limit = min(year + SEARCH_YEARS, 9998)
        while year <= limit:
            found = next_bit(self.months, month)
            if found < 0:
                year, month, day, hour, minute = year + 1, 1, 1, 0, 0
                continue
            if found != month:
                month, day, hour, minute = found, 1, 0, 0
            found = self._next_day(year, month, day)
            if found < 0:
                month, day, hour, minute = month + 1, 1, 0, 0
                continue
            if found != day:
                day, hour, minute = found, 0, 0
            found = next_bit(self.hours, hour)
            if found < 0:
                day, hour, minute = day + 1, 0, 0
                continue
            if found != hour:
                hour, minute = found, 0
            found = next_bit(self.minutes, minute)
            if found < 0:
                hour, minute = hour + 1, 0
                continue
            return datetime(year, month, day, hour, found)
        return None
