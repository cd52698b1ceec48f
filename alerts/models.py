"""Alert channels (where to tell, and when), incidents (a condition that holds for a job,
open until the job next succeeds) and notifications (one message about an incident, with
its delivery state and attempts), in the tenant's schema. See docs/alerts.md."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from runs.ids import uuid7

from . import states


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


class AlertChannel(models.Model):
    """A destination (webhook URL or email addresses) and the conditions it is told about,
    for one job or (`job` null) for every job of the tenant."""

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=10, choices=_choices(states.CHANNEL_KINDS))
    url = models.CharField(max_length=2048, blank=True, default="")
    # {name: Fernet token}: every channel header value is sealed and never shown.
    headers = models.JSONField(default=dict, blank=True)
    emails = models.JSONField(default=list, blank=True)
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    on_dead_letter = models.BooleanField(default=True)
    failure_threshold = models.PositiveIntegerField(null=True, blank=True)
    missed_grace_seconds = models.PositiveIntegerField(null=True, blank=True)
    notify_resolved = models.BooleanField(default=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class Incident(models.Model):
    """A condition of one channel holding for one job. The database decides that it is
    opened once: at most one open incident per (channel, job, kind) (a partial unique
    index), and one incident per triggering fact (`trigger_at`), so two evaluators racing,
    or a new leader re-reading what the old one evaluated, open nothing twice."""

    channel = models.ForeignKey(AlertChannel, on_delete=models.CASCADE, related_name="incidents")
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=12, choices=_choices(states.KINDS))
    trigger_at = models.DateTimeField()  # when the condition came to hold
    run_id = models.UUIDField(null=True, blank=True)  # the run that made it hold
    detail = models.TextField(blank=True, default="")
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by_run = models.UUIDField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "job", "kind"],
                condition=Q(resolved_at__isnull=True),
                name="incident_one_open",
            ),
            models.UniqueConstraint(
                fields=["channel", "job", "kind", "trigger_at"], name="incident_once_per_fact"
            ),
        ]
        indexes = [
            models.Index(fields=["-opened_at", "-id"], name="incident_recent_idx"),
            models.Index(
                fields=["job"], name="incident_open_idx", condition=Q(resolved_at__isnull=True)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of job {self.job_id} on {self.channel_id}"


class Notification(models.Model):
    """One message about an incident (opened or resolved): one per (incident, event), by a
    unique constraint. Its id is the webhook-id every attempt sends."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="notifications")
    channel = models.ForeignKey(
        AlertChannel, on_delete=models.CASCADE, related_name="notifications"
    )
    event = models.CharField(max_length=10, choices=_choices(states.EVENTS))
    payload = models.JSONField()  # built once: every attempt sends the same body
    state = models.CharField(
        max_length=10, choices=_choices(states.DELIVERY_STATES), default=states.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    lease_until = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["incident", "event"], name="notification_once"),
        ]
        indexes = [
            models.Index(fields=["-created_at", "-id"], name="notification_recent_idx"),
            # Equality predicates: what a sender claims (tenant_template's clone check
            # compares index definitions, and an IN list's casts print differently).
            models.Index(
                fields=["next_attempt_at"],
                name="notification_pending_idx",
                condition=Q(state=states.PENDING),
            ),
            models.Index(
                fields=["lease_until"],
                name="notification_sending_idx",
                condition=Q(state=states.SENDING),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} of incident {self.incident_id}: {self.state}"


class DeliveryAttempt(models.Model):
    """One try at sending a notification: the delivery log."""

    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="delivery_attempts"
    )
    number = models.PositiveIntegerField()
    sender = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    ok = models.BooleanField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["number"]
        constraints = [
            models.UniqueConstraint(fields=["notification", "number"], name="delivery_once"),
        ]

    def __str__(self) -> str:
        return f"{self.notification_id}#{self.number} {'ok' if self.ok else 'failed'}"


class EvaluationCursor(models.Model):
    """One row: how far the leader has evaluated this tenant's run outcomes."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    evaluated_through = models.DateTimeField()

    def __str__(self) -> str:
        return f"evaluated through {self.evaluated_through:%Y-%m-%dT%H:%M:%SZ}"
