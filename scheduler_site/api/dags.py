"""Dependency graphs and DAG runs: GET /jobs/{id}/graph, /dag-runs, /dag-runs/{id}.

A DAG run is started by a run of a job with downstream jobs and covers that job and every
job downstream of it; each run it causes carries its id (`dag_run` on a run)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from runs import dag_selectors, states
from runs.models import DagRun, Run
from scheduler_site.api import examples as ex
from scheduler_site.api.fields import InstantField, QueryIntegerField, query
from scheduler_site.api.pagination import KeysetPagination, page_of
from scheduler_site.api.problems import READ_PROBLEMS, problem_responses
from scheduler_site.api.views import ApiView

BIGINT_MAX = 2**63 - 1
TAGS = ["dags"]


class NodeRunSerializer(serializers.Serializer):
    """The run of a job, as a graph shows it."""

    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=states.ALL)
    skip_reason = serializers.ChoiceField(choices=states.SKIP_REASONS, allow_blank=True)
    scheduled_for = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class GraphNodeSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="job.id")
    name = serializers.CharField(source="job.name")
    state = serializers.CharField(
        source="job.state", help_text="active, paused, parked or completed."
    )
    last_run = NodeRunSerializer(
        allow_null=True, help_text="The job's latest run due by now (null: none yet)."
    )


class GraphSerializer(serializers.Serializer):
    job = serializers.IntegerField(source="job_id")
    nodes = GraphNodeSerializer(many=True)
    edges = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="[upstream, downstream] pairs: the downstream runs once the upstream succeeded.",
    )
    truncated = serializers.BooleanField(
        help_text="More jobs are connected than shown (the nearest 500 are)."
    )


class DagRunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    root_job = serializers.IntegerField(source="root_job_id")
    root_run = serializers.UUIDField()
    trigger = serializers.ChoiceField(choices=Run.Trigger.values, help_text="The root run's.")
    status = serializers.ChoiceField(choices=states.DAG_STATUSES)
    jobs = serializers.SerializerMethodField(help_text="How many jobs the DAG run covers.")
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_jobs(self, dag_run: DagRun) -> int:
        return len(dag_run.nodes)


class DagRunNodeSerializer(serializers.Serializer):
    job = serializers.IntegerField(source="job_id")
    name = serializers.CharField()
    deleted = serializers.BooleanField()
    run = NodeRunSerializer(
        allow_null=True, help_text="Null: not reached yet (its upstreams have not all succeeded)."
    )


class DagRunDetailSerializer(DagRunSerializer):
    nodes = DagRunNodeSerializer(many=True, help_text="The root first, then upstreams first.")
    edges = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="[upstream, downstream] pairs as they were when the DAG run started.",
    )


class DagRunFilterSerializer(serializers.Serializer):
    job = QueryIntegerField(
        required=False,
        min_value=1,
        max_value=BIGINT_MAX,
        help_text="DAG runs with a run of this job (its root or any job inside).",
    )
    status = serializers.ChoiceField(choices=states.DAG_STATUSES, required=False)
    since = InstantField(required=False, help_text="Started at or after this instant.")
    until = InstantField(required=False, help_text="Started before this instant.")


DAG_RUN = {
    "id": ex.DAG_RUN_ID,
    "root_job": 1,
    "root_run": ex.RUN_ID,
    "trigger": "schedule",
    "status": states.DAG_SUCCEEDED,
    "jobs": 2,
    "started_at": "2026-11-29T01:30:00.011Z",
    "finished_at": "2026-11-29T01:30:09.540Z",
}


class DagRunPagination(KeysetPagination):
    model = DagRun
    ordering = ("-started_at", "-id")


class JobGraphView(ApiView):
    @extend_schema(
        operation_id="jobs_graph",
        tags=TAGS,
        summary="The dependency graph around a job",
        description=(
            "Every job connected to this one through `depends_on`, upstream or downstream "
            "(the nearest 500), the edges among them, and each job's latest run."
        ),
        responses={200: GraphSerializer, **problem_responses(404, *READ_PROBLEMS)},
        examples=[
            OpenApiExample(
                "A chain",
                {
                    "job": 2,
                    "nodes": [
                        {"id": 1, "name": "extract", "state": "active", "last_run": None},
                        {"id": 2, "name": "load", "state": "active", "last_run": None},
                    ],
                    "edges": [[1, 2]],
                    "truncated": False,
                },
                response_only=True,
            )
        ],
    )
    def get(self, request: Request, job_id: int) -> Response:
        graph = dag_selectors.job_graph(job_id=job_id, now=self.clock.now())
        return Response(GraphSerializer(graph).data)


class DagRunCollectionView(ApiView):
    @extend_schema(
        operation_id="dag_runs_list",
        tags=TAGS,
        summary="List DAG runs, newest first",
        description=(
            "A DAG run starts when a job with downstream jobs runs: it covers that job and "
            "every job below it, and settles when they have all ended. Newest first; filter "
            "by `job` (its root or any job inside), `status` and a `since`/`until` range of "
            "`started_at`."
        ),
        parameters=[DagRunFilterSerializer, *DagRunPagination.parameters()],
        examples=[ex.answer("A page of DAG runs", {"next": None, "results": [DAG_RUN]})],
        responses={200: page_of(DagRunSerializer), **problem_responses(400, *READ_PROBLEMS)},
    )
    def get(self, request: Request) -> Response:
        filters = query(DagRunFilterSerializer, request)
        dag_runs = dag_selectors.dag_run_list(
            job_id=filters.get("job"),
            status=filters.get("status"),
            since=filters.get("since"),
            until=filters.get("until"),
        )
        paginator = DagRunPagination()
        page = paginator.paginate_queryset(dag_runs, request, self)
        return paginator.get_paginated_response(DagRunSerializer(page, many=True).data)


class DagRunDetailView(ApiView):
    @extend_schema(
        operation_id="dag_runs_retrieve",
        tags=TAGS,
        summary="Read a DAG run with every job's run in it",
        description=(
            "The DAG run's status and each job in it (root first, then upstreams before "
            "downstreams) with its run, or null while its upstreams have not all succeeded; "
            "the edges are those of when it started."
        ),
        examples=[
            ex.answer(
                "A chain, half done",
                {
                    **DAG_RUN,
                    "status": states.DAG_RUNNING,
                    "finished_at": None,
                    "nodes": [
                        {
                            "job": 1,
                            "name": "extract",
                            "deleted": False,
                            "run": {
                                "id": ex.RUN_ID,
                                "status": states.SUCCEEDED,
                                "skip_reason": "",
                                "scheduled_for": "2026-11-29T01:30:00Z",
                                "started_at": "2026-11-29T01:30:00.011Z",
                                "finished_at": "2026-11-29T01:30:02.114Z",
                            },
                        },
                        {"job": 2, "name": "load", "deleted": False, "run": None},
                    ],
                    "edges": [[1, 2]],
                },
            )
        ],
        responses={200: DagRunDetailSerializer, **problem_responses(404, *READ_PROBLEMS)},
    )
    def get(self, request: Request, dag_run_id: Any) -> Response:
        detail = dag_selectors.dag_run_get(dag_run_id=dag_run_id)
        data = DagRunSerializer(detail.dag_run).data
        data["nodes"] = DagRunNodeSerializer(detail.nodes, many=True).data
        data["edges"] = [list(e) for e in detail.edges]
        return Response(data)
