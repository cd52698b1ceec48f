"""iCalendar (RFC 5545) import for exclusion calendars: the dates of each VEVENT, standard
library only.

* Lines are unfolded first (a line break followed by one space or tab continues the line).
* ``DTSTART`` is required. A DATE value (``VALUE=DATE``, or eight digits) is an all-day
  date: its ``DTEND`` is exclusive (RFC 5545), and without ``DTEND``/``DURATION`` the event
  is that one day. A DATE-TIME value (UTC ``...Z``, ``TZID=`` an IANA zone, or floating) is
  converted to local time in the calendar's zone, and the event excludes every local date
  it touches from its start up to, not including, its end (an event ending at midnight does
  not exclude the next day; one without an end excludes its start date). Floating times
  are wall times, so their date is taken as written.
* ``DURATION`` (``P1D``, ``PT2H``, ``P1W``...) stands in for ``DTEND``.
* Recurrence (``RRULE``, ``RDATE``, ``EXDATE``, ``RECURRENCE-ID``) is not supported and is
  refused with an error naming the event, never silently ignored (only the first date
  would be excluded). ``STATUS:CANCELLED`` events exclude nothing. Nested components
  (VALARM) and VTIMEZONE definitions are skipped: a TZID must be an IANA zone name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from . import zones
from .errors import ScheduleError
from .exclusions import ExclusionCalendar, Span

_DATE = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})")
_DATE_TIME = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})(Z?)")
_DURATION = re.compile(
    r"\+?P(?:([0-9]+)W|(?:([0-9]+)D)?(?:T(?=[0-9])(?:([0-9]+)H)?(?:([0-9]+)M)?(?:([0-9]+)S)?)?)"
)
_RECURRENCE = ("RRULE", "RDATE", "EXDATE", "RECURRENCE-ID")
_EPSILON = timedelta(microseconds=1)


def _error(message: str) -> ScheduleError:
    return ScheduleError(f"calendar: {message}", "calendar")


def unfold(text: str) -> list[str]:
    """Content lines with folding undone; blank lines dropped."""
    lines: list[str] = []
    for line in re.split(r"\r\n|\n|\r", text):
        if line[:1] in (" ", "\t") and lines:
            lines[-1] += line[1:]
        elif line.strip():
            lines.append(line)
    return lines


def _split_outside_quotes(text: str, separator: str, limit: int = -1) -> list[str]:
    parts, current, quoted = [], [], False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == separator and not quoted and limit != 0:
            parts.append("".join(current))
            current, limit = [], limit - 1
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def parse_line(line: str) -> tuple[str, dict[str, str], str]:
    """``NAME;PARAM=value;...:value`` -> (NAME, {PARAM: value}, value); a ``:`` or ``;``
    inside a quoted parameter value does not split."""
    head_value = _split_outside_quotes(line, ":", limit=1)
    if len(head_value) != 2:
        raise _error(f"not a content line (no ':'): {line[:60]!r}")
    head, value = head_value
    name, *params = _split_outside_quotes(head, ";")
    parsed = {}
    for param in params:
        key, _, text = param.partition("=")
        parsed[key.strip().upper()] = text.strip().strip('"')
    return name.strip().upper(), parsed, value.strip()


@dataclass
class _Event:
    number: int
    props: dict[str, tuple[dict[str, str], str]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        summary = self.props.get("SUMMARY", ({}, ""))[1]
        return f"event {self.number} ({summary[:40]!r})" if summary else f"event {self.number}"


def _events(lines: list[str]) -> tuple[list[_Event], str | None]:
    """The VEVENTs' own properties (nested components skipped) and X-WR-CALNAME."""
    stack: list[str] = []
    events: list[_Event] = []
    calendar_name = None
    for line in lines:
        name, params, value = parse_line(line)
        if name == "BEGIN":
            if not stack and value.upper() != "VCALENDAR":
                raise _error(f"BEGIN:{value[:20]} outside BEGIN:VCALENDAR")
            stack.append(value.upper())
            if stack == ["VCALENDAR", "VEVENT"]:
                events.append(_Event(len(events) + 1))
        elif name == "END":
            if not stack or stack[-1] != value.upper():
                raise _error(
                    f"END:{value[:20]} does not close {stack[-1] if stack else 'anything'}"
                )
            stack.pop()
        elif stack == ["VCALENDAR"] and name == "X-WR-CALNAME":
            calendar_name = value
        elif stack == ["VCALENDAR", "VEVENT"]:
            events[-1].props.setdefault(name, (params, value))
        elif not stack:
            raise _error(f"{name[:20]} outside BEGIN:VCALENDAR")
    if stack:
        raise _error(f"BEGIN:{stack[-1]} is never closed")
    return events, calendar_name


