"""The fast matcher: finds the next naive wall-clock minute (or second) matching the field
bit masks.

Each field is an int whose bit v is set when value v is selected, so "the next allowed value
>= x" is a shift and a lowest-set-bit, and a whole search costs a few microseconds. Two
extensions leave that path alone for plain expressions: day rules (``L``, ``W``, ``#``; see
:mod:`.days`) replace the per-day step with a cached per-month mask of matching days, and a
seconds field (six-field form) adds a step after the minute search.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

from .days import MONTH_MAX_DAYS, Rule, days_in_month, month_mask

MINUTE = timedelta(minutes=1)
MONTH_DAYS = MONTH_MAX_DAYS  # index = month, leap Feb
FULL_DOM = ((1 << 32) - 1) & ~1  # bits 1..31
FULL_DOW = (1 << 7) - 1  # bits 0..6, 0 = Sunday
# A satisfiable expression matches within 40 years: 8 for Feb 29 across 2100, and exactly 40
# for the rarest day rule, a fifth weekday of February (a leap year whose Feb 1 is that day).
SEARCH_YEARS = 40


def next_bit(mask: int, x: int) -> int:
    """The smallest set bit of ``mask`` at position >= x, or -1."""
    rest = mask >> x
    if not rest:
        return -1
    return x + (rest & -rest).bit_length() - 1


class CronMatcher:
    """Immutable compiled form of a resolved cron expression.

    ``seconds`` is None for the five-field form (matches at second 0, ignores seconds in
    :meth:`matches`); ``dom_rules``/``dow_rules`` hold the day extensions of each day field.
    """

    __slots__ = (
        "dom_any",
        "dom_rules",
        "doms",
        "dow_any",
        "dow_rules",
        "dows",
        "dows2",
        "hours",
        "minutes",
        "months",
        "ruled",
        "seconds",
        "sub_minute",
    )

    def __init__(
        self,
        minutes: int,
        hours: int,
        doms: int,
        months: int,
        dows: int,
        *,
        seconds: int | None = None,
        dom_rules: tuple[Rule, ...] = (),
        dow_rules: tuple[Rule, ...] = (),
    ):
        self.minutes, self.hours, self.doms, self.months, self.dows = (
            minutes,
            hours,
            doms,
            months,
            dows,
        )
        self.dows2 = dows | (dows << 7)  # two weeks of bits, for wrap-around searches
        # a day field whose plain values cover its whole range never restricts, whatever
        # rules it also lists (they add no day)
        self.dom_any = doms == FULL_DOM
        self.dow_any = dows == FULL_DOW
        self.dom_rules = () if self.dom_any else dom_rules
        self.dow_rules = () if self.dow_any else dow_rules
        self.ruled = bool(self.dom_rules or self.dow_rules)
        self.seconds = seconds
        self.sub_minute = seconds is not None and seconds != 1  # not just second 0

    @property
    def dom_only(self) -> bool:
        """Only the day-of-month field restricts days (the day-of-week field is ``*``)."""
        return not self.dom_any and self.dow_any

    def _month_mask(self, year: int, month: int) -> int:
        return month_mask(
            self.doms,
            self.dows,
            self.dom_rules,
            self.dow_rules,
            self.dom_any,
            self.dow_any,
            year,
            month,
        )

    def day_matches(self, day: date) -> bool:
        if self.ruled:
            return bool(self._month_mask(day.year, day.month) >> day.day & 1)
        dom_ok = bool(self.doms >> day.day & 1)
        dow_ok = bool(self.dows >> ((day.weekday() + 1) % 7) & 1)
        if self.dom_any or self.dow_any:
            return dom_ok and dow_ok
        return dom_ok or dow_ok

    def matches(self, wall: datetime) -> bool:
        """Does the naive wall-clock time match? Five-field: its minute (seconds ignored);
        six-field: its second too."""
        if self.seconds is not None and not self.seconds >> wall.second & 1:
            return False
        return self._minute_matches(wall)

    def _minute_matches(self, wall: datetime) -> bool:
        return bool(
            self.minutes >> wall.minute & 1
            and self.hours >> wall.hour & 1
            and self.months >> wall.month & 1
            and self.day_matches(wall)
        )

    def _next_day(self, year: int, month: int, day: int) -> int:
        """The first matching day >= ``day`` in this month, or -1."""
        if self.ruled:  # the mask holds no day past the month's end
            return next_bit(self._month_mask(year, month), day)
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
        """The first matching naive wall time strictly after ``moment`` (a whole minute for the
        five-field form, a whole second for the six-field one; None: none in 40 years)."""
        if self.sub_minute:
            return self._next_second_after(moment)
        return self._next_minute_after(moment)  # also exact for six-field with seconds "0"

    def _next_second_after(self, moment: datetime) -> datetime | None:
        minute = moment.replace(second=0, microsecond=0)
        if self._minute_matches(minute):  # a later second of this same minute?
            second = next_bit(self.seconds, moment.second + 1)
            if second >= 0:
                return minute.replace(second=second)
        found = self._next_minute_after(minute)
        return None if found is None else found.replace(second=next_bit(self.seconds, 0))

    def _next_minute_after(self, moment: datetime) -> datetime | None:
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
