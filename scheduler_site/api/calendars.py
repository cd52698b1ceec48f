"""Exclusion calendar endpoints: /calendars (list, create) and /calendars/{name} (read,
change, delete). A calendar is a tenant's named set of dates that jobs skip."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from jobs import calendars
from jobs.models import ExclusionCalendar
from scheduler_site.api import examples as ex
from scheduler_site.api.pagination import KeysetPagination, page_of
from scheduler_site.api.problems import IN_USE, READ_PROBLEMS, WRITE_PROBLEMS, problem_responses
from scheduler_site.api.views import ApiView

TAGS = ["calendars"]


class CalendarSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    dates = serializers.ListField(child=serializers.DateField())
    ranges = serializers.ListField(
        child=serializers.ListField(child=serializers.DateField(), min_length=2, max_length=2),
        help_text="Inclusive [first, last] date ranges.",
    )
    jobs = serializers.SerializerMethodField(help_text="The ids of the jobs that use it.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_jobs(self, calendar: ExclusionCalendar) -> list[int]:
        return sorted(j.id for j in calendar.jobs.all() if j.deleted_at is None)


class CalendarInputSerializer(serializers.Serializer):
    """Dates, and ranges, or the text of an iCalendar file (its VEVENTs' dates; a DATE-TIME
    event covers every local date it touches in `timezone`; recurring events are refused)."""

    name = serializers.RegexField(
        r"^[^/\x00-\x1f\x7f]+$", max_length=200, help_text="No '/' or control characters."
    )
    description = serializers.CharField(required=False, allow_blank=True, max_length=5000)
    dates = serializers.ListField(child=serializers.DateField(), required=False)
    ranges = serializers.ListField(
        child=serializers.ListField(child=serializers.DateField(), min_length=2, max_length=2),
        required=False,
    )
    ics = serializers.CharField(required=False, help_text="An iCalendar file's text.")
    timezone = serializers.CharField(required=False, help_text="For the ics file's date-times.")


EXAMPLES = [
    OpenApiExample(
        "Holidays",
        {
            "name": "holidays",
            "dates": ["2026-12-25", "2027-01-01"],
            "ranges": [["2026-12-24", "2026-12-26"]],
        },
        request_only=True,
    ),
    OpenApiExample(
        "From an iCalendar file",
        {
            "name": "de-holidays",
            "ics": "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261225\r\n"
            "SUMMARY:Christmas\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
        },
        request_only=True,
    ),
]


CALENDAR = {
    "name": "holidays",
    "description": "Public holidays in Berlin",
    "dates": ["2026-12-25", "2027-01-01"],
    "ranges": [["2026-12-24", "2026-12-26"]],
    "jobs": [5, 8],
    "created_at": "2026-11-20T09:00:46.347306Z",
    "updated_at": "2026-11-20T09:00:46.347306Z",
}


class CalendarPagination(KeysetPagination):
    model = ExclusionCalendar
    ordering = ("id",)


class CalendarView(ApiView):
    def calendar_json(self, calendar: ExclusionCalendar) -> dict[str, Any]:
        return CalendarSerializer(calendars.calendar_get(name=calendar.name)).data

    def calendar_url(self, request: Request, calendar: ExclusionCalendar) -> str:
        return request.build_absolute_uri(reverse("api:calendar", kwargs={"name": calendar.name}))


class CalendarCollectionView(CalendarView):
    @extend_schema(
        operation_id="calendars_list",
        tags=TAGS,
        summary="List exclusion calendars",
        description=(
            "The tenant's exclusion calendars (named sets of dates that jobs skip: holidays, "
            "a change freeze), in the order they were created, with the jobs using each."
        ),
        parameters=CalendarPagination.parameters(),
        examples=[ex.answer("A page of calendars", {"next": None, "results": [CALENDAR]})],
        responses={200: page_of(CalendarSerializer), **problem_responses(400, *READ_PROBLEMS)},
    )
    def get(self, request: Request) -> Response:
        paginator = CalendarPagination()
        page = paginator.paginate_queryset(
            calendars.calendar_list().prefetch_related("jobs"), request, self
        )
        return paginator.get_paginated_response(CalendarSerializer(page, many=True).data)

    @extend_schema(
        operation_id="calendars_create",
        tags=TAGS,
        summary="Create an exclusion calendar",
        description=(
            "A name (unique in the tenant; it is part of the calendar's URL) and its dates: "
            "`dates` and `ranges` (inclusive), or `ics`, the text of an iCalendar file (its "
            "events' dates; `timezone` places its date-times). A job lists it by name in "
            "`schedule.calendars`: slots on its dates are skipped, recorded as `excluded`."
        ),
        request=CalendarInputSerializer,
        examples=[*EXAMPLES, ex.answer("The calendar created", {**CALENDAR, "jobs": []}, 201)],
        responses={201: CalendarSerializer, **problem_responses(*WRITE_PROBLEMS)},
    )
    def post(self, request: Request) -> Response:
        calendar = calendars.calendar_create(data=request.data, **self.services_kwargs(request))
        headers = {"Location": self.calendar_url(request, calendar)}
        return Response(self.calendar_json(calendar), status=201, headers=headers)


class CalendarDetailView(CalendarView):
    @extend_schema(
        operation_id="calendars_retrieve",
        tags=TAGS,
        summary="Read an exclusion calendar",
        description="The calendar's dates and ranges, and the ids of the jobs that use it.",
        examples=[ex.answer("A calendar", CALENDAR)],
        responses={200: CalendarSerializer, **problem_responses(404, *READ_PROBLEMS)},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(CalendarSerializer(calendars.calendar_get(name=name)).data)

    @extend_schema(
        operation_id="calendars_update",
        tags=TAGS,
        summary="Change an exclusion calendar",
        description="New dates apply to every job using the calendar at once: runs already "
        "prepared for slots it now excludes are recorded as skipped (`excluded`) instead.",
        request=CalendarInputSerializer(partial=True),
        examples=[ex.request("New dates", {"dates": ["2026-12-25", "2026-12-26", "2027-01-01"]})],
        responses={200: CalendarSerializer, **problem_responses(404, *WRITE_PROBLEMS)},
    )
    def patch(self, request: Request, name: str) -> Response:
        calendar = calendars.calendar_update(
            name=name, data=request.data, **self.services_kwargs(request)
        )
        return Response(self.calendar_json(calendar))

    @extend_schema(
        operation_id="calendars_destroy",
        tags=TAGS,
        summary="Delete an exclusion calendar",
        description="Refused (409) while jobs use it: remove it from their schedules first.",
        examples=[
            ex.problem(
                "Jobs still use it",
                409,
                "jobs 5, 8 use this calendar: remove it from them first",
                IN_USE,
            )
        ],
        responses={204: None, **problem_responses(404, 409, *READ_PROBLEMS)},
    )
    def delete(self, request: Request, name: str) -> Response:
        calendars.calendar_delete(name=name, **self.services_kwargs(request))
        return Response(status=204)
