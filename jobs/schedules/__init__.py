"""Pure schedule math: cron parsing and validation, Jenkins ``H``, time zones and DST policy,
intervals, jitter and descriptions. Standard library, croniter-free matching, cron-descriptor.
No Django, Redis or database imports here."""

from .cron import parse_cron, resolve_hash_fields
from .describe import describe
from .errors import ScheduleError
from .fire import iter_slots, next_fire, next_slot
from .interval import MAX_INTERVAL_SECONDS, interval_schedule
from .jitter import jitter_seconds_for
from .model import (
    DST_GAP_CHOICES,
    DST_REPEAT_CHOICES,
    CronSchedule,
    IntervalSchedule,
    Schedule,
    Slot,
)
from .zones import validate_timezone

__all__ = [
    "DST_GAP_CHOICES",
    "DST_REPEAT_CHOICES",
    "MAX_INTERVAL_SECONDS",
    "CronSchedule",
    "IntervalSchedule",
    "Schedule",
    "ScheduleError",
    "Slot",
    "describe",
    "interval_schedule",
    "iter_slots",
    "jitter_seconds_for",
    "next_fire",
    "next_slot",
    "parse_cron",
    "resolve_hash_fields",
    "validate_timezone",
]
