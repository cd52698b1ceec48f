"""Stepping the wrapper schedules (one-off, bounded, union, excluding) from one instant to
the next. Pure functions over naive UTC instants; the leaves (cron, interval) are stepped by
:mod:`.fire`, which passes itself in as ``next_of``/``firing_of`` (so no import cycle).

Two questions per schedule: the next slot strictly after an instant (``step``: any slot,
skipped ones included, as the engine records them), and the next *firing* slot
(``step_firing``: what ``next_fire`` answers, which steps over whole excluded date ranges
rather than slot by slot). None means the schedule has nothing more: it has ended.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, time, timedelta

from . import zones
from .model import (
    BoundedSchedule,
    ExcludingSchedule,
    OneOffSchedule,
    Schedule,
    UnionSchedule,
)

Candidate = tuple[datetime, str | None]  # (naive UTC instant, skip reason)
NextOf = Callable[[Schedule, datetime], Candidate | None]
FiringOf = Callable[[Schedule, datetime], datetime | None]
EPSILON = timedelta(microseconds=1)  # datetime's resolution: "after start - EPSILON" is ">= start"
DAY = timedelta(days=1)


def _naive(moment: datetime) -> datetime:
    return moment.replace(tzinfo=None)


def _from_start(schedule: BoundedSchedule, after: datetime) -> datetime:
    if schedule.start is None:
        return after
    return max(after, _naive(schedule.start) - EPSILON)  # start itself is inside the bounds


def _before_end(schedule: BoundedSchedule, at: datetime) -> bool:
    return schedule.end is None or at < _naive(schedule.end)  # end itself is outside


def _earlier(candidate: Candidate, best: Candidate | None) -> bool:
    """Earlier wins; at the same instant a firing slot beats a skipped one (dedupe by
    instant: one slot per instant, which fires if any part fires)."""
    if best is None or candidate[0] < best[0]:
        return True
    return candidate[0] == best[0] and candidate[1] is None and best[1] is not None


def local_date(schedule: ExcludingSchedule, at: datetime) -> date:
    zone = zones.validate_timezone(schedule.timezone)
    return (at + zones.offset_at(zone, at)).date()


def step(schedule: Schedule, after: datetime, next_of: NextOf) -> Candidate | None:
    if isinstance(schedule, OneOffSchedule):
        at = _naive(schedule.at)
        return (at, schedule.skip_reason) if at > after else None
    if isinstance(schedule, BoundedSchedule):
        found = next_of(schedule.schedule, _from_start(schedule, after))
        return found if found is not None and _before_end(schedule, found[0]) else None
    if isinstance(schedule, UnionSchedule):
        best: Candidate | None = None
        for part in schedule.parts:
            found = next_of(part, after)
            if found is not None and _earlier(found, best):
                best = found
        return best
    if isinstance(schedule, ExcludingSchedule):
        found = next_of(schedule.schedule, after)
        if found is not None and local_date(schedule, found[0]) in schedule.calendar:
            return found[0], "excluded"
        return found
    raise TypeError(f"not a schedule: {type(schedule).__name__}")


def _past_span(schedule: ExcludingSchedule, last_day: date, at: datetime) -> datetime:
    """An instant from which to look for the next firing once ``at`` fell on an excluded
    range ending ``last_day``: no later than the first instant of the next local day (the
    zone's largest offset around it is used, so a DST change there cannot make it late),
    and never before ``at`` (progress even where a repeated hour re-enters the range)."""
    zone = zones.validate_timezone(schedule.timezone)
    midnight = datetime.combine(last_day + DAY, time())
    _, high = zones.offset_bounds(zone, midnight)
    return max(midnight - high - EPSILON, at)


def step_firing(schedule: Schedule, after: datetime, firing_of: FiringOf) -> datetime | None:
    if isinstance(schedule, OneOffSchedule):
        at = _naive(schedule.at)
        return at if at > after and schedule.skip_reason is None else None
    if isinstance(schedule, BoundedSchedule):
        found = firing_of(schedule.schedule, _from_start(schedule, after))
        return found if found is not None and _before_end(schedule, found) else None
    if isinstance(schedule, UnionSchedule):
        fired = [firing_of(part, after) for part in schedule.parts]
        return min((at for at in fired if at is not None), default=None)
    if isinstance(schedule, ExcludingSchedule):
        # ends: ``after`` grows strictly (to at least the excluded firing found), the
        # calendar has finitely many ranges, and past the last one nothing is excluded
        while True:
            found = firing_of(schedule.schedule, after)
            if found is None:
                return None
            span = schedule.calendar.span_of(local_date(schedule, found))
            if span is None:
                return found
            after = _past_span(schedule, span[1], found)
    raise TypeError(f"not a schedule: {type(schedule).__name__}")
