"""The alerts page: the tenant's alert channels, its open incidents and the latest
notifications with their delivery state. Read-only; channels are managed through the API
(`/api/v1/alerts/channels`, docs/alerts.md)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from alerts.channels import channel_list, shown
from alerts.models import Incident, Notification
from jobs.models import Job

from .common import portal_view

RECENT = 30


@portal_view
def alerts_page(request: HttpRequest) -> HttpResponse:
    channels = [shown(c) for c in channel_list().order_by("id")[:200]]
    incidents = list(Incident.objects.filter(resolved_at__isnull=True).order_by("-opened_at")[:100])
    notifications = list(
        Notification.objects.select_related("incident", "channel").order_by("-created_at")[:RECENT]
    )
    ids = {c["job"] for c in channels} | {i.job_id for i in incidents}
    ids |= {n.incident.job_id for n in notifications}
    names = dict(Job.objects.filter(pk__in=[i for i in ids if i]).values_list("id", "name"))
    for channel in channels:
        channel["job_name"] = names.get(channel["job"], "")
    for incident in incidents:
        incident.job_name = names.get(incident.job_id, "")
    for notification in notifications:
        notification.job_name = names.get(notification.incident.job_id, "")
    return render(
        request,
        "portal/alerts.html",
        {"channels": channels, "incidents": incidents, "notifications": notifications},
    )
