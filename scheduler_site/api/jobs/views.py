"""Job endpoints: one thin handler per operation (validate the request's shape, call the
service, serialize the result). Errors are raised, and scheduler_site.api.problems turns
them into problem+json."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from jobs import selectors, services
from jobs.models import Job
from runs import services as run_services
from runs import states
from runs.selectors import run_get, with_job_names, with_last_run
from scheduler_site.api import examples as ex
from scheduler_site.api.fields import query, validated
from scheduler_site.api.pagination import KeysetPagination, page_of
from scheduler_site.api.problems import (
    HAS_DOWNSTREAMS,
    READ_PROBLEMS,
    VALIDATION,
    WRITE_PROBLEMS,
    problem_responses,
)
from scheduler_site.api.runs.serializers import RunSerializer
from scheduler_site.api.throttling import ManualTriggerThrottle
from scheduler_site.api.views import ApiView

from .schedule_shapes import JOB_EXAMPLES
from .serializers import (
    DeleteParamsSerializer,
    JobFilterSerializer,
    JobInputSerializer,
    JobSerializer,
    PauseSerializer,
    TriggerSerializer,
)

TAGS = ["jobs"]
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": 200},
    OpenApiParameter.HEADER,
    description="1 to 200 characters. The same key returns the run it created the first "
    "time (with `Idempotent-Replayed: true`).",
)
TRIGGER_HEADERS = [
    OpenApiParameter(
        "Location", str, OpenApiParameter.HEADER, response=[202], description="The run's URL."
    ),
    OpenApiParameter(
        "Idempotent-Replayed",
        str,
        OpenApiParameter.HEADER,
        response=[202],
        enum=["true", "false"],
        description="`true` when the Idempotency-Key had already created this run.",
    ),
]


class JobPagination(KeysetPagination):
    model = Job
    ordering = ("id",)


class JobView(ApiView):
    """Shared by the job endpoints: a job's JSON as of now."""

    def job_json(self, job_id: int) -> dict[str, Any]:
        jobs = with_last_run(selectors.with_relation_ids(Job.objects.all()), self.clock.now())
        return JobSerializer(selectors.job_get(job_id=job_id, queryset=jobs, prefetch=False)).data

    def job_url(self, request: Request, job: Job) -> str:
        return request.build_absolute_uri(reverse("api:job", kwargs={"job_id": job.id}))


class JobCollectionView(JobView):
    @extend_schema(
        operation_id="jobs_list",
        tags=TAGS,
        summary="List jobs",
        description=(
            "The tenant's live jobs (deleted ones are never listed) in id order, one page "
            "at a time: follow `next` until it is null. Filter by `state`, `priority` or `q` "
            "(part of the name, any case)."
        ),
        parameters=[JobFilterSerializer, *JobPagination.parameters()],
        examples=[ex.answer("A page of jobs", ex.page("jobs", "5", ex.JOB))],
        responses={200: page_of(JobSerializer), **problem_responses(400, *READ_PROBLEMS)},
    )
    def get(self, request: Request) -> Response:
        filters = query(JobFilterSerializer, request)
        jobs = selectors.with_relation_ids(selectors.job_filter(**filters))
        jobs = with_last_run(jobs, self.clock.now())
        paginator = JobPagination()
        page = paginator.paginate_queryset(jobs, request, self)
        return paginator.get_paginated_response(JobSerializer(page, many=True).data)

    @extend_schema(
        operation_id="jobs_create",
        tags=TAGS,
        summary="Create a job",
        description=(
            "Only `name`, `target` and a `schedule` (or `null`, or `depends_on`) are "
            "required; every other field has a default. The job's first slot is "
            "computed in its time zone at once (`next_run_at`). An invalid field is a 400 "
            "that names it, and for a cron expression the cron field too "
            "(`schedule.cron: minute: 61 is out of range 0-59`). An HTTP target on an "
            "internal address literal is refused here, not at its first run."
        ),
        request=JobInputSerializer,
        examples=[
            *JOB_EXAMPLES,
            ex.answer("The job created", ex.JOB, 201),
            ex.problem(
                "An invalid cron field",
                400,
                "schedule.cron: day_of_week: 'FRY' is not a valid value",
                VALIDATION,
                {"schedule.cron": ["day_of_week: 'FRY' is not a valid value"]},
            ),
        ],
        responses={201: JobSerializer, **problem_responses(*WRITE_PROBLEMS)},
    )
    def post(self, request: Request) -> Response:
        job = services.job_create(data=request.data, **self.services_kwargs(request))
        headers = {"Location": self.job_url(request, job)}
        # A new job has no runs: shown as written, without reading it back.
        return Response(JobSerializer(job).data, status=201, headers=headers)


