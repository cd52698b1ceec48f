"""The day extensions of cron (Quartz forms): parsing, the days they select, whether they can
ever fire, and the bit mask of a month's matching days that the matcher's slow day path uses.

Day of month: ``L`` (last day), ``L-n`` (n = 1..30 days before the last day; no day in a
month shorter than n + 1 days), ``nW`` (the weekday nearest day n; no day in a month without
day n), ``LW`` (the last weekday). Day of week: ``d#k`` (the k-th weekday d, k = 1..5; no day
in a month with fewer than k of them) and ``dL`` (the last weekday d). ``d`` is 0-7 or a name.

``nW`` never leaves the month (Quartz): Saturday -> the Friday before, except on the 1st ->
Monday the 3rd; Sunday -> the Monday after, except on the last day -> the Friday before.
Each rule selects at most one day per month, so a month's matching days are a 31-bit mask.

Beyond Quartz (and croniter), a rule may be one item of a comma list (``1W,15W``, ``1,L``,
``1#1,3#3``): each item selects its days, the field their union. Refused: ``L`` alone in
day-of-week (Quartz reads it as Saturday, croniter refuses it: it names no weekday), ranges
or steps with a rule (``1-5W``, ``1-5#2``, ``L/2``) and ``L-nW``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date
from functools import lru_cache

from .errors import ScheduleError

# A rule is (kind, a, b): ("last", n, 0) = L-n (L: n = 0), ("nearest", d, 0) = dW,
# ("last_weekday", 0, 0) = LW, ("nth", weekday, k) = weekday#k, ("last_dow", weekday, 0) = dL.
# Weekdays are 0-6, 0 = Sunday. Plain tuples: hashable, so matchers and caches can key on them.
Rule = tuple[str, int, int]

MONTH_MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # Feb: in leap years
_ORDINALS = ("first", "second", "third", "fourth", "fifth")
_DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_LAST = re.compile(r"L(?:-([0-9]{1,9}))?")
_NEAREST = re.compile(r"([0-9]{1,9})W")
_DOM_FORMS = "L, L-n, LW and nW (e.g. 15W)"


def is_dom_rule(item: str) -> bool:
    """Does a day-of-month item use L or W (the field has no names to confuse them with)?"""
    upper = item.upper()
    return "L" in upper or "W" in upper


def is_dow_rule(item: str) -> bool:
    """A day-of-week item with ``#`` or a trailing ``L`` (no weekday name ends in L)."""
    return "#" in item or item[-1:] in ("L", "l")


def parse_dom_rule(item: str, error: Callable[[str], ScheduleError]) -> Rule:
    upper = item.upper()
    if upper == "LW":
        return ("last_weekday", 0, 0)
    last = _LAST.fullmatch(upper)
    if last is not None:
        offset = int(last.group(1) or 0)
        if last.group(1) is not None and not 1 <= offset <= 30:
            raise error(f"{item!r}: the offset after L- must be between 1 and 30")
        return ("last", offset, 0)
    nearest = _NEAREST.fullmatch(upper)
    if nearest is not None:
        day = int(nearest.group(1))
        if not 1 <= day <= 31:
            raise error(f"{item!r}: {day} is out of range 1-31")
        return ("nearest", day, 0)
    raise error(f"{item[:20]!r} is not a valid value; the L and W forms are {_DOM_FORMS}")


def parse_dow_rule(
    item: str, weekday: Callable[[str], int], error: Callable[[str], ScheduleError]
) -> Rule:
    """``weekday`` turns a single value (0-7 or a name) into 0-7 or raises the field's error."""
    if "#" in item:
        day_text, _, nth_text = item.partition("#")
        if not day_text or "-" in day_text or "/" in day_text or "*" in day_text:
            raise error(f"{item[:20]!r}: # takes a single weekday (1#2 = the second Monday)")
        day = weekday(day_text) % 7
        if not nth_text.isdigit() or not 1 <= int(nth_text[:9]) <= 5:
            raise error(f"{item[:20]!r}: the occurrence after # must be between 1 and 5")
        return ("nth", day, int(nth_text))
    day_text = item[:-1]
    if not day_text:
        raise error("'L' alone is not supported: name the weekday, e.g. 5L for the last Friday")
    if "-" in day_text or "/" in day_text or "*" in day_text:
        raise error(f"{item[:20]!r}: L takes a single weekday (5L = the last Friday)")
    return ("last_dow", weekday(day_text) % 7, 0)


