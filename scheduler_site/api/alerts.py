"""Alert endpoints: /alerts/channels (list, create), /alerts/channels/{id} (read, change,
delete), /alerts/incidents and /alerts/notifications (the alerts log, newest first, with
each notification's delivery attempts). Channel header values are write-only."""

from __future__ import annotations

from django.db.models import QuerySet, prefetch_related_objects
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from alerts import channels, states
from alerts.models import AlertChannel, Incident, Notification
from scheduler_site.api import examples as ex
from scheduler_site.api.fields import BIGINT_MAX, QueryIntegerField, query
from scheduler_site.api.pagination import KeysetPagination, page_of
from scheduler_site.api.problems import READ_PROBLEMS, WRITE_PROBLEMS, problem_responses
from scheduler_site.api.views import ApiView

TAGS = ["alerts"]


# --- shapes ------------------------------------------------------------------------------


class ChannelSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=states.CHANNEL_KINDS)
    url = serializers.CharField(allow_null=True, help_text="A webhook channel's URL.")
    header_names = serializers.ListField(
        child=serializers.CharField(),
        help_text="The names of the headers it sends; their values are never shown.",
    )
    emails = serializers.ListField(child=serializers.EmailField())
    job = serializers.IntegerField(allow_null=True, help_text="null: every job of the tenant.")
    on_dead_letter = serializers.BooleanField()
    failure_threshold = serializers.IntegerField(allow_null=True)
    missed_grace_seconds = serializers.IntegerField(allow_null=True)
    notify_resolved = serializers.BooleanField()
    enabled = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ChannelInputSerializer(serializers.Serializer):
    """The service checks each field (alerts/channels.py); this states the shape."""

    name = serializers.CharField(max_length=200)
    kind = serializers.ChoiceField(choices=states.CHANNEL_KINDS)
    url = serializers.CharField(
        required=False, max_length=2048, help_text="webhook: where to POST (SSRF-guarded)."
    )
    headers = serializers.DictField(
        child=serializers.CharField(max_length=4096),
        required=False,
        help_text="webhook: headers to send (e.g. Authorization); stored encrypted, never shown.",
    )
    emails = serializers.ListField(
        child=serializers.EmailField(),
        required=False,
        min_length=1,
        max_length=channels.MAX_EMAILS,
        help_text="email: the addresses to write to.",
    )
    job = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=BIGINT_MAX,
        help_text="One job's id, or null (the default) for every job of the tenant.",
    )
    on_dead_letter = serializers.BooleanField(
        required=False, help_text="Tell when a run is dead-lettered (default true)."
    )
    failure_threshold = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=1000,
        help_text="Tell after this many failed attempts in a row (null: off, the default).",
    )
    missed_grace_seconds = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=channels.MAX_GRACE,
        help_text="Tell when a scheduled run has not succeeded this long after its slot "
        "(null: off, the default).",
    )
    notify_resolved = serializers.BooleanField(
        required=False, help_text="Also tell when the job next succeeds (default true)."
    )
    enabled = serializers.BooleanField(required=False)


class IncidentSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    channel = serializers.IntegerField(source="channel_id")
    job = serializers.IntegerField(source="job_id")
    kind = serializers.ChoiceField(choices=states.KINDS)
    state = serializers.SerializerMethodField(help_text="open, or resolved.")
    detail = serializers.CharField()
    run_id = serializers.UUIDField(allow_null=True, help_text="The run that made it hold.")
    trigger_at = serializers.DateTimeField(help_text="When the condition came to hold.")
    opened_at = serializers.DateTimeField()
    resolved_at = serializers.DateTimeField(allow_null=True)
    resolved_by_run = serializers.UUIDField(allow_null=True)

    def get_state(self, incident: Incident) -> str:
        return "open" if incident.resolved_at is None else "resolved"


class DeliveryAttemptSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField()
    ok = serializers.BooleanField()
    status_code = serializers.IntegerField(allow_null=True)
    error = serializers.CharField()


class NotificationSerializer(serializers.Serializer):
    id = serializers.UUIDField(help_text="Also its webhook-id: the same for every attempt.")
    incident = serializers.IntegerField(source="incident_id")
    channel = serializers.IntegerField(source="channel_id")
    event = serializers.ChoiceField(choices=states.EVENTS)
    state = serializers.ChoiceField(choices=states.DELIVERY_STATES)
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(
        allow_null=True, help_text="When a pending one is tried again."
    )
    sent_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField()
    created_at = serializers.DateTimeField()
    payload = serializers.JSONField(help_text="The body sent (docs/alerts.md).")
    deliveries = DeliveryAttemptSerializer(source="delivery_attempts.all", many=True)


class IncidentFilterSerializer(serializers.Serializer):
    job = QueryIntegerField(required=False, min_value=1, max_value=BIGINT_MAX)
    channel = QueryIntegerField(required=False, min_value=1, max_value=BIGINT_MAX)
    state = serializers.ChoiceField(choices=("open", "resolved"), required=False)


class NotificationFilterSerializer(serializers.Serializer):
    incident = QueryIntegerField(required=False, min_value=1, max_value=BIGINT_MAX)
    state = serializers.ChoiceField(choices=states.DELIVERY_STATES, required=False)


