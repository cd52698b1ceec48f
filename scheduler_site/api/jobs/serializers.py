"""The job JSON shapes. Output serializers render jobs; the input ones describe the request
bodies for the OpenAPI schema only: `jobs.validation.clean_job_input` (called by the
services) is the one place that validates a job, so its rules are not repeated here. The
bounds below mirror it for the schema's sake."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from jobs.headers import shown_headers
from jobs.models import Job
from jobs.validation import (
    BIGINT_MAX,
    CONCURRENCY,
    HTTP_METHODS,
    MISFIRE,
    NAME_PATTERN,
    PRIORITIES,
    SIMPLE_FIELDS,
)
from runs import states
from scheduler_site.api.fields import StrictSerializer

from .schedule_shapes import ScheduleField, ScheduleInputField, schedule_json

STATES = ("active", "paused", "parked", "completed")


def _bounds(name: str) -> dict[str, int]:
    _, low, high = SIMPLE_FIELDS[name]
    return {"min_value": low, "max_value": high}


@extend_schema_field({"type": "object", "additionalProperties": True})
class JSONObjectField(serializers.JSONField):
    """A JSON object (the service checks its size)."""

    json_type = dict


SECRET_SHOWN_SCHEMA = {
    "type": "object",
    "properties": {"secret": {"type": "boolean", "enum": [True]}},
    "required": ["secret"],
    "additionalProperties": False,
    "description": "A secret value: never shown.",
}
SECRET_GIVEN_SCHEMA = {
    "type": "object",
    "properties": {
        "value": {"type": "string", "description": "Left out: keep the stored secret value."},
        "secret": {"type": "boolean"},
    },
    "additionalProperties": False,
    "description": "`secret: true` encrypts the value at rest and never shows it again.",
}


@extend_schema_field({"oneOf": [{"type": "string"}, SECRET_SHOWN_SCHEMA]})
class HeaderValueField(serializers.JSONField):
    """A header value as shown: the string, or {"secret": true} for a secret one."""


@extend_schema_field({"oneOf": [{"type": "string"}, SECRET_GIVEN_SCHEMA]})
class HeaderInputValueField(serializers.JSONField):
    """A header value as given: a string, or {"value": "...", "secret": true}."""


class HttpTargetSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["http"])
    url = serializers.CharField()
    method = serializers.ChoiceField(choices=HTTP_METHODS)
    headers = serializers.DictField(child=HeaderValueField())


class TaskTargetSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["task"])
    task = serializers.CharField(help_text="A registered task name, e.g. builtin.noop.")


class RetrySerializer(serializers.Serializer):
    max_attempts = serializers.IntegerField()
    backoff_seconds = serializers.FloatField(help_text="The delay before the first retry.")
    backoff_multiplier = serializers.FloatField(help_text="Each further delay is this much longer.")
    backoff_max_seconds = serializers.FloatField(help_text="No delay is longer.")
    jitter = serializers.BooleanField(source="retry_jitter", help_text="Randomise each delay.")


TARGET = PolymorphicProxySerializer(
    component_name="Target",
    serializers={"http": HttpTargetSerializer, "task": TaskTargetSerializer},
    resource_type_field_name="type",
)


def target_json(job: Job) -> dict[str, Any]:
    """Only the documented keys: whatever else a target holds stays inside."""
    target = job.target or {}
    if job.target_type == "http":
        return {
            "type": "http",
            "url": target.get("url"),
            "method": target.get("method", "POST"),
            # A secret value shows as {"secret": true}: the API never returns it.
            "headers": shown_headers(target.get("headers")),
        }
    return {"type": "task", "task": target.get("task")}


@extend_schema_field(TARGET)
class TargetField(serializers.Field):
    def to_representation(self, job: Job) -> dict[str, Any]:
        return target_json(job)


class LastRunSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="last_run_id")
    status = serializers.ChoiceField(choices=states.ALL, source="last_run_status")
    finished_at = serializers.DateTimeField(source="last_run_finished_at", allow_null=True)


class FaultSerializer(serializers.Serializer):
    code = serializers.ChoiceField(
        choices=["invalid_timezone", "invalid_schedule", "invalid_data"], source="fault_code"
    )
    detail = serializers.CharField(source="fault_detail")
    at = serializers.DateTimeField(source="faulted_at")


@extend_schema_field(FaultSerializer(allow_null=True))
class FaultField(serializers.Field):
    def to_representation(self, job: Job) -> dict[str, Any] | None:
        return FaultSerializer(job).data if job.fault_code else None


@extend_schema_field(LastRunSerializer(allow_null=True))
class LastRunField(serializers.Field):
    def to_representation(self, job: Job) -> dict[str, Any] | None:
        if getattr(job, "last_run_id", None) is None:
            return None
        return LastRunSerializer(job).data


class NextRunAtField(serializers.DateTimeField):
    """The scheduler's cursor (the next slot not yet prepared), or null: a paused job keeps
    its place in the schedule (`next_run_at` in the row, for the resume), but shows none."""

    def get_attribute(self, job: Job) -> Any:
        return None if job.paused or job.fault_code else job.next_run_at


class PausedAtField(serializers.DateTimeField):
    def get_attribute(self, job: Job) -> Any:
        return job.paused_at if job.paused else None


class JobSerializer(serializers.Serializer):
    """A job as the API shows it."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    schedule = ScheduleField(source="*", allow_null=True, help_text="null: on demand only.")
    target = TargetField(source="*")
    payload = JSONObjectField()
    retry = RetrySerializer(source="*")
    timeout_seconds = serializers.IntegerField()
    priority = serializers.ChoiceField(choices=PRIORITIES)
    concurrency_policy = serializers.ChoiceField(choices=CONCURRENCY)
    max_concurrent_runs = serializers.IntegerField()
    misfire_policy = serializers.ChoiceField(choices=MISFIRE)
    misfire_grace_seconds = serializers.IntegerField()
    jitter_seconds = serializers.IntegerField()
    dst_gap = serializers.ChoiceField(choices=["shift", "skip"])
    dst_repeat = serializers.ChoiceField(choices=["first", "last", "both"])
    depends_on = serializers.SerializerMethodField()
    state = serializers.ChoiceField(
        choices=STATES,
        help_text="`parked`: the scheduler could not plan the job's stored schedule (see "
        "`fault`); an edit or a resume clears it. `completed`: the schedule has no slot left "
        "to prepare (the run of its last slot, a one-off's or the last before `end`, is "
        "prepared, up to the lookahead and its extra before it fires); an edit that gives it "
        "slots clears it.",
    )
    paused_reason = serializers.CharField()
    paused_at = PausedAtField(
        allow_null=True, help_text="Paused since (null unless `state` is `paused`)."
    )
    fault = FaultField(
        source="*",
        allow_null=True,
        help_text="Why the scheduler parked the job (null unless `state` is `parked`).",
    )
    next_run_at = NextRunAtField(
        allow_null=True,
        help_text="The scheduler's cursor (UTC): the next slot it has not yet prepared a run "
        "for. It can be a slot that will be recorded as skipped (`excluded`, `dst`), and a run "
        "prepared ahead (within the lookahead and its extra) is already behind it; the next "
        "firing slots: `POST /schedule/preview`. Null for a job on demand or as a dependency "
        "only, a paused or parked job, or a completed schedule.",
    )
    last_run = LastRunField(source="*", allow_null=True, help_text="The latest run due by now.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_depends_on(self, job: Job) -> list[int]:
        return list(job.upstream_ids)

    def to_representation(self, job: Job) -> dict[str, Any]:
        # The fields above describe the shape (the OpenAPI schema) and can render it
        # (`declared_representation`); `job_json` renders the same dict in a tenth of the
        # time, which is most of a page of 50 jobs. tests/api/test_jobs.py holds the two equal.
        return job_json(job)

    def declared_representation(self, job: Job) -> dict[str, Any]:
        return super().to_representation(job)


def _instant(value: datetime | None) -> str | None:
    """As DRF's DateTimeField writes an instant (UTC, `Z`)."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def job_json(job: Job) -> dict[str, Any]:
    """A job as the API shows it (the shape of JobSerializer). `job` carries
    `upstream_ids` and `calendar_names` (jobs.selectors.with_relation_ids), and the last
    run's fields when annotated with runs.selectors.with_last_run."""
    parked = bool(job.fault_code)
    last_run_id = getattr(job, "last_run_id", None)
    return {
        "id": job.id,
        "name": job.name,
        "description": job.description,
        "schedule": schedule_json(job),
        "target": target_json(job),
        "payload": job.payload,
        "retry": {
            "max_attempts": job.max_attempts,
            "backoff_seconds": float(job.backoff_seconds),
            "backoff_multiplier": float(job.backoff_multiplier),
            "backoff_max_seconds": float(job.backoff_max_seconds),
            "jitter": job.retry_jitter,
        },
        "timeout_seconds": job.timeout_seconds,
        "priority": job.priority,
        "concurrency_policy": job.concurrency_policy,
        "max_concurrent_runs": job.max_concurrent_runs,
        "misfire_policy": job.misfire_policy,
        "misfire_grace_seconds": job.misfire_grace_seconds,
        "jitter_seconds": job.jitter_seconds,
        "dst_gap": job.dst_gap,
        "dst_repeat": job.dst_repeat,
        "depends_on": list(job.upstream_ids),
        "state": job.state,
        "paused_reason": job.paused_reason,
        "paused_at": _instant(job.paused_at) if job.paused else None,
        "fault": (
            {
                "code": job.fault_code,
                "detail": job.fault_detail,
                "at": _instant(job.faulted_at),
            }
            if parked
            else None
        ),
        "next_run_at": None if job.paused or parked else _instant(job.next_run_at),
        "last_run": (
            None
            if last_run_id is None
            else {
                "id": str(last_run_id),
                "status": job.last_run_status,
                "finished_at": _instant(job.last_run_finished_at),
            }
        ),
        "created_at": _instant(job.created_at),
        "updated_at": _instant(job.updated_at),
    }


# --- request shapes ----------------------------------------------------------------------


class HttpTargetInputSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["http"])
    url = serializers.CharField(
        max_length=2048,
        help_text="An http(s) URL; internal addresses "
        "are refused unless SCHEDULER_HTTP_ALLOW_NETWORKS allows them.",
    )
    method = serializers.ChoiceField(choices=HTTP_METHODS, default="POST")
    headers = serializers.DictField(
        child=HeaderInputValueField(),
        default=dict,
        help_text="At most SCHEDULER_MAX_HEADERS_BYTES. A value is a string, or "
        '{"value": "…", "secret": true} for one encrypted at rest and never shown again; '
        '{"secret": true} without a value keeps the stored secret value.',
    )