class JobDetailView(JobView):
    @extend_schema(
        operation_id="jobs_retrieve",
        tags=TAGS,
        summary="Read a job",
        description=(
            "The job with its schedule in words, the scheduler's next slot for it "
            "(`next_run_at`, null while paused, parked or on demand) and its latest run due by "
            "now. Another tenant's ids are 404s, like unknown ones."
        ),
        examples=[ex.answer("A job", ex.JOB)],
        responses={200: JobSerializer, **problem_responses(404, *READ_PROBLEMS)},
    )
    def get(self, request: Request, job_id: int) -> Response:
        return Response(self.job_json(job_id))

    @extend_schema(
        operation_id="jobs_update",
        tags=TAGS,
        summary="Change some fields of a job",
        description=(
            "Only the fields given change; `retry` may be partial too. A new schedule (or "
            "DST policy, jitter, calendars) recomputes the next slot; of the runs "
            "already prepared for slots after now, those the new schedule still has are "
            "kept and run the job as edited, the others are removed. An invalid PATCH "
            "changes nothing."
        ),
        request=JobInputSerializer(partial=True),
        examples=[
            ex.request(
                "Every 10 minutes, five attempts",
                {"schedule": {"interval_seconds": 600}, "retry": {"max_attempts": 5}},
            ),
            ex.request("Raise its priority", {"priority": "high"}),
        ],
        responses={200: JobSerializer, **problem_responses(404, *WRITE_PROBLEMS)},
    )
    def patch(self, request: Request, job_id: int) -> Response:
        services.job_update(job_id=job_id, data=request.data, **self.services_kwargs(request))
        return Response(self.job_json(job_id))

    @extend_schema(
        operation_id="jobs_destroy",
        tags=TAGS,
        summary="Delete a job (soft)",
        description=(
            "No future runs; the run history stays readable under /runs?job=<id>. A job "
            "that other jobs depend on is refused (409 `has-downstreams`, naming them) "
            "unless `cascade=edges`, which removes those dependencies with it."
        ),
        parameters=[DeleteParamsSerializer],
        examples=[
            ex.problem(
                "Other jobs depend on it",
                409,
                "the job has downstream jobs that depend on it: load (7); remove those "
                "dependencies first, or delete with cascade=edges to remove them with it",
                HAS_DOWNSTREAMS,
            )
        ],
        responses={204: None, **problem_responses(400, 404, 403, 409, *READ_PROBLEMS)},
    )
    def delete(self, request: Request, job_id: int) -> Response:
        cascade = query(DeleteParamsSerializer, request).get("cascade")
        services.job_delete(
            job_id=job_id, cascade_edges=cascade == "edges", **self.services_kwargs(request)
        )
        return Response(status=204)


class JobPauseView(JobView):
    @extend_schema(
        operation_id="jobs_pause",
        tags=TAGS,
        summary="Pause a job",
        description=(
            "No run starts while it is paused (its scheduled slots are recorded as skipped, "
            "reason `paused`); runs in flight finish. `reason` is shown on the job. The "
            "answer shows `state: paused`, `paused_at` and no `next_run_at`."
        ),
        request=PauseSerializer,
        examples=[
            ex.request("With a reason", {"reason": "database migration"}),
            ex.answer("The paused job", ex.PAUSED_JOB),
        ],
        responses={200: JobSerializer, **problem_responses(404, *WRITE_PROBLEMS)},
    )
    def post(self, request: Request, job_id: int) -> Response:
        reason = validated(PauseSerializer, request.data).get("reason", "")
        services.job_pause(job_id=job_id, reason=reason, **self.services_kwargs(request))
        return Response(self.job_json(job_id))


class JobResumeView(JobView):
    @extend_schema(
        operation_id="jobs_resume",
        tags=TAGS,
        summary="Resume a paused job",
        description=(
            "Slots missed while paused follow the job's misfire policy (`run_once`: one "
            "catch-up run, `run_all`, `skip`). A parked job is resumed only if its schedule "
            "can be planned now (otherwise a 400 naming `schedule`)."
        ),
        request=None,
        examples=[ex.answer("The job, active again", ex.JOB)],
        responses={200: JobSerializer, **problem_responses(404, 403, *READ_PROBLEMS)},
    )
    def post(self, request: Request, job_id: int) -> Response:
        services.job_resume(job_id=job_id, **self.services_kwargs(request))
        return Response(self.job_json(job_id))


class JobTriggerView(JobView):
    throttle_classes = [ManualTriggerThrottle]

    @extend_schema(
        operation_id="jobs_run",
        tags=TAGS,
        summary="Run a job now",
        description=(
            "A run now (trigger `manual`), with the job's payload or, for this run only, the "
            "one given. With an `Idempotency-Key` header the first call creates the run and "
            "a repeat returns the same run (202 again, `Idempotent-Replayed: true`). Manual "
            "triggers are limited per tenant (SCHEDULER_MANUAL_TRIGGERS_PER_MINUTE, 60): "
            "beyond, a 429 with `Retry-After`."
        ),
        request=TriggerSerializer,
        examples=[
            ex.request("With a payload of its own", {"payload": {"version": "1.4.2"}}),
            ex.request("With the job's payload", {}),
            ex.answer("The run", {**ex.RUN, "trigger": "manual", "status": states.SCHEDULED}, 202),
        ],
        parameters=[IDEMPOTENCY_KEY, *TRIGGER_HEADERS],
        responses={
            202: OpenApiResponse(RunSerializer, "The run (new, or the one the key created)."),
            **problem_responses(404, 429, *WRITE_PROBLEMS),
        },
    )
    def post(self, request: Request, job_id: int) -> Response:
        payload = validated(TriggerSerializer, request.data).get("payload")
        run, created = run_services.job_trigger(
            job_id=job_id,
            payload=payload,
            idempotency_key=request.headers.get("Idempotency-Key"),
            **self.services_kwargs(request),
        )
        headers = {
            "Location": request.build_absolute_uri(reverse("api:run", kwargs={"run_id": run.id})),
            "Idempotent-Replayed": "false" if created else "true",
        }
        shown = with_job_names([run_get(run_id=run.id)])[0]
        return Response(RunSerializer(shown).data, status=202, headers=headers)
