"""Run endpoints: history, cancel, replay, the dead-letter queue and backfill. One thin
handler per operation; errors are raised and become problem+json in one place."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from runs import selectors, services, states
from scheduler_site.api import examples as ex
from scheduler_site.api.fields import query, validated
from scheduler_site.api.pagination import page_of
from scheduler_site.api.problems import (
    READ_PROBLEMS,
    RUN_STATE,
    WRITE_PROBLEMS,
    problem_responses,
)
from scheduler_site.api.views import ApiView

from .pagination import RunPagination
from .serializers import (
    BackfillResultSerializer,
    BackfillSerializer,
    BulkReplayResultSerializer,
    BulkReplaySerializer,
    DlqFilterSerializer,
    RunFilterSerializer,
    RunSerializer,
)

TAGS = ["runs"]


class RunView(ApiView):
    def run_json(self, run_id: Any) -> dict[str, Any]:
        return RunSerializer(selectors.with_job_names([selectors.run_get(run_id=run_id)])[0]).data

    def page(self, request: Request, runs: Any, *, by_status: bool = False) -> Response:
        paginator = RunPagination(by_status=by_status)
        page = paginator.paginate_queryset(runs, request, self)
        return paginator.get_paginated_response(RunSerializer(page, many=True).data)


class RunCollectionView(RunView):
    @extend_schema(
        operation_id="runs_list",
        tags=TAGS,
        summary="List runs, newest scheduled first",
        description=(
            "The run history of the tenant (runs of deleted jobs too, with `job_deleted`), "
            "newest `scheduled_for` first, one page at a time. Filter by `job`, `status`, "
            "`trigger` and a `since`/`until` range of `scheduled_for`. Every page costs the "
            "same, however deep: the cursor holds the position, there is no offset."
        ),
        parameters=[RunFilterSerializer, *RunPagination.parameters()],
        examples=[
            ex.answer("A page of runs", ex.page("runs", "1764379800000000." + "0" * 32, ex.RUN))
        ],
        responses={200: page_of(RunSerializer), **problem_responses(400, *READ_PROBLEMS)},
    )
    def get(self, request: Request) -> Response:
        filters = query(RunFilterSerializer, request)
        runs = selectors.run_list(
            job_id=filters.get("job"),
            status=filters.get("status"),
            trigger=filters.get("trigger"),
            since=filters.get("since"),
            until=filters.get("until"),
        )
        # Filtered by job or status, an index leads with the filter; otherwise fan out.
        by_status = "job" not in filters and "status" not in filters
        return self.page(request, runs, by_status=by_status)


class RunDetailView(RunView):
    @extend_schema(
        operation_id="runs_retrieve",
        tags=TAGS,
        summary="Read a run with its attempts",
        description=(
            "The run's status and times, and every attempt with its worker, outcome, error "
            "and the start of its output. A run id is a UUID; another tenant's runs are 404s."
        ),
        examples=[ex.answer("A run that succeeded", ex.RUN)],
        responses={200: RunSerializer, **problem_responses(404, *READ_PROBLEMS)},
    )
    def get(self, request: Request, run_id: Any) -> Response:
        return Response(self.run_json(run_id))


class RunCancelView(RunView):
    @extend_schema(
        operation_id="runs_cancel",
        tags=TAGS,
        summary="Cancel a pending or running run",
        description=(
            "A run that has not started is cancelled at once; a running run's worker is "
            "told to stop at its next heartbeat (best effort). A finished run is a 409."
        ),
        request=None,
        examples=[
            ex.answer("The cancelled run", {**ex.RUN, "status": states.CANCELLED, "attempts": []}),
            ex.problem(
                "It had finished",
                409,
                "a succeeded run cannot be cancelled",
                RUN_STATE,
            ),
        ],
        responses={200: RunSerializer, **problem_responses(404, 409, 403, *READ_PROBLEMS)},
    )
    def post(self, request: Request, run_id: Any) -> Response:
        services.run_cancel(run_id=run_id, **self.services_kwargs(request))
        return Response(self.run_json(run_id))


class RunReplayView(RunView):
    @extend_schema(
        operation_id="runs_replay",
        tags=TAGS,
        summary="Replay a failed or dead run",
        description=(
            "A dead run gets a new attempt (`attempt` + 1, status `retrying`), admitted "
            "like a retry. Any other status, or a deleted job, is a 409."
        ),
        request=None,
        examples=[
            ex.answer(
                "The run, retrying", {**ex.DEAD_RUN, "status": states.RETRYING, "attempt": 4}, 202
            )
        ],
        responses={
            202: OpenApiResponse(RunSerializer, "The run, now `retrying`."),
            **problem_responses(404, 409, 403, *READ_PROBLEMS),
        },
    )
    def post(self, request: Request, run_id: Any) -> Response:
        services.run_replay(run_id=run_id, **self.services_kwargs(request))
        return Response(self.run_json(run_id), status=202)


class DlqCollectionView(RunView):
    @extend_schema(
        operation_id="dlq_list",
        tags=["dlq"],
        summary="List dead runs, newest scheduled first",
        description=(
            "The dead-letter queue: runs that failed `max_attempts` times (or could not be "
            "prepared), newest first, with their last error. Filter by `job`."
        ),
        parameters=[DlqFilterSerializer, *RunPagination.parameters()],
        examples=[ex.answer("A page of dead runs", {"next": None, "results": [ex.DEAD_RUN]})],
        responses={200: page_of(RunSerializer), **problem_responses(400, *READ_PROBLEMS)},
    )
    def get(self, request: Request) -> Response:
        filters = query(DlqFilterSerializer, request)
        return self.page(request, selectors.dlq_list(job_id=filters.get("job")))


class DlqReplayView(RunView):
    @extend_schema(
        operation_id="dlq_replay",
        tags=["dlq"],
        summary="Replay dead runs",
        description=(
            "1 to 1000 run ids; each is replayed, not found, or not replayable (with the "
            "reason), independently: one id's problem does not stop the others."
        ),
        request=BulkReplaySerializer,
        examples=[
            ex.request(
                "Two dead runs", {"run_ids": [ex.RUN_ID, "7f3c1a52-7a8e-4d3a-9d3c-2b1f0e6d5c4b"]}
            ),
            ex.answer(
                "One replayed, one not found",
                {
                    "replayed": [ex.RUN_ID],
                    "not_found": ["7f3c1a52-7a8e-4d3a-9d3c-2b1f0e6d5c4b"],
                    "not_replayable": {},
                },
                202,
            ),
        ],
        responses={202: BulkReplayResultSerializer, **problem_responses(*WRITE_PROBLEMS)},
    )
    def post(self, request: Request) -> Response:
        run_ids = validated(BulkReplaySerializer, request.data)["run_ids"]
        result = services.dlq_replay(run_ids=run_ids, **self.services_kwargs(request))
        return Response(
            {
                "replayed": result.replayed,
                "not_found": result.not_found,
                "not_replayable": result.not_replayable,
            },
            status=202,
        )


class JobBackfillView(RunView):
    @extend_schema(
        operation_id="jobs_backfill",
        tags=["jobs"],
        summary="Create runs for a job's past (or future) slots",
        description=(
            "One run (trigger `backfill`) for every instant of the job's schedule in "
            "[start, end], both included, all due at once. More than "
            "SCHEDULER_MAX_BACKFILL_RUNS (1000) instants is a 400 on `end` that says the "
            "bound; a job without a schedule is a 400 on `job`."
        ),
        request=BackfillSerializer,
        examples=[
            ex.request(
                "The first three minutes of 2026",
                {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:02:00Z"},
            ),
            ex.answer(
                "Three runs",
                {
                    "job": 5,
                    "start": "2026-01-01T00:00:00Z",
                    "end": "2026-01-01T00:02:00Z",
                    "count": 3,
                    "runs": [ex.RUN_ID, ex.RUN_ID, ex.RUN_ID],
                },
                202,
            ),
        ],
        responses={202: BackfillResultSerializer, **problem_responses(404, *WRITE_PROBLEMS)},
    )
    def post(self, request: Request, job_id: int) -> Response:
        body = validated(BackfillSerializer, request.data)
        runs = services.job_backfill(
            job_id=job_id, start=body["start"], end=body["end"], **self.services_kwargs(request)
        )
        headers = {
            "Location": request.build_absolute_uri(
                reverse("api:runs") + f"?job={job_id}&trigger=backfill"
            )
        }
        return Response(
            {
                "job": job_id,
                "start": body["start"],
                "end": body["end"],
                "count": len(runs),
                "runs": [str(run.id) for run in runs],
            },
            status=202,
            headers=headers,
        )
