"""The run JSON shapes and the request bodies of the run endpoints."""

from __future__ import annotations

from rest_framework import serializers

from runs import states
from runs.models import Attempt, Run
from scheduler_site.api.fields import (
    BIGINT_MAX,
    InstantField,
    QueryIntegerField,
    StrictSerializer,
    StrictUUIDField,
)

MAX_BULK_REPLAY = 1000


class AttemptSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    outcome = serializers.ChoiceField(choices=Attempt.Outcome.values)
    worker = serializers.CharField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField()
    output = serializers.CharField(help_text="The first few KB of the response or traceback.")


class RunSerializer(serializers.Serializer):
    """A run as the API shows it."""

    id = serializers.UUIDField()
    job = serializers.IntegerField(source="job_id")
    job_name = serializers.CharField(help_text="The job's name (also once it is deleted).")
    job_deleted = serializers.BooleanField(
        help_text="The job is deleted: the run stays in the history."
    )
    trigger = serializers.ChoiceField(choices=Run.Trigger.values)
    status = serializers.ChoiceField(choices=states.ALL)
    scheduled_for = serializers.DateTimeField(help_text="The nominal instant.")
    queued_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    attempt = serializers.IntegerField(help_text="The current attempt's number.")
    attempts = AttemptSerializer(many=True, source="attempt_history")
    next_attempt_at = serializers.DateTimeField(
        allow_null=True, help_text="When a retrying run's next attempt is due."
    )
    error = serializers.CharField()
    skip_reason = serializers.ChoiceField(choices=states.SKIP_REASONS, allow_blank=True)
    dag_run = serializers.UUIDField(allow_null=True)


class BackfillSerializer(StrictSerializer):
    start = InstantField(help_text="ISO 8601 instant with an offset; included.")
    end = InstantField(help_text="ISO 8601 instant with an offset; included.")


class BackfillResultSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    count = serializers.IntegerField(help_text="Runs created (trigger `backfill`).")
    runs = serializers.ListField(child=serializers.UUIDField())


class BulkReplaySerializer(StrictSerializer):
    run_ids = serializers.ListField(
        child=StrictUUIDField(), min_length=1, max_length=MAX_BULK_REPLAY
    )


class BulkReplayResultSerializer(serializers.Serializer):
    replayed = serializers.ListField(child=serializers.UUIDField())
    not_found = serializers.ListField(child=serializers.UUIDField())
    not_replayable = serializers.DictField(
        child=serializers.CharField(), help_text="Run id -> why it was not replayed."
    )


class RunFilterSerializer(serializers.Serializer):
    job = QueryIntegerField(required=False, min_value=1, max_value=BIGINT_MAX)
    status = serializers.ChoiceField(choices=states.ALL, required=False)
    trigger = serializers.ChoiceField(choices=Run.Trigger.values, required=False)
    since = InstantField(required=False, help_text="scheduled_for at or after this instant.")
    until = InstantField(required=False, help_text="scheduled_for before this instant.")


class DlqFilterSerializer(serializers.Serializer):
    job = QueryIntegerField(required=False, min_value=1, max_value=BIGINT_MAX)
