"""A tenant's jobs, their dependencies and the audit trail (all in the tenant's schema)."""

from __future__ import annotations

import secrets

from django.db import models
from django.db.models import Q


def new_hash_seed() -> str:
    return secrets.token_hex(8)


class Job(models.Model):
    class ScheduleKind(models.TextChoices):
        CRON = "cron"  # one or more cron specs (a union: `extra_specs`)
        INTERVAL = "interval"
        AT = "at"  # one-off: a wall time in `timezone` (`run_at_wall`)
        NONE = "none"  # runs on demand or as a dependency only

    class TargetType(models.TextChoices):
        HTTP = "http"
        TASK = "task"

    class Priority(models.TextChoices):
        HIGH = "high"
        NORMAL = "normal"
        LOW = "low"

    class ConcurrencyPolicy(models.TextChoices):
        ALLOW = "allow"
        FORBID = "forbid"
        QUEUE = "queue"
        REPLACE = "replace"

    class MisfirePolicy(models.TextChoices):
        RUN_ONCE = "run_once"
        RUN_ALL = "run_all"
        SKIP = "skip"

    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")

    schedule_kind = models.CharField(max_length=8, choices=ScheduleKind.choices)
    cron_expression = models.CharField(max_length=200, blank=True, default="")  # as written
    cron_resolved = models.CharField(max_length=200, blank=True, default="")  # H resolved
    timezone = models.CharField(max_length=64, default="UTC")
    # More cron specs besides the first: [{"cron": as written, "resolved": H resolved,
    # "timezone": zone}]; the job fires on the union of all (a shared instant once).
    # The database default must be JSON's empty array: a bare Value([]) is sent as an SQL
    # array, `{}`, which jsonb stores as an empty object (0004 wrote that; 0007 fixes it).
    extra_specs = models.JSONField(
        default=list, blank=True, db_default=models.Value([], output_field=models.JSONField())
    )
    run_at_wall = models.CharField(max_length=32, blank=True, default="", db_default="")
    # No slot before start_at (inclusive) or from end_at on (exclusive).
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    # Slots on these calendars' dates (local dates in `timezone`) are skipped, `excluded`.
    calendars = models.ManyToManyField("ExclusionCalendar", blank=True, related_name="jobs")
    interval_seconds = models.PositiveIntegerField(null=True, blank=True)
    anchor_at = models.DateTimeField(null=True, blank=True)  # interval fire times: anchor + k*n
    hash_seed = models.CharField(max_length=32, default=new_hash_seed)  # stable `H` and jitter
    jitter_seconds = models.PositiveIntegerField(default=0)
    dst_gap = models.CharField(max_length=8, default="shift")
    dst_repeat = models.CharField(max_length=8, default="first")

    target_type = models.CharField(max_length=8, choices=TargetType.choices)
    target = models.JSONField(default=dict)  # http: url, method, headers; task: task
    payload = models.JSONField(default=dict, blank=True)

    max_attempts = models.PositiveIntegerField(default=3)
    backoff_seconds = models.FloatField(default=10.0)
    backoff_multiplier = models.FloatField(default=2.0)
    backoff_max_seconds = models.FloatField(default=3600.0)
    retry_jitter = models.BooleanField(default=True)
    timeout_seconds = models.PositiveIntegerField(default=300)

    priority = models.CharField(max_length=8, choices=Priority.choices, default="normal")
    concurrency_policy = models.CharField(
        max_length=8, choices=ConcurrencyPolicy.choices, default="allow"
    )
    max_concurrent_runs = models.PositiveIntegerField(default=1)
    misfire_policy = models.CharField(
        max_length=8, choices=MisfirePolicy.choices, default="run_once"
    )
    misfire_grace_seconds = models.PositiveIntegerField(default=60)

    paused = models.BooleanField(default=False)
    paused_reason = models.CharField(max_length=500, blank=True, default="")
    paused_at = models.DateTimeField(null=True, blank=True)
    resumed_at = models.DateTimeField(null=True, blank=True)  # slots in between: `paused`
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Set by the leader when the job's stored fields cannot be planned (e.g. its time zone
    # no longer exists): the job is parked until an edit or a resume clears it.
    # Set by the leader when the schedule has no slot left to prepare (it has materialised
    # the last one, up to the lookahead and its extra before it fires): the job is
    # `completed`; an edit that gives it slots again clears it.
    completed_at = models.DateTimeField(null=True, blank=True)
    fault_code = models.CharField(max_length=32, blank=True, default="", db_default="")
    fault_detail = models.TextField(blank=True, default="", db_default="")
    faulted_at = models.DateTimeField(null=True, blank=True)

    # The next slot not yet materialised, UTC. The leader advances it; Redis mirrors it.
    next_run_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    # Set with every change, cleared once the change is in the Redis index (jobs.services).
    index_dirty = models.BooleanField(default=True)
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(
                fields=["next_run_at"],
                name="job_schedulable_idx",
                condition=Q(
                    deleted_at__isnull=True, paused=False, next_run_at__isnull=False, fault_code=""
                ),
            ),
            models.Index(fields=["updated_at"], name="job_updated_idx"),
            models.Index(fields=["id"], name="job_index_dirty_idx", condition=Q(index_dirty=True)),
            # Pages of live jobs (`WHERE deleted_at IS NULL ORDER BY id`) walk this in order
            # whatever the statistics say: before ANALYZE has seen a bulk insert, PostgreSQL
            # takes IS NULL for rare and sorted the whole table for one page.
            models.Index(fields=["id"], name="job_live_idx", condition=Q(deleted_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def state(self) -> str:
        if self.deleted_at is not None:
            return "deleted"
        if self.paused:
            return "paused"
        if self.fault_code:
            return "parked"
        return "completed" if self.completed_at is not None else "active"

    @property
    def schedulable(self) -> bool:
        """The leader materialises its slots (the condition of job_schedulable_idx)."""
        return (
            self.deleted_at is None
            and not self.paused
            and self.next_run_at is not None
            and not self.fault_code
        )


class ExclusionCalendar(models.Model):
    """A tenant's named set of dates (public holidays, a freeze) that jobs can skip.
    `dates`: ["2026-12-25", ...]; `ranges`: [["2026-12-24", "2026-12-26"], ...], inclusive."""

    name = models.CharField(max_length=200, unique=True)
    description = models.TextField(blank=True, default="")
    dates = models.JSONField(default=list, blank=True)
    ranges = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Dependency(models.Model):
    """`downstream` runs after `upstream` succeeds. The graph stays acyclic."""

    upstream = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="downstream_links")
    downstream = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="upstream_links")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["upstream", "downstream"], name="dependency_unique"),
            models.CheckConstraint(
                condition=~Q(upstream=models.F("downstream")), name="dependency_not_self"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.upstream_id} -> {self.downstream_id}"


class AuditEvent(models.Model):
    """Who changed what: one row per create, update, pause, resume, trigger, delete, ..."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=32)
    job = models.ForeignKey(Job, null=True, on_delete=models.SET_NULL, related_name="audit")
    run_id = models.UUIDField(null=True, blank=True)
    changes = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action}"
