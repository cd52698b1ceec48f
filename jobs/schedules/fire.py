"""Next-fire computation with the DST policy (docs/adr/0004-cron-matcher.md).

The expression is evaluated on wall-clock time in the schedule's zone and mapped to UTC:

* fast path: with the zone's offset at ``after``, the next matching wall time is converted
  back with the same offset; correct whenever no transition lies near [after, candidate];
* slow path (near a transition): naive wall-time matches are enumerated from the earliest
  wall time that can map after ``after``; each maps to 0, 1 or 2 instants under the policy;
  the smallest instant > after wins. Enumeration stops once no later wall time can map
  earlier than the best candidate.

Policy: a fixed-time job (no ``*`` in minute or hour) fires once per matching wall time: a
wall time in a gap moves to the transition instant (dst_gap "shift", or a "dst" skip slot
with "skip"); a repeated wall time fires at its first, last or both occurrences
(dst_repeat). Other jobs follow elapsed time: nothing in a gap, both occurrences of a
repeated time. Instants are naive UTC internally and aware UTC at the API.

Cron (five fields: whole minutes; six: whole seconds) and interval schedules are stepped
here; the wrappers (one-off, bounded, union, excluding) by :mod:`.compose`, which calls back
into this module for their parts. Only schedules that can end return None internally; at
the API that is ``next_slot``/``next_fire`` raising :class:`ScheduleEnded`, the ``_or_none``
variants returning None, and ``iter_slots`` stopping.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from . import compose, zones
from .cron import compile_expression
from .errors import ScheduleEnded, ScheduleError
from .interval import next_interval
from .match import CronMatcher
from .model import CronSchedule, IntervalSchedule, Schedule, Slot, check_aware

SLOW_PATH_STEPS = 100_000  # far above any real need
SECOND = timedelta(seconds=1)
MAX_SKIPPED = 1000  # consecutive skipped slots before next_fire gives up
Candidate = compose.Candidate  # (naive UTC instant, skip reason)


@dataclass(frozen=True)
class _Plan:
    matcher: CronMatcher
    zone: ZoneInfo
    fixed: bool
    dst_gap: str
    dst_repeat: str


@lru_cache(maxsize=16384)
def _plan(schedule: CronSchedule) -> _Plan:
    return _Plan(
        compile_expression(schedule.expression),
        zones.validate_timezone(schedule.timezone),
        schedule.fixed_time,
        schedule.dst_gap,
        schedule.dst_repeat,
    )


def to_utc_naive(moment: datetime, name: str = "after") -> datetime:
    check_aware(moment, name)
    if moment.tzinfo is UTC:
        return moment.replace(tzinfo=None)
    return (moment - moment.utcoffset()).replace(tzinfo=None)


def _never_fires() -> ScheduleError:
    return ScheduleError("the cron expression never fires", "cron")


def _wall_instants(plan: _Plan, wall: datetime) -> tuple[list[Candidate], datetime]:
    """The instants (and skip reasons) the policy gives one matching wall time, and the wall
    time to continue the enumeration from (past the end of a gap: its other walls add nothing)."""
    offset0 = wall.replace(tzinfo=plan.zone).utcoffset()
    offset1 = wall.replace(tzinfo=plan.zone, fold=1).utcoffset()
    if offset0 == offset1:
        return [(wall - offset0, None)], wall
    if offset0 > offset1:  # repeated (fall back): fold=0 is the first occurrence
        first, second = wall - offset0, wall - offset1
        if not plan.fixed or plan.dst_repeat == "both":
            return [(first, None), (second, None)], wall
        return [(first, None) if plan.dst_repeat == "first" else (second, None)], wall
    # gap (spring forward): fold=1 maps before the transition, fold=0 after it
    moved = zones.transition_in(plan.zone, wall - offset1, wall - offset0)
    # the gap ends at wall time moved + offset1; a second before it, not a minute, so that a
    # six-field matcher does not revisit the gap's last minute second by second
    resume = max(wall, moved + offset1 - SECOND)
    if not plan.fixed:  # elapsed-time jobs have no run in a gap
        return [], resume
    return [(moved, None if plan.dst_gap == "shift" else "dst")], resume


def _better(candidate: Candidate, best: Candidate | None) -> bool:
    if best is None or candidate[0] < best[0]:
        return True
    return candidate[0] == best[0] and candidate[1] is None and best[1] is not None


def _slow_next(plan: _Plan, after: datetime) -> Candidate:
    low, _ = zones.offset_bounds(plan.zone, after)
    wall = after + low  # every wall time mapping after `after` is later than this
    best: Candidate | None = None
    for _ in range(SLOW_PATH_STEPS):
        wall = plan.matcher.next_after(wall)
        if wall is None:
            break
        _, high = zones.offset_bounds(plan.zone, wall)
        if best is not None and wall - high > best[0]:
            return best
        candidates, wall = _wall_instants(plan, wall)
        for candidate in candidates:
            if candidate[0] > after and _better(candidate, best):
                best = candidate
    if best is None:
        raise _never_fires()
    return best


def _cron_next(plan: _Plan, after: datetime) -> Candidate:
    offset = zones.offset_at(plan.zone, after)
    wall = plan.matcher.next_after(after + offset)
    if wall is None:
        raise _never_fires()
    candidate = wall - offset
    if zones.is_quiet(plan.zone, after, candidate):
        return candidate, None
    return _slow_next(plan, after)


def _next_naive(schedule: Schedule, after: datetime) -> Candidate | None:
    """The next slot strictly after the naive UTC ``after``; None: the schedule has ended."""
    if isinstance(schedule, CronSchedule):
        return _cron_next(_plan(schedule), after)
    if isinstance(schedule, IntervalSchedule):
        return next_interval(schedule, after), None
    return compose.step(schedule, after, _next_naive)


def _next_firing(schedule: Schedule, after: datetime) -> datetime | None:
    """The next firing (not skipped) slot's naive UTC instant; None: no more firing."""
    if isinstance(schedule, CronSchedule):
        plan = _plan(schedule)
        for _ in range(MAX_SKIPPED):
            after, reason = _cron_next(plan, after)
            if reason is None:
                return after
        raise _never_fires()
    if isinstance(schedule, IntervalSchedule):
        return next_interval(schedule, after)
    return compose.step_firing(schedule, after, _next_firing)


