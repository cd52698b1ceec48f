"""The `schedule` of a job as the API shows it and takes it (for the OpenAPI schema; the one
place that validates a schedule is `jobs.schedule_input`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiExample, PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from jobs.models import Job
from jobs.schedule_fields import schedule_of
from jobs.schedule_input import MAX_SPECS, schedule_as_input
from jobs.schedules import MAX_INTERVAL_SECONDS, ExclusionCalendar, describe
from scheduler_site.api.fields import INSTANT_PATTERN

CRON_HELP = (
    "5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first when "
    "SCHEDULER_MIN_INTERVAL_SECONDS allows it; macros (@yearly ... @hourly); Jenkins `H` "
    "(a stable per-job value); `L` (last day), `L-3`, `15W` (nearest weekday), `LW` in the "
    "day of month; `1#2` (second Monday) and `5L` (last Friday) in the day of week."
)


@extend_schema_field({"type": "string", "format": "cron", "maxLength": 200})
class CronField(serializers.CharField):
    """A cron expression (a custom format: what it may hold is CRON_HELP's)."""


@extend_schema_field({"type": "string", "format": "time-zone", "maxLength": 64})
class TimeZoneField(serializers.CharField):
    """An IANA time zone name (a custom format: the zones of the server's tz database)."""


@extend_schema_field(
    {"type": "string", "format": "date-time", "pattern": INSTANT_PATTERN, "nullable": True}
)
class OptionalInstantField(serializers.DateTimeField):
    """An instant with an offset, or null (the same as leaving it out)."""


class _Common(serializers.Serializer):
    start = OptionalInstantField(
        required=False, help_text="No slot before this instant (inclusive)."
    )
    end = OptionalInstantField(
        required=False, help_text="No slot from this instant on (exclusive)."
    )
    calendars = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Exclusion calendars of the tenant, by name: a slot on one of their dates "
        "(local dates in the job's zone; with `specs`, the first spec's zone, for every spec's "
        "slots) is skipped and recorded as `excluded`.",
    )


class CronSpecSerializer(serializers.Serializer):
    cron = CronField(max_length=200, help_text=CRON_HELP)
    timezone = TimeZoneField(required=False, help_text="An IANA time zone name.")


class CronScheduleInputSerializer(_Common):
    cron = CronField(max_length=200, help_text=CRON_HELP)
    timezone = TimeZoneField(default="UTC", help_text="An IANA time zone name.")


class SpecsScheduleInputSerializer(_Common):
    specs = serializers.ListField(
        child=CronSpecSerializer(),
        min_length=1,
        max_length=MAX_SPECS,
        help_text="Several cron specs: the job fires on their union, an instant two share once.",
    )
    timezone = TimeZoneField(
        default="UTC",
        help_text="The zone of the specs that give none (not kept: each stored spec has its "
        "zone). Calendars use the first spec's zone.",
    )


class IntervalScheduleInputSerializer(_Common):
    interval_seconds = serializers.IntegerField(
        min_value=settings.SCHEDULER_MIN_INTERVAL_SECONDS,
        max_value=MAX_INTERVAL_SECONDS,
        help_text="At least SCHEDULER_MIN_INTERVAL_SECONDS (60 by default).",
    )
    start_at = OptionalInstantField(
        required=False,
        help_text="The anchor: fire times are start_at + k * interval_seconds (default: "
        "`start`, else now).",
    )


class AtScheduleInputSerializer(_Common):
    at = serializers.CharField(
        help_text="A wall time in `timezone` (2026-12-24T18:00): the job fires once; it is "
        "`completed` once that run is prepared (within the lookahead before it). A time in a "
        "DST gap follows dst_gap; a repeated one fires at its first occurrence (dst_repeat "
        "`last`: the second)."
    )
    timezone = TimeZoneField(default="UTC", help_text="An IANA time zone name.")


SCHEDULE_INPUT = PolymorphicProxySerializer(
    component_name="ScheduleInput",
    serializers=[
        CronScheduleInputSerializer,
        SpecsScheduleInputSerializer,
        IntervalScheduleInputSerializer,
        AtScheduleInputSerializer,
    ],
    resource_type_field_name=None,
)
_TARGET = {"type": "task", "task": "builtin.noop"}
SCHEDULES = {
    "Weekdays at 09:00 in Berlin": {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
    "09:00 on weekdays and 12:00 on Saturdays, not on holidays": {
        "specs": [{"cron": "0 9 * * 1-5"}, {"cron": "0 12 * * 6"}],
        "timezone": "Europe/Berlin",
        "calendars": ["holidays"],
    },
    "The last Friday of the month at 18:00": {"cron": "0 18 * * 5L", "timezone": "UTC"},
    "The second Monday of the month at 08:00 in New York": {
        "cron": "0 8 * * 1#2",
        "timezone": "America/New_York",
    },
    "Noon on the weekday nearest the 15th and on the last day of the month": {
        "cron": "0 12 15W,L * *",
        "timezone": "Europe/Paris",
    },
    "At 06:00:30 every day (six fields: seconds first)": {
        "cron": "30 0 6 * * *",
        "timezone": "Asia/Tokyo",
    },
    "Hourly on weekdays in the first quarter of 2027 only": {
        "cron": "0 * * * 1-5",
        "timezone": "Europe/London",
        "start": "2027-01-01T00:00:00Z",
        "end": "2027-04-01T00:00:00Z",
    },
    "Every 10 minutes during December": {
        "interval_seconds": 600,
        "start": "2026-12-01T00:00:00Z",
        "end": "2027-01-01T00:00:00Z",
    },
    "Once, on Christmas Eve at 18:00 in Berlin": {
        "at": "2026-12-24T18:00",
        "timezone": "Europe/Berlin",
    },
}
JOB_EXAMPLES = [
    OpenApiExample(
        title, {"name": title, "schedule": schedule, "target": _TARGET}, request_only=True
    )
    for title, schedule in SCHEDULES.items()
]


@extend_schema_field(SCHEDULE_INPUT)
class ScheduleInputField(serializers.JSONField):
    pass


class ScheduleSerializer(serializers.Serializer):
    """A job's schedule: the keys of the input shape it was given, and `description`."""

    cron = serializers.CharField(required=False, help_text="As written (`H` unresolved).")
    timezone = serializers.CharField(required=False)
    specs = CronSpecSerializer(many=True, required=False)
    interval_seconds = serializers.IntegerField(required=False)
    start_at = serializers.DateTimeField(required=False, help_text="An interval's anchor.")
    at = serializers.CharField(required=False, help_text="A one-off's wall time.")
    start = serializers.DateTimeField(required=False)
    end = serializers.DateTimeField(required=False)
    calendars = serializers.ListField(child=serializers.CharField(), required=False)
    description = serializers.CharField(help_text="The schedule in words (`H` resolved).")


def schedule_json(job: Job) -> dict[str, Any] | None:
    """`job` carries `calendar_names` (jobs.selectors.with_relation_ids)."""
    names = sorted(job.calendar_names)
    out = schedule_as_input(job, names)
    if out is None:
        return None
    # The words name the calendars; their dates do not count, so none are read.
    calendars = [ExclusionCalendar(name, ()) for name in names]
    try:
        words = describe(schedule_of(job, calendars))
    except (ValueError, TypeError):  # a row the scheduler parked: say why instead
        words = f"cannot be planned: {job.fault_detail or 'invalid schedule'}"
    return {**out, "description": words}


@extend_schema_field(ScheduleSerializer(allow_null=True))
class ScheduleField(serializers.Field):
    def to_representation(self, job: Job) -> dict[str, Any] | None:
        return schedule_json(job)