class ChannelPagination(KeysetPagination):
    model = AlertChannel
    ordering = ("id",)


class IncidentPagination(KeysetPagination):
    model = Incident
    ordering = ("-opened_at", "-id")


class NotificationPagination(KeysetPagination):
    model = Notification
    ordering = ("-created_at", "-id")

    def fetch(self, queryset: QuerySet, limit: int) -> list:
        rows = super().fetch(queryset, limit)
        prefetch_related_objects(rows, "delivery_attempts")
        return rows


# --- examples ----------------------------------------------------------------------------

CHANNEL = {
    "id": 3,
    "name": "on-call",
    "kind": states.WEBHOOK,
    "url": "https://hooks.example.com/tickwork",
    "header_names": ["Authorization"],
    "emails": [],
    "job": None,
    "on_dead_letter": True,
    "failure_threshold": 3,
    "missed_grace_seconds": 300,
    "notify_resolved": True,
    "enabled": True,
    "created_at": "2026-11-20T09:00:46.347306Z",
    "updated_at": "2026-11-20T09:00:46.347306Z",
}
INCIDENT = {
    "id": 17,
    "channel": 3,
    "job": 5,
    "kind": states.MISSED,
    "state": "resolved",
    "detail": "the run scheduled for 2026-11-29T01:30:00+00:00 had not succeeded by "
    "2026-11-29T01:35:00+00:00 (it was queued)",
    "run_id": ex.RUN_ID,
    "trigger_at": "2026-11-29T01:35:00Z",
    "opened_at": "2026-11-29T01:35:02.5Z",
    "resolved_at": "2026-11-29T01:41:10.2Z",
    "resolved_by_run": ex.RUN_ID,
}
NOTIFICATION = {
    "id": "01a2268b-4f1c-7a55-9c1e-3b5d7e9f1a20",
    "incident": 17,
    "channel": 3,
    "event": states.OPENED,
    "state": states.SENT,
    "attempts": 2,
    "next_attempt_at": "2026-11-29T01:35:12.6Z",
    "sent_at": "2026-11-29T01:35:12.8Z",
    "last_error": "",
    "created_at": "2026-11-29T01:35:02.5Z",
    "payload": {
        "type": "alert.opened",
        "id": "01a2268b-4f1c-7a55-9c1e-3b5d7e9f1a20",
        "tenant": "demo",
        "incident": {"id": 17, "kind": states.MISSED},
        "job": {"id": 5, "name": "nightly-report"},
    },
    "deliveries": [
        {
            "number": 1,
            "started_at": "2026-11-29T01:35:02.6Z",
            "finished_at": "2026-11-29T01:35:02.7Z",
            "ok": False,
            "status_code": 503,
            "error": "HTTP 503",
        },
        {
            "number": 2,
            "started_at": "2026-11-29T01:35:12.6Z",
            "finished_at": "2026-11-29T01:35:12.8Z",
            "ok": True,
            "status_code": 200,
            "error": "",
        },
    ],
}


# --- views -------------------------------------------------------------------------------


def _shown(channel: AlertChannel) -> dict:
    return ChannelSerializer(channels.shown(channel)).data


class ChannelView(ApiView):
    def channel_url(self, request: Request, channel: AlertChannel) -> str:
        return request.build_absolute_uri(
            reverse("api:alert-channel", kwargs={"channel_id": channel.id})
        )


class ChannelCollectionView(ChannelView):
    @extend_schema(
        operation_id="alert_channels_list",
        tags=TAGS,
        summary="List alert channels",
        description=(
            "The tenant's alert channels (webhooks and email addresses) with the conditions "
            "each is told about, in the order they were created. Header values are never shown."
        ),
        parameters=ChannelPagination.parameters(),
        examples=[ex.answer("A page of channels", {"next": None, "results": [CHANNEL]})],
        responses={200: page_of(ChannelSerializer), **problem_responses(400, *READ_PROBLEMS)},
    )
    def get(self, request: Request) -> Response:
        paginator = ChannelPagination()
        page = paginator.paginate_queryset(channels.channel_list(), request, self)
        return paginator.get_paginated_response(
            ChannelSerializer([channels.shown(c) for c in page], many=True).data
        )

    @extend_schema(
        operation_id="alert_channels_create",
        tags=TAGS,
        summary="Create an alert channel",
        description=(
            "A webhook (`url`, optional `headers`; deliveries are signed like HTTP targets) or "
            "an email channel (`emails`), for one `job` or every job, told about dead-lettered "
            "runs, `failure_threshold` failed attempts in a row, or runs not succeeded "
            "`missed_grace_seconds` after their slot, and when the job recovers."
        ),
        request=ChannelInputSerializer,
        examples=[
            ex.request(
                "A webhook for every job",
                {
                    "name": "on-call",
                    "kind": states.WEBHOOK,
                    "url": "https://hooks.example.com/tickwork",
                    "headers": {"Authorization": "Bearer 9f86d081"},
                    "failure_threshold": 3,
                    "missed_grace_seconds": 300,
                },
            ),
            ex.request(
                "Email about one job",
                {"name": "reports", "kind": states.EMAIL, "emails": ["ops@example.com"], "job": 5},
            ),
            ex.answer("The channel created", CHANNEL, 201),
            ex.problem(
                "A refused URL",
                400,
                "url: 127.0.0.1 is a loopback address",
                "urn:tickwork:problem:validation-error",
                {"url": ["127.0.0.1 is a loopback address"]},
            ),
        ],
        responses={201: ChannelSerializer, **problem_responses(*WRITE_PROBLEMS)},
    )
    def post(self, request: Request) -> Response:
        channel = channels.channel_create(data=request.data, **self.services_kwargs(request))
        headers = {"Location": self.channel_url(request, channel)}
        return Response(_shown(channel), status=201, headers=headers)


