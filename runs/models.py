"""Runs (one execution of a job, with retries) and their attempts, in the tenant's schema."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from . import states
from .ids import uuid7


class Run(models.Model):
    class Trigger(models.TextChoices):
        SCHEDULE = "schedule"
        MANUAL = "manual"
        DEPENDENCY = "dependency"
        BACKFILL = "backfill"

    STATUS_CHOICES = [(status, status) for status in states.ALL]

    # The run id is the idempotency key everywhere: Celery task id, HTTP Idempotency-Key.
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    job = models.ForeignKey("jobs.Job", on_delete=models.PROTECT, related_name="runs")
    trigger = models.CharField(max_length=12, choices=Trigger.choices)
    scheduled_for = models.DateTimeField()  # the nominal instant
    due_at = models.DateTimeField()  # when it is to be admitted: + jitter, or a retry's time
    status = models.CharField(max_length=10, choices=STATUS_CHOICES, default=states.SCHEDULED)
    skip_reason = models.CharField(max_length=20, blank=True, default="")
    attempt = models.PositiveIntegerField(default=1)
    payload_override = models.JSONField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    dag_run = models.UUIDField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, default="")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-scheduled_for"]
        constraints = [
            # Invariant 1: at most one scheduled run per (job, instant). The leader inserts
            # with ON CONFLICT DO NOTHING, so a re-evaluated tick creates nothing twice.
            models.UniqueConstraint(
                fields=["job", "scheduled_for"],
                condition=Q(trigger="schedule"),
                name="run_one_per_slot",
            ),
            models.UniqueConstraint(
                fields=["job", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="run_idempotency_key",
            ),
        ]
        indexes = [
            models.Index(
                fields=["due_at"], name="run_pending_idx", condition=Q(status=states.SCHEDULED)
            ),
            models.Index(
                fields=["due_at"], name="run_retrying_idx", condition=Q(status=states.RETRYING)
            ),
            models.Index(
                fields=["heartbeat_at"], name="run_running_idx", condition=Q(status=states.RUNNING)
            ),
            models.Index(
                fields=["queued_at"], name="run_queued_idx", condition=Q(status=states.QUEUED)
            ),
            models.Index(fields=["job", "-scheduled_for"], name="run_job_history_idx"),
            models.Index(fields=["status", "-scheduled_for"], name="run_status_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}@{self.scheduled_for:%Y-%m-%dT%H:%M:%SZ} {self.status}"

    @property
    def next_attempt_at(self):
        return self.due_at if self.status == states.RETRYING else None

    def attempt_history(self) -> list[Attempt]:
        """The recorded attempts, plus the one in progress: attempts are written when they
        end, so a running attempt is described from the run itself."""
        attempts = list(self.attempts.all())
        if self.status == states.RUNNING and all(a.number != self.attempt for a in attempts):
            attempts.append(
                Attempt(
                    run=self,
                    number=self.attempt,
                    outcome=states.ATTEMPT_RUNNING,
                    worker=self.worker,
                    started_at=self.started_at,
                )
            )
        return attempts


class Attempt(models.Model):
    """One try of a run: the audit trail of what each worker did."""

    class Outcome(models.TextChoices):
        RUNNING = states.ATTEMPT_RUNNING
        SUCCEEDED = states.ATTEMPT_SUCCEEDED
        FAILED = states.ATTEMPT_FAILED
        LOST = states.ATTEMPT_LOST  # the worker vanished (reaped after the visibility timeout)
        CANCELLED = states.ATTEMPT_CANCELLED

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    outcome = models.CharField(
        max_length=10, choices=Outcome.choices, default=states.ATTEMPT_RUNNING
    )
    worker = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    output = models.TextField(blank=True, default="")  # the first few KB of response/traceback

    class Meta:
        ordering = ["number"]
        constraints = [
            models.UniqueConstraint(fields=["run", "number"], name="attempt_once_per_number"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.number} {self.outcome}"
