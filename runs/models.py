"""Runs (one execution of a job, with retries) and their attempts, in the tenant's schema."""

from __future__ import annotations

from functools import reduce
from operator import or_

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
            # A downstream job runs once per DAG run: two upstreams finishing at the same
            # instant both try to create its run, and this index lets exactly one in.
            models.UniqueConstraint(
                fields=["dag_run", "job"],
                condition=Q(trigger="dependency"),
                name="run_once_per_dag_run",
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
            models.Index(
                fields=["dag_run"], name="run_dag_run_idx", condition=Q(dag_run__isnull=False)
            ),
            # A job's newest runs inside DAG runs (the portal's graph colours, its list of a
            # job's DAG runs): without it, a job with 50,000 runs and none in a DAG run
            # reads them all to say so.
            models.Index(
                fields=["job", "-scheduled_for"],
                name="run_job_dag_idx",
                condition=Q(dag_run__isnull=False),
            ),
            # Retention (beat/retention.py) deletes ended runs oldest end first: without it,
            # finding a batch of runs past the retention reads the whole history. An OR of
            # equalities, not IN: PostgreSQL prints an IN list back with casts that parse
            # to another expression, and the template clone recreates indexes from that.
            models.Index(
                fields=["finished_at"],
                name="run_finished_idx",
                condition=reduce(or_, (Q(status=status) for status in states.PRUNABLE)),
            ),
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


class DagRun(models.Model):
    """One run of a job with downstreams and of everything it causes downstream.

    It covers its root job and every job downstream of it, as the edges were when it
    started (`nodes`, `edges`: a snapshot, so that an edit of the graph meanwhile changes
    only later DAG runs). Each downstream job's run carries its id (`Run.dag_run`); see
    runs/dags.py for how it advances."""

    STATUS_CHOICES = [(status, status) for status in states.DAG_STATUSES]

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    root_job = models.ForeignKey("jobs.Job", on_delete=models.PROTECT, related_name="dag_runs")
    root_run = models.UUIDField()
    trigger = models.CharField(max_length=12)  # the root run's
    status = models.CharField(max_length=10, choices=STATUS_CHOICES, default=states.DAG_RUNNING)
    nodes = models.JSONField()  # [job id, ...], the root first
    edges = models.JSONField()  # [[upstream, downstream], ...]
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # How many of its runs had ended at the last settle: the leader's sweep settles a
    # running DAG run again when that count no longer matches (an end nobody settled).
    settled_terminal = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(
                fields=["started_at"],
                name="dagrun_running_idx",
                condition=Q(status=states.DAG_RUNNING),
            ),
            models.Index(fields=["root_job", "-started_at"], name="dagrun_root_idx"),
            models.Index(fields=["-started_at", "id"], name="dagrun_recent_idx"),
        ]

    def __str__(self) -> str:
        return f"DAG run {self.id} of job {self.root_job_id} ({self.status})"