class RetryInputSerializer(serializers.Serializer):
    """A partial retry object: the keys left out keep their current (or default) values."""

    max_attempts = serializers.IntegerField(min_value=1, max_value=100, default=3)
    backoff_seconds = serializers.FloatField(min_value=0, max_value=86400, default=10.0)
    backoff_multiplier = serializers.FloatField(min_value=1, max_value=100, default=2.0)
    backoff_max_seconds = serializers.FloatField(min_value=0, max_value=604800, default=3600.0)
    jitter = serializers.BooleanField(default=True)


@extend_schema_field(
    PolymorphicProxySerializer(
        component_name="TargetInput",
        serializers={"http": HttpTargetInputSerializer, "task": TaskTargetSerializer},
        resource_type_field_name="type",
    )
)
class TargetInputField(serializers.JSONField):
    pass


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": 200, "pattern": NAME_PATTERN})
class NameField(serializers.CharField):
    pass


class JobInputSerializer(serializers.Serializer):
    """A job to create, or (PATCH) the fields to change. Only `name`, `target` and one of
    `schedule` (null for on-demand) or `depends_on` are required to create a job."""

    name = NameField(max_length=200, help_text="At most 200 characters, not only white space.")
    description = serializers.CharField(max_length=5000, required=False, allow_blank=True)
    schedule = ScheduleInputField(
        required=False,
        allow_null=True,
        help_text="null: the job runs on demand or as a dependency only. One of: `cron`; "
        "`specs` (several cron specs, a union); `interval_seconds`; `at` (once). Any of them "
        "may add `start`, `end` and `calendars`.",
    )
    target = TargetInputField()
    payload = JSONObjectField(required=False, help_text="At most SCHEDULER_MAX_PAYLOAD_BYTES.")
    retry = RetryInputSerializer(required=False)
    timeout_seconds = serializers.IntegerField(required=False, **_bounds("timeout_seconds"))
    priority = serializers.ChoiceField(choices=PRIORITIES, required=False)
    concurrency_policy = serializers.ChoiceField(choices=CONCURRENCY, required=False)
    max_concurrent_runs = serializers.IntegerField(required=False, **_bounds("max_concurrent_runs"))
    misfire_policy = serializers.ChoiceField(choices=MISFIRE, required=False)
    misfire_grace_seconds = serializers.IntegerField(
        required=False, **_bounds("misfire_grace_seconds")
    )
    jitter_seconds = serializers.IntegerField(required=False, **_bounds("jitter_seconds"))
    dst_gap = serializers.ChoiceField(choices=["shift", "skip"], required=False)
    dst_repeat = serializers.ChoiceField(choices=["first", "last", "both"], required=False)
    depends_on = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=BIGINT_MAX),
        required=False,
        help_text="Upstream job ids of this tenant; the graph must stay acyclic.",
    )


class PauseSerializer(StrictSerializer):
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=500, help_text="Shown on the job."
    )


@extend_schema_field({"type": "object", "additionalProperties": True, "nullable": True})
class NullableJSONObjectField(JSONObjectField):
    pass


class TriggerSerializer(StrictSerializer):
    payload = NullableJSONObjectField(
        required=False,
        allow_null=True,
        help_text="Replaces the job's payload for this run only (null: the job's own).",
    )


class DeleteParamsSerializer(serializers.Serializer):
    cascade = serializers.ChoiceField(
        choices=["edges"],
        required=False,
        help_text="`edges`: also remove the dependencies of other jobs on this one.",
    )


class JobFilterSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=STATES, required=False)
    priority = serializers.ChoiceField(choices=PRIORITIES, required=False)
    q = serializers.RegexField(
        r"^[^\x00]*$",
        required=False,
        max_length=200,
        trim_whitespace=False,
        help_text="Part of the name (any case).",
    )