class ChannelDetailView(ChannelView):
    @extend_schema(
        operation_id="alert_channels_retrieve",
        tags=TAGS,
        summary="Read an alert channel",
        description="The channel's destination and conditions; its header values are never "
        "shown, only their names. Another tenant's channel ids are 404s.",
        examples=[ex.answer("A channel", CHANNEL)],
        responses={200: ChannelSerializer, **problem_responses(404, *READ_PROBLEMS)},
    )
    def get(self, request: Request, channel_id: int) -> Response:
        return Response(_shown(channels.channel_get(channel_id=channel_id)))

    @extend_schema(
        operation_id="alert_channels_update",
        tags=TAGS,
        summary="Change an alert channel",
        description="Only the fields given change; `headers`, when given, replace all the "
        "channel's headers. Incidents already open stay open until their job succeeds.",
        request=ChannelInputSerializer(partial=True),
        examples=[ex.request("Pause it", {"enabled": False}), ex.answer("The channel", CHANNEL)],
        responses={200: ChannelSerializer, **problem_responses(404, *WRITE_PROBLEMS)},
    )
    def patch(self, request: Request, channel_id: int) -> Response:
        channel = channels.channel_update(
            channel_id=channel_id, data=request.data, **self.services_kwargs(request)
        )
        return Response(_shown(channel))

    @extend_schema(
        operation_id="alert_channels_destroy",
        tags=TAGS,
        summary="Delete an alert channel",
        description="The channel goes, with its incidents and notifications (and any "
        "notification not yet delivered, which is then never sent).",
        examples=[ex.problem("No such channel", 404, "No such alert channel in this tenant.")],
        responses={204: None, **problem_responses(404, *READ_PROBLEMS)},
    )
    def delete(self, request: Request, channel_id: int) -> Response:
        channels.channel_delete(channel_id=channel_id, **self.services_kwargs(request))
        return Response(status=204)


class IncidentCollectionView(ApiView):
    @extend_schema(
        operation_id="alert_incidents_list",
        tags=TAGS,
        summary="List alert incidents, newest first",
        description=(
            "Each incident is a condition of one channel that held for one job: opened once "
            "(deduplicated by the database), resolved when the job next succeeded. Filter by "
            "`job`, `channel` and `state` (open or resolved)."
        ),
        parameters=[IncidentFilterSerializer, *IncidentPagination.parameters()],
        examples=[ex.answer("A page of incidents", {"next": None, "results": [INCIDENT]})],
        responses={200: page_of(IncidentSerializer), **problem_responses(400, *READ_PROBLEMS)},
    )
    def get(self, request: Request) -> Response:
        filters = query(IncidentFilterSerializer, request)
        incidents = Incident.objects.all()
        if "job" in filters:
            incidents = incidents.filter(job_id=filters["job"])
        if "channel" in filters:
            incidents = incidents.filter(channel_id=filters["channel"])
        if "state" in filters:
            incidents = incidents.filter(resolved_at__isnull=filters["state"] == "open")
        paginator = IncidentPagination()
        page = paginator.paginate_queryset(incidents, request, self)
        return paginator.get_paginated_response(IncidentSerializer(page, many=True).data)


class NotificationCollectionView(ApiView):
    @extend_schema(
        operation_id="alert_notifications_list",
        tags=TAGS,
        summary="List alert notifications and their deliveries",
        description=(
            "The alerts log: every message about an incident (opened, resolved), newest "
            "first, with its delivery state (pending, sending, sent, given_up), the body sent "
            "and each delivery attempt's result. Filter by `incident` and `state`."
        ),
        parameters=[NotificationFilterSerializer, *NotificationPagination.parameters()],
        examples=[ex.answer("A page of notifications", {"next": None, "results": [NOTIFICATION]})],
        responses={
            200: page_of(NotificationSerializer),
            **problem_responses(400, *READ_PROBLEMS),
        },
    )
    def get(self, request: Request) -> Response:
        filters = query(NotificationFilterSerializer, request)
        notifications = Notification.objects.all()
        if "incident" in filters:
            notifications = notifications.filter(incident_id=filters["incident"])
        if "state" in filters:
            notifications = notifications.filter(state=filters["state"])
        paginator = NotificationPagination()
        page = paginator.paginate_queryset(notifications, request, self)
        return paginator.get_paginated_response(NotificationSerializer(page, many=True).data)
