"""Exclusion calendars: a named set of dates (single dates and inclusive date ranges), pure
data. A schedule wrapped with one (:class:`~.model.ExcludingSchedule`) turns every slot whose
local date, in the wrapper's zone, is in the calendar into a skipped slot ("excluded").

Stored as sorted, disjoint, non-adjacent inclusive ranges, so membership is a bisection and
"where does this excluded stretch end" (to step over it quickly) is one lookup.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from .errors import ScheduleError

Span = tuple[date, date]  # inclusive
MAX_NAME = 200
_DAY = timedelta(days=1)


def _error(message: str) -> ScheduleError:
    return ScheduleError(f"calendar: {message}", "calendar")


def _check_date(value: object, what: str) -> date:
    # a datetime is a date subclass: refuse it, its time of day would be silently dropped
    if not isinstance(value, date) or isinstance(value, datetime):
        raise _error(f"{what} must be a date, got {type(value).__name__}")
    return value


def merge_spans(spans: Iterable[Span]) -> tuple[Span, ...]:
    """Sorted, with overlapping and adjacent ranges merged (3-5 and 6-9 become 3-9)."""
    merged: list[list[date]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1] + _DAY:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return tuple((start, end) for start, end in merged)


@dataclass(frozen=True)
class ExclusionCalendar:
    """A named set of dates. ``spans``: inclusive (first, last) date ranges, normalised on
    construction (sorted, merged), so equal sets of dates compare and hash equal."""

    name: str
    spans: tuple[Span, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise _error("name must be a non-empty string")
        if len(self.name) > MAX_NAME:
            raise _error(f"name must be at most {MAX_NAME} characters")
        checked = []
        for span in self.spans:
            if not isinstance(span, tuple) or len(span) != 2:
                raise _error("a range must be a (first, last) pair of dates")
            first, last = _check_date(span[0], "a range start"), _check_date(span[1], "a range end")
            if last < first:
                raise _error(f"range {first.isoformat()}..{last.isoformat()} ends before it starts")
            checked.append((first, last))
        object.__setattr__(self, "spans", merge_spans(checked))
        object.__setattr__(self, "_starts", tuple(first for first, _ in self.spans))

    def span_of(self, day: date) -> Span | None:
        """The excluded range containing ``day``, or None when the day is not excluded."""
        index = bisect_right(self._starts, day) - 1  # type: ignore[attr-defined]
        if index >= 0 and day <= self.spans[index][1]:
            return self.spans[index]
        return None

    def __contains__(self, day: object) -> bool:
        return isinstance(day, date) and self.span_of(day) is not None

    @property
    def day_count(self) -> int:
        return sum((last - first).days + 1 for first, last in self.spans)


def exclusion_calendar(
    name: str, *, dates: Iterable[date] = (), ranges: Iterable[Span] = ()
) -> ExclusionCalendar:
    """A calendar from single dates and inclusive (first, last) ranges."""
    spans = [(_check_date(d, "a date"), d) for d in dates]
    return ExclusionCalendar(name, (*spans, *ranges))
