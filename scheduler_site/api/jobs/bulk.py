"""POST /jobs/bulk: create, pause, resume or delete up to 1,000 jobs in one request, all or
nothing (jobs/bulk.py); a refusal names each bad item and field (`jobs.517.schedule.cron`,
`ids.3`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from jobs import bulk, selectors
from jobs.models import Job
from runs.selectors import with_last_run
from scheduler_site.api import examples as ex
from scheduler_site.api.fields import (
    BIGINT_MAX,
    StrictIntegerField,
    StrictSerializer,
    validated,
)
from scheduler_site.api.problems import VALIDATION, WRITE_PROBLEMS, problem_responses
from scheduler_site.api.views import ApiView

from .serializers import JobSerializer, job_json

MAX = bulk.MAX_BULK_JOBS


@extend_schema_field(
    {
        "type": "array",
        "items": {"$ref": "#/components/schemas/JobInput"},
        "minItems": 1,
        "maxItems": MAX,
    }
)
class JobInputsField(serializers.ListField):
    """The jobs to create, each the body POST /jobs takes (the service checks each)."""

    child = serializers.JSONField()


def _ids() -> serializers.ListField:
    return serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=BIGINT_MAX),
        min_length=1,
        max_length=MAX,
        help_text=f"1 to {MAX} job ids of this tenant, each once.",
    )


class BulkCreateSerializer(StrictSerializer):
    action = serializers.ChoiceField(choices=["create"])
    jobs = JobInputsField(min_length=1, max_length=MAX)


class BulkPauseSerializer(StrictSerializer):
    action = serializers.ChoiceField(choices=["pause"])
    ids = _ids()
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=500, help_text="Shown on each job."
    )


class BulkResumeSerializer(StrictSerializer):
    action = serializers.ChoiceField(choices=["resume"])
    ids = _ids()


class BulkDeleteSerializer(StrictSerializer):
    action = serializers.ChoiceField(choices=["delete"])
    ids = _ids()
    cascade = serializers.ChoiceField(
        choices=["edges"],
        required=False,
        help_text="`edges`: also remove the dependencies on these jobs of jobs not deleted.",
    )


SHAPES = {
    "create": BulkCreateSerializer,
    "pause": BulkPauseSerializer,
    "resume": BulkResumeSerializer,
    "delete": BulkDeleteSerializer,
}
BULK_REQUEST = PolymorphicProxySerializer(
    component_name="BulkJobsRequest",
    serializers=SHAPES,
    resource_type_field_name="action",
)


class BulkResultSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=list(SHAPES))
    count = serializers.IntegerField(help_text="Jobs created, paused, resumed or deleted.")
    ids = serializers.ListField(
        child=serializers.IntegerField(), help_text="The jobs' ids, in the order of the items."
    )
    jobs = JobSerializer(
        many=True,
        required=False,
        help_text="create, pause, resume: the jobs as they are now, in the order of the items.",
    )


class ActionField(serializers.Serializer):
    action = serializers.ChoiceField(choices=list(SHAPES))


EXAMPLES = [
    OpenApiExample(
        "Create two jobs",
        {
            "action": "create",
            "jobs": [
                {
                    "name": "report-eu",
                    "schedule": {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
                    "target": {"type": "http", "url": "https://example.com/report?region=eu"},
                },
                {
                    "name": "report-us",
                    "schedule": {"cron": "0 9 * * 1-5", "timezone": "America/New_York"},
                    "target": {"type": "http", "url": "https://example.com/report?region=us"},
                },
            ],
        },
        request_only=True,
    ),
    OpenApiExample(
        "Pause three jobs",
        {"action": "pause", "ids": [12, 13, 14], "reason": "database migration"},
        request_only=True,
    ),
    OpenApiExample("Resume them", {"action": "resume", "ids": [12, 13, 14]}, request_only=True),
    OpenApiExample(
        "Delete a DAG with the edges of jobs outside it",
        {"action": "delete", "ids": [20, 21, 22], "cascade": "edges"},
        request_only=True,
    ),
    ex.problem(
        "Item 517 is invalid: nothing was created",
        400,
        "jobs.517.schedule.cron: minute: 61 is out of range 0-59",
        VALIDATION,
        {"jobs.517.schedule.cron": ["minute: 61 is out of range 0-59"]},
    ),
]


class JobBulkView(ApiView):
    @extend_schema(
        operation_id="jobs_bulk",
        tags=["jobs"],
        summary="Create, pause, resume or delete many jobs at once",
        description=(
            f"Up to {MAX} jobs in one request, **all or nothing**: if any item is invalid "
            "(or the tenant's job quota would be passed), nothing is done and the 400 "
            "problem's `errors` name every bad item by its index and field "
            "(`jobs.517.schedule.cron`, `ids.3`). Each job goes through exactly the rules "
            "of the single endpoints (`POST /jobs`, `/pause`, `/resume`, `DELETE`), is "
            "audited the same way and reaches the scheduler the same way. `create` answers "
            "201, the others 200; a delete removes downstream jobs among the ids before "
            "their upstreams, so a whole DAG can be deleted without `cascade`."
        ),
        request=BULK_REQUEST,
        examples=[
            *EXAMPLES,
            ex.answer(
                "Created", {"action": "create", "count": 1, "ids": [5], "jobs": [ex.JOB]}, 201
            ),
        ],
        responses={
            (201, "application/json"): OpenApiResponse(BulkResultSerializer, "Created."),
            (200, "application/json"): OpenApiResponse(
                BulkResultSerializer, "Paused, resumed or deleted."
            ),
            **problem_responses(*WRITE_PROBLEMS),
        },
    )
    def post(self, request: Request) -> Response:
        action = validated(ActionField, _action_only(request.data))["action"]
        body = validated(SHAPES[action], request.data)
        kwargs = self.services_kwargs(request)
        if action == "create":
            jobs = bulk.jobs_create_bulk(items=body["jobs"], **kwargs)
            shown = [job_json(job) for job in jobs]
            ids = [job.id for job in jobs]
            return Response(_result(action, ids, shown), status=201)
        ids = body["ids"]
        bulk.jobs_apply_bulk(
            action=action,
            ids=ids,
            reason=body.get("reason", ""),
            cascade_edges=body.get("cascade") == "edges",
            **kwargs,
        )
        if action == "delete":
            return Response(_result(action, ids, None))
        return Response(_result(action, ids, self._jobs_now(ids)))

    def _jobs_now(self, ids: list[int]) -> list[dict[str, Any]]:
        jobs = with_last_run(
            selectors.with_relation_ids(Job.objects.filter(id__in=ids)), self.clock.now()
        )
        by_id = {job.id: job_json(job) for job in jobs}
        return [by_id[job_id] for job_id in ids]


def _action_only(data: Any) -> Any:
    """The body's `action` alone, to pick the shape that checks the rest."""
    if isinstance(data, dict):
        return {"action": data["action"]} if "action" in data else {}
    return data


def _result(action: str, ids: list[int], jobs: list[dict[str, Any]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"action": action, "count": len(ids), "ids": ids}
    if jobs is not None:
        out["jobs"] = jobs
    return out
