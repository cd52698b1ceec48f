"""Pure schedule math: cron parsing and validation, Jenkins ``H``, time zones and DST policy,
intervals, jitter and descriptions. Standard library, croniter-free matching, cron-descriptor.
No Django, Redis or database imports here.

* Cron (:func:`parse_cron`): five fields, or six with seconds first when the caller passes
  the operator's ``minimum_interval_seconds`` (no two selected seconds closer than it);
  macros ``@yearly`` ... ``@hourly``; day extensions ``L``, ``L-n``, ``nW``, ``LW``
  (day of month) and ``d#k``, ``dL`` (day of week), combined with the other day field by
  the standard OR rule. See :mod:`.cron` and :mod:`.days`.
* Leaves: :class:`CronSchedule`, :class:`IntervalSchedule`, :class:`OneOffSchedule`
  (:func:`one_off`: a wall time in a zone, DST gap and repeat resolved by policy).
* Wrappers (nest freely): :func:`bounded` (start inclusive, end exclusive), :func:`union`
  (several specs; one slot per instant, which fires if any part fires there) and
  :func:`excluding` (slots on the dates of an :class:`ExclusionCalendar`, local dates in a
  zone, come out as ``Slot(at, "excluded")``); :func:`calendar_from_ics` reads a calendar
  from iCalendar VEVENTs.
* Stepping: :func:`next_slot`, :func:`iter_slots`, :func:`next_fire`. Cron and interval
  schedules never end; a schedule that can end signals it: ``next_slot``/``next_fire`` raise
  :class:`ScheduleEnded`, ``next_slot_or_none``/``next_fire_or_none`` return None and
  ``iter_slots`` stops.
"""

from .combine import bounded, excluding, one_off, resolve_wall, union
from .cron import parse_cron, resolve_hash_fields
from .describe import describe
from .errors import ScheduleEnded, ScheduleError
from .exclusions import ExclusionCalendar, exclusion_calendar
from .fire import iter_slots, next_fire, next_fire_or_none, next_slot, next_slot_or_none
from .ics import calendar_from_ics
from .interval import MAX_INTERVAL_SECONDS, interval_schedule
from .jitter import jitter_seconds_for
from .model import (
    DST_GAP_CHOICES,
    DST_REPEAT_CHOICES,
    BoundedSchedule,
    CronSchedule,
    ExcludingSchedule,
    IntervalSchedule,
    OneOffSchedule,
    Schedule,
    Slot,
    UnionSchedule,
    schedule_timezone,
)
from .zones import validate_timezone

__all__ = [
    "DST_GAP_CHOICES",
    "DST_REPEAT_CHOICES",
    "MAX_INTERVAL_SECONDS",
    "BoundedSchedule",
    "CronSchedule",
    "ExcludingSchedule",
    "ExclusionCalendar",
    "IntervalSchedule",
    "OneOffSchedule",
    "Schedule",
    "ScheduleEnded",
    "ScheduleError",
    "Slot",
    "UnionSchedule",
    "bounded",
    "calendar_from_ics",
    "describe",
    "excluding",
    "exclusion_calendar",
    "interval_schedule",
    "iter_slots",
    "jitter_seconds_for",
    "next_fire",
    "next_fire_or_none",
    "next_slot",
    "next_slot_or_none",
    "one_off",
    "parse_cron",
    "resolve_hash_fields",
    "resolve_wall",
    "schedule_timezone",
    "union",
    "validate_timezone",
]
