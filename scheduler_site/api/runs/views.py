"""Run endpoints: history, cancel, replay, the dead-letter queue and backfill. One thin
handler per operation; errors are raised and become problem+json in one place."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from runs import selectors, services
from scheduler_site.api.fields import query, validated
from scheduler_site.api.pagination import page_of
from scheduler_site.api.problems import READ_PROBLEMS, WRITE_PROBLEMS, problem_responses
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
        parameters=[RunFilterSerializer, *RunPagination.parameters()],
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
        responses={200: RunSerializer, **problem_responses(404, *READ_PROBLEMS)},
    )
    def get(self, request: Request, run_id: Any) -> Response:
        return Response(self.run_json(run_id))


class RunCancelView(RunView):
    @extend_schema(
        operation_id="runs_cancel",
        tags=TAGS,
        summary="Cancel a pending or running run",
        description="A running run's worker stops at its next heartbeat (best effort).",
        request=None,
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
        description="The run gets a new attempt, admitted like a retry.",
        request=None,
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
        parameters=[DlqFilterSerializer, *RunPagination.parameters()],
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
        description="Each id is replayed, not found, or not replayable (with the reason); "
        "one id's problem does not stop the others.",
        request=BulkReplaySerializer,
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
        description="One run (trigger `backfill`) per scheduled instant in [start, end]; more "
        "than SCHEDULER_MAX_BACKFILL_RUNS instants is a 400 that says the bound.",
        request=BackfillSerializer,
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