def next_slot_or_none(schedule: Schedule, after: datetime) -> Slot | None:
    """The first slot strictly after ``after`` (any aware datetime), ``at`` aware UTC; None
    when a bounded or one-off schedule has no slot left."""
    found = _next_naive(schedule, to_utc_naive(after))
    return None if found is None else Slot(found[0].replace(tzinfo=UTC), found[1])


def next_slot(schedule: Schedule, after: datetime) -> Slot:
    """The first slot strictly after ``after`` (any aware datetime); ``at`` is aware UTC.
    Raises :class:`ScheduleEnded` when there is none (only bounded and one-off schedules
    end; cron and interval schedules always have a next slot)."""
    slot = next_slot_or_none(schedule, after)
    if slot is None:
        raise ScheduleEnded(after)
    return slot


def _iterate(schedule: Schedule, after: datetime, until: datetime | None) -> Iterator[Slot]:
    while True:
        found = _next_naive(schedule, after)
        if found is None or (until is not None and found[0] > until):
            return
        yield Slot(found[0].replace(tzinfo=UTC), found[1])
        after = found[0]


def iter_slots(
    schedule: Schedule, after: datetime, until: datetime | None = None
) -> Iterator[Slot]:
    """Slots with after < at <= until (unbounded if until is None), strictly increasing;
    stops after the last slot of a schedule that ends."""
    start = to_utc_naive(after)
    end = None if until is None else to_utc_naive(until, "until")
    return _iterate(schedule, start, end)


def next_fire_or_none(schedule: Schedule, after: datetime) -> datetime | None:
    """The first non-skipped slot's instant strictly after ``after`` (aware UTC); None when
    the schedule has no firing slot left."""
    found = _next_firing(schedule, to_utc_naive(after))
    return None if found is None else found.replace(tzinfo=UTC)


def next_fire(schedule: Schedule, after: datetime) -> datetime:
    """The first non-skipped slot's instant strictly after ``after`` (aware UTC). Raises
    :class:`ScheduleEnded` when there is none."""
    found = next_fire_or_none(schedule, after)
    if found is None:
        raise ScheduleEnded(after, "firing slot")
    return found