def days_in_month(year: int, month: int) -> int:
    if month == 2 and not (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)):
        return 28
    return MONTH_MAX_DAYS[month]


def nearest_weekday(day: int, weekday: int, last: int) -> int:
    """Quartz ``W``: the weekday nearest ``day`` (whose weekday is ``weekday``, 0 = Sunday),
    staying within days 1..last."""
    if weekday == 6:  # Saturday
        return day + 2 if day == 1 else day - 1
    if weekday == 0:  # Sunday
        return day - 2 if day == last else day + 1
    return day


def rule_day(rule: Rule, last: int, first_weekday: int) -> int:
    """The day of the month a rule selects (0: none this month). ``first_weekday`` is the
    weekday of the 1st (0 = Sunday), ``last`` the month's last day."""
    kind, a, b = rule
    if kind == "last":
        return max(last - a, 0)
    if kind == "nearest":
        if a > last:
            return 0  # no day a this month: like a plain day number, nothing fires
        return nearest_weekday(a, (first_weekday + a - 1) % 7, last)
    if kind == "last_weekday":
        return nearest_weekday(last, (first_weekday + last - 1) % 7, last)
    if kind == "nth":
        day = 1 + (a - first_weekday) % 7 + 7 * (b - 1)
        return day if day <= last else 0
    if kind == "last_dow":
        return last - ((first_weekday + last - 1) - a) % 7
    raise AssertionError(f"unknown day rule {rule!r}")


def dom_rule_possible(rule: Rule, month: int) -> bool:
    """Can a day-of-month rule select a day in ``month`` in some year? (Feb: leap years.)"""
    kind, a, _ = rule
    if kind == "last":
        return a < MONTH_MAX_DAYS[month]
    if kind == "nearest":
        return a <= MONTH_MAX_DAYS[month]
    return True  # LW selects a day in every month


@lru_cache(maxsize=1024)
def weekday_days(first_weekday: int, dows: int) -> int:
    """The days 1..31 whose weekday is in the mask ``dows``, for a month starting on
    ``first_weekday`` (callers cut the bits past the month's last day)."""
    mask = 0
    for day in range(1, 32):
        if dows >> ((first_weekday + day - 1) % 7) & 1:
            mask |= 1 << day
    return mask


@lru_cache(maxsize=65536)
def month_mask(
    doms: int,
    dows: int,
    dom_rules: tuple[Rule, ...],
    dow_rules: tuple[Rule, ...],
    dom_any: bool,
    dow_any: bool,
    year: int,
    month: int,
) -> int:
    """The matching days of one month (bit d: day d), day fields combined the standard way:
    both restricted -> either matches (OR); otherwise the restricted one (or every day)."""
    last = days_in_month(year, month)
    month_bits = ((1 << (last + 1)) - 1) & ~1
    if dom_any and dow_any:
        return month_bits
    first = (date(year, month, 1).weekday() + 1) % 7
    by_dom = doms
    for rule in dom_rules:
        by_dom |= 1 << rule_day(rule, last, first)
    by_dow = weekday_days(first, dows)
    for rule in dow_rules:
        by_dow |= 1 << rule_day(rule, last, first)
    if dom_any:
        days = by_dow
    elif dow_any:
        days = by_dom
    else:
        days = by_dom | by_dow
    return days & month_bits  # also drops bit 0, where "no day this month" rules land


def rule_words(rule: Rule) -> str:
    """The day a rule selects, in words ("the last Friday of the month")."""
    kind, a, b = rule
    if kind == "last":
        if a == 0:
            return "the last day of the month"
        return f"the last day of the month minus {a} day{'s' if a > 1 else ''}"
    if kind == "nearest":
        return f"the weekday nearest day {a} of the month"
    if kind == "last_weekday":
        return "the last weekday of the month"
    if kind == "nth":
        return f"the {_ORDINALS[b - 1]} {_DAY_NAMES[a]} of the month"
    return f"the last {_DAY_NAMES[a]} of the month"
