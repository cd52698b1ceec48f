"""GET /schedule/preview: the next fire times of a cron expression or an interval, before
a job is created. `H` fields resolve with the seed "preview" (a job gets its own seed, so
its `H` values may differ)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from jobs.preview import MAX_COUNT, preview, schedule_preview
from jobs.schedules import DST_GAP_CHOICES, DST_REPEAT_CHOICES, MAX_INTERVAL_SECONDS, ScheduleError
from scheduler_site.api import examples as ex
from scheduler_site.api.fields import (
    InstantField,
    QueryIntegerField,
    StrictSerializer,
    query,
    validated,
)
from scheduler_site.api.problems import READ_PROBLEMS, problem_responses
from scheduler_site.api.views import ApiView

from .schedule_shapes import CronField, ScheduleInputField, TimeZoneField

# ScheduleError.field -> the query parameter to blame; the cron fields (minute, hour, ...)
# belong to `cron`, and the message names the field.
PARAMETER_OF = {
    "timezone": "timezone",
    "interval_seconds": "interval_seconds",
    "dst_gap": "dst_gap",
    "dst_repeat": "dst_repeat",
}


class PreviewQuerySerializer(serializers.Serializer):
    cron = CronField(
        required=False,
        max_length=200,
        help_text="A cron expression (give this or interval_seconds).",
    )
    timezone = TimeZoneField(required=False, default="UTC", max_length=64)
    interval_seconds = QueryIntegerField(
        required=False, min_value=1, max_value=MAX_INTERVAL_SECONDS
    )
    start = InstantField(
        required=False,
        help_text="List fire times after this (default now); an interval is anchored here.",
    )
    count = QueryIntegerField(required=False, default=10, min_value=1, max_value=MAX_COUNT)
    dst_gap = serializers.ChoiceField(choices=DST_GAP_CHOICES, required=False, default="shift")
    dst_repeat = serializers.ChoiceField(
        choices=DST_REPEAT_CHOICES, required=False, default="first"
    )

    def validate(self, attrs: dict) -> dict:
        if ("cron" in attrs) == ("interval_seconds" in attrs):
            raise serializers.ValidationError(
                {"cron": ["give exactly one of `cron` (with `timezone`) or `interval_seconds`"]}
            )
        return attrs


class PreviewSerializer(serializers.Serializer):
    description = serializers.CharField()
    next = serializers.ListField(
        child=serializers.DateTimeField(),
        help_text="ISO 8601 instants with the schedule's UTC offset at each instant.",
    )


class PreviewBodySerializer(StrictSerializer):
    schedule = ScheduleInputField(
        help_text="As in a job: `cron`, `specs`, `interval_seconds` or `at`, "
        "with `start`, `end` and `calendars`."
    )
    dst_gap = serializers.ChoiceField(choices=DST_GAP_CHOICES, required=False, default="shift")
    dst_repeat = serializers.ChoiceField(
        choices=DST_REPEAT_CHOICES, required=False, default="first"
    )
    jitter_seconds = serializers.IntegerField(
        required=False, default=0, min_value=0, max_value=3600
    )
    after = InstantField(required=False, help_text="List slots after this (default now).")
    count = serializers.IntegerField(required=False, default=10, min_value=1, max_value=MAX_COUNT)


class PreviewSlotSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="In the schedule's zone (UTC for an interval).")
    skip_reason = serializers.ChoiceField(
        choices=["dst", "excluded"],
        allow_null=True,
        help_text="null: the slot fires; `dst`: a DST gap drops it (dst_gap skip); "
        "`excluded`: its date is on one of the calendars.",
    )
    dst_day = serializers.BooleanField(help_text="The zone changes its UTC offset that day.")


class SlotsPreviewSerializer(serializers.Serializer):
    description = serializers.CharField()
    timezone = serializers.CharField()
    slots = PreviewSlotSerializer(many=True)


def _slots(*slots: tuple[str, str | None, bool]) -> list[dict]:
    return [{"at": at, "skip_reason": skip, "dst_day": dst} for at, skip, dst in slots]


# request title -> (request, its answer); tests/api/test_schema.py posts each request (with
# the calendars example "holidays") and compares the answer
PREVIEW_EXAMPLES = {
    "Two cron specs with a calendar": (
        {
            "schedule": {
                "specs": [{"cron": "0 9 * * 1-5"}, {"cron": "0 12 * * 6"}],
                "timezone": "Europe/Berlin",
                "calendars": ["holidays"],
            },
            "after": "2026-12-22T12:00:00Z",
            "count": 5,
        },
        {
            "description": "At 09:00, Monday through Friday (Europe/Berlin); At 12:00, only on "
            "Saturday (Europe/Berlin), except on the dates of 'holidays' (Europe/Berlin)",
            "timezone": "Europe/Berlin",
            "slots": _slots(
                ("2026-12-23T09:00:00+01:00", None, False),
                ("2026-12-24T09:00:00+01:00", "excluded", False),
                ("2026-12-25T09:00:00+01:00", "excluded", False),
                ("2026-12-26T12:00:00+01:00", "excluded", False),
                ("2026-12-28T09:00:00+01:00", None, False),
            ),
        },
    ),
    "The last weekday of each month, at 17:00:30, in the first quarter": (
        {
            "schedule": {
                "cron": "30 0 17 LW * *",
                "timezone": "Europe/Berlin",
                "start": "2027-01-01T00:00:00Z",
                "end": "2027-04-01T00:00:00Z",
            },
            "after": "2026-12-01T00:00:00Z",
            "count": 5,
        },
        {
            "description": "At 17:00:30, on the last weekday of the month (Europe/Berlin), "
            "from 2027-01-01 01:00+01:00, ending before 2027-04-01 02:00+02:00",
            "timezone": "Europe/Berlin",
            "slots": _slots(  # the end comes before a fifth slot
                ("2027-01-29T17:00:30+01:00", None, False),
                ("2027-02-26T17:00:30+01:00", None, False),
                ("2027-03-31T17:00:30+02:00", None, False),
            ),
        },
    ),
    "The second Sunday of the month at 02:30 in New York, across the spring change": (
        {
            "schedule": {"cron": "30 2 * * 0#2", "timezone": "America/New_York"},
            "after": "2027-02-01T00:00:00Z",
            "count": 3,
        },
        {
            "description": "At 02:30, on the second Sunday of the month (America/New_York)",
            "timezone": "America/New_York",
            "slots": _slots(  # 2027-03-14 02:30 does not exist: shifted to 03:00 EDT
                ("2027-02-14T02:30:00-05:00", None, False),
                ("2027-03-14T03:00:00-04:00", None, True),
                ("2027-04-11T02:30:00-04:00", None, False),
            ),
        },
    ),
}


class SchedulePreviewView(ApiView):
    @extend_schema(
        operation_id="schedule_preview",
        tags=["schedule"],
        summary="Preview a schedule's next fire times",
        description=(
            "Before creating a job: `cron` (with `timezone`, and the DST policies) or "
            "`interval_seconds`, and the next `count` fire times after `start` (default now), "
            "each with the zone's UTC offset at that instant. `H` fields resolve with the "
            "fixed seed `preview`; a job gets its own. An invalid expression is a 400 naming "
            "the parameter and the cron field."
        ),
        parameters=[PreviewQuerySerializer],
        examples=[
            ex.answer(
                "02:30 in Berlin across the spring change",
                {
                    "description": "At 02:30 (Europe/Berlin)",
                    "next": [
                        "2026-03-28T02:30:00+01:00",
                        "2026-03-29T03:00:00+02:00",
                        "2026-03-30T02:30:00+02:00",
                    ],
                },
            )
        ],
        responses={200: PreviewSerializer, **problem_responses(400, *READ_PROBLEMS)},
    )
    def get(self, request: Request) -> Response:
        params = query(PreviewQuerySerializer, request)
        start = params.get("start") or self.clock.now()
        try:
            preview = schedule_preview(
                cron=params.get("cron"),
                timezone=params["timezone"],
                interval_seconds=params.get("interval_seconds"),
                start=start,
                count=params["count"],
                dst_gap=params["dst_gap"],
                dst_repeat=params["dst_repeat"],
            )
        except ScheduleError as exc:
            field = PARAMETER_OF.get(exc.field or "", "cron")
            raise serializers.ValidationError({field: [str(exc)]}) from None
        except OverflowError:
            raise serializers.ValidationError({"start": ["too close to the end of time"]}) from None
        return Response(
            {"description": preview.description, "next": [at.isoformat() for at in preview.times]}
        )

    @extend_schema(
        operation_id="schedule_preview_full",
        tags=["schedule"],
        summary="Preview any schedule: its slots, skipped ones marked",
        description="The same `schedule` object a job takes (several specs, `at`, `start` and "
        "`end`, exclusion calendars by name) and the job's DST policy and jitter: the next "
        "slots the leader would materialise, each marked firing or skipped and flagged on a "
        "DST transition day.",
        request=PreviewBodySerializer,
        examples=[
            example
            for title, (body, answer) in PREVIEW_EXAMPLES.items()
            for example in (ex.request(title, body), ex.answer(f"Answer: {title}", answer))
        ],
        responses={200: SlotsPreviewSerializer, **problem_responses(400, *READ_PROBLEMS)},
    )
    def post(self, request: Request) -> Response:
        body = validated(PreviewBodySerializer, request.data)
        result = preview(
            body["schedule"],
            now=self.clock.now(),
            start=body.get("after"),
            count=body["count"],
            dst_gap=body["dst_gap"],
            dst_repeat=body["dst_repeat"],
            jitter_seconds=body["jitter_seconds"],
        )
        slots = [
            {"at": s.at.isoformat(), "skip_reason": s.skip_reason, "dst_day": s.dst_day}
            for s in result["slots"]
        ]
        return Response({**result, "slots": slots})
