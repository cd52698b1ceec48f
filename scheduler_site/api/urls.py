"""/api/v1/: the same routes on the public host (tenant from the token) and on a tenant's
domain. Ids outside PostgreSQL's bigint range do not match, so they are 404s like any
unknown id rather than database errors."""

from __future__ import annotations

from django.urls import include, path, re_path, register_converter

from scheduler_site.api.dags import DagRunCollectionView, DagRunDetailView, JobGraphView
from scheduler_site.api.jobs.bulk import JobBulkView
from scheduler_site.api.jobs.preview import SchedulePreviewView
from scheduler_site.api.jobs.views import (
    JobCollectionView,
    JobDetailView,
    JobPauseView,
    JobResumeView,
    JobTriggerView,
)
from scheduler_site.api.runs.views import (
    DlqCollectionView,
    DlqReplayView,
    JobBackfillView,
    RunCancelView,
    RunCollectionView,
    RunDetailView,
    RunReplayView,
)

from .alerts import (
    ChannelCollectionView,
    ChannelDetailView,
    IncidentCollectionView,
    NotificationCollectionView,
)
from .calendars import CalendarCollectionView, CalendarDetailView
from .fields import BIGINT_MAX
from .guide import guide
from .signing import SigningSecretRotateView, SigningSecretView
from .usage import UsageView
from .views import ApiNotFoundView, DocsView, SchemaView


class JobIdConverter:
    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number > BIGINT_MAX:
            raise ValueError("out of range")
        return number

    def to_url(self, value: int) -> str:
        return str(value)


class CalendarNameConverter:
    regex = "[^/]{1,200}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(JobIdConverter, "job_id")
register_converter(CalendarNameConverter, "calendar_name")

app_name = "api"

endpoints = [
    path("jobs", JobCollectionView.as_view(), name="jobs"),
    path("jobs/bulk", JobBulkView.as_view(), name="jobs-bulk"),
    path("jobs/<job_id:job_id>", JobDetailView.as_view(), name="job"),
    path("jobs/<job_id:job_id>/pause", JobPauseView.as_view(), name="job-pause"),
    path("jobs/<job_id:job_id>/resume", JobResumeView.as_view(), name="job-resume"),
    path("jobs/<job_id:job_id>/run", JobTriggerView.as_view(), name="job-run"),
    path("jobs/<job_id:job_id>/backfill", JobBackfillView.as_view(), name="job-backfill"),
    path("runs", RunCollectionView.as_view(), name="runs"),
    path("runs/<uuid:run_id>", RunDetailView.as_view(), name="run"),
    path("runs/<uuid:run_id>/cancel", RunCancelView.as_view(), name="run-cancel"),
    path("runs/<uuid:run_id>/replay", RunReplayView.as_view(), name="run-replay"),
    path("dlq", DlqCollectionView.as_view(), name="dlq"),
    path("dlq/replay", DlqReplayView.as_view(), name="dlq-replay"),
    path("jobs/<job_id:job_id>/graph", JobGraphView.as_view(), name="job-graph"),
    path("dag-runs", DagRunCollectionView.as_view(), name="dag-runs"),
    path("dag-runs/<uuid:dag_run_id>", DagRunDetailView.as_view(), name="dag-run"),
    path("schedule/preview", SchedulePreviewView.as_view(), name="schedule-preview"),
    path("calendars", CalendarCollectionView.as_view(), name="calendars"),
    path("calendars/<calendar_name:name>", CalendarDetailView.as_view(), name="calendar"),
    path("usage", UsageView.as_view(), name="usage"),
    path("signing-secret", SigningSecretView.as_view(), name="signing-secret"),
    path("signing-secret/rotate", SigningSecretRotateView.as_view(), name="signing-secret-rotate"),
    path("alerts/channels", ChannelCollectionView.as_view(), name="alert-channels"),
    path("alerts/channels/<job_id:channel_id>", ChannelDetailView.as_view(), name="alert-channel"),
    path("alerts/incidents", IncidentCollectionView.as_view(), name="alert-incidents"),
    path("alerts/notifications", NotificationCollectionView.as_view(), name="alert-notifications"),
]

urlpatterns = [
    *endpoints,
    # The schema describes exactly the endpoints above, wherever this module is mounted.
    path(
        "openapi.json",
        SchemaView.as_view(patterns=[path("api/v1/", include((endpoints, "api")))]),
        name="openapi",
    ),
    path("docs", DocsView.as_view(), name="docs"),
    path("guide", guide, name="guide"),
    path("guide/<slug:name>", guide, name="guide-page"),
    re_path(r"^", ApiNotFoundView.as_view(), name="not-found"),
]