def _zone(name: str, event: _Event) -> ZoneInfo:
    try:
        return zones.validate_timezone(name.lstrip("/"))
    except ScheduleError:
        raise _error(f"{event.label}: unknown TZID {name[:64]!r} (IANA zone names only)") from None


def _moment(event: _Event, prop: str, zone: ZoneInfo) -> date | datetime:
    """A DATE (a date), or a DATE-TIME as the naive wall time in the calendar's zone."""
    params, value = event.props[prop]
    text = value.upper()
    if params.get("VALUE", "").upper() == "DATE" or _DATE.fullmatch(text):
        found = _DATE.fullmatch(text)
        if found is None:
            raise _error(f"{event.label}: {prop} {value[:30]!r} is not a DATE (YYYYMMDD)")
        try:
            return date(*map(int, found.groups()))
        except ValueError:
            raise _error(f"{event.label}: {prop} {value[:30]!r} is not a real date") from None
    found = _DATE_TIME.fullmatch(text)
    if found is None:
        raise _error(f"{event.label}: {prop} {value[:30]!r} is not a DATE or DATE-TIME")
    *parts, utc = found.groups()
    numbers = [int(p) for p in parts]
    numbers[5] = min(numbers[5], 59)  # a leap second names the same date
    try:
        wall = datetime(*numbers)
    except ValueError:
        raise _error(f"{event.label}: {prop} {value[:30]!r} is not a real time") from None
    if utc:
        return wall.replace(tzinfo=UTC).astimezone(zone).replace(tzinfo=None)
    if "TZID" in params:
        source = wall.replace(tzinfo=_zone(params["TZID"], event))
        return source.astimezone(UTC).astimezone(zone).replace(tzinfo=None)
    return wall  # floating: the same wall time in every zone


def _duration(event: _Event) -> timedelta:
    value = event.props["DURATION"][1].upper()
    found = _DURATION.fullmatch(value)
    if found is None or value in ("P", "+P"):
        raise _error(f"{event.label}: DURATION {value[:30]!r} is not a positive duration")
    weeks, days, hours, minutes, seconds = (int(g or 0) for g in found.groups())
    return timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)


def _span(event: _Event, zone: ZoneInfo) -> Span:
    if "DTSTART" not in event.props:
        raise _error(f"{event.label}: no DTSTART")
    start = _as_datetime(_moment(event, "DTSTART", zone))
    first = start.date()
    if "DTEND" in event.props:
        end = _as_datetime(_moment(event, "DTEND", zone))
    elif "DURATION" in event.props:
        end = start + _duration(event)
    else:  # RFC 5545: an all-day event is that day; a timed one is an instant
        return first, first
    if end < start:
        raise _error(f"{event.label}: its end is before its start")
    # the end is exclusive: the last date is the one just before it (for a DATE end, the day
    # before), but an event of zero length still has its start date
    return first, max((end - _EPSILON).date(), first)


def _as_datetime(moment: date | datetime) -> datetime:
    return moment if isinstance(moment, datetime) else datetime.combine(moment, time())


def calendar_from_ics(text: str, *, timezone: str, name: str | None = None) -> ExclusionCalendar:
    """An exclusion calendar of the dates of the VEVENTs in ``text``; date-times are read as
    local dates in ``timezone`` (the zone the calendar will be evaluated in). ``name``
    defaults to X-WR-CALNAME, else "calendar"."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    zone = zones.validate_timezone(timezone)
    lines = unfold(text.lstrip("\ufeff"))
    if not lines or lines[0].strip().upper() != "BEGIN:VCALENDAR":
        raise _error("not an iCalendar file (it must start with BEGIN:VCALENDAR)")
    events, calendar_name = _events(lines)
    spans = []
    for event in events:
        recurring = [prop for prop in _RECURRENCE if prop in event.props]
        if recurring:
            raise _error(
                f"{event.label} has {recurring[0]}: recurring events are not supported "
                "(expand them into single events first)"
            )
        if event.props.get("STATUS", ({}, ""))[1].upper() == "CANCELLED":
            continue
        spans.append(_span(event, zone))
    return ExclusionCalendar(name or (calendar_name or "").strip() or "calendar", tuple(spans))
