"""GET /usage: the tenant's runs in flight against its quota, runs waiting for admission,
fire and start lag over the last five minutes, and how long its run history is kept."""

from __future__ import annotations

from dataclasses import asdict

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from runs.usage import tenant_usage
from scheduler_site.api.problems import READ_PROBLEMS, problem_responses
from scheduler_site.api.views import ApiView
from tenants.services import retention_days_of


class LagSerializer(serializers.Serializer):
    p50 = serializers.FloatField(allow_null=True, help_text="Seconds; null: no run yet.")
    p99 = serializers.FloatField(allow_null=True, help_text="Seconds; null: no run yet.")


class UsageSerializer(serializers.Serializer):
    max_concurrency = serializers.IntegerField(
        help_text="The tenant's quota: runs in flight (queued or running) at once."
    )
    weight = serializers.IntegerField(
        help_text="The tenant's share of admissions when tenants compete for workers."
    )
    in_flight = serializers.IntegerField(help_text="Runs queued or running now.")
    waiting = serializers.IntegerField(
        help_text="Runs past their due time that wait for admission (quota, broker room)."
    )
    oldest_wait_seconds = serializers.FloatField(
        allow_null=True, help_text="How long the oldest of them has waited; null: none waits."
    )
    window_seconds = serializers.IntegerField(help_text="The window of the lag figures.")
    runs_in_window = serializers.IntegerField(
        help_text="Runs due in the window that were published."
    )
    fire_lag = LagSerializer(help_text="Due instant to published to the broker.")
    start_lag = LagSerializer(help_text="Due instant to started by a worker.")
    run_retention_days = serializers.IntegerField(
        help_text="Days ended runs are kept before they are deleted (each job's last run "
        "and dead runs stay); 0: kept for ever. Operators set it."
    )


class UsageView(ApiView):
    @extend_schema(
        operation_id="usage_retrieve",
        tags=["usage"],
        summary="The tenant's quota use and lag",
        description=(
            "Runs in flight against the tenant's `max_concurrency`, runs waiting for "
            "admission, and fire and start lag (p50, p99) over the last five minutes. A due "
            "run waits while its tenant is at its quota or the workers are busy; among "
            "tenants with waiting runs, admissions are shared by `weight`. Also how many days "
            "the run history is kept (`run_retention_days`)."
        ),
        responses={200: UsageSerializer, **problem_responses(*READ_PROBLEMS)},
        examples=[
            OpenApiExample(
                "Busy",
                {
                    "max_concurrency": 100,
                    "weight": 1,
                    "in_flight": 100,
                    "waiting": 1840,
                    "oldest_wait_seconds": 12.4,
                    "window_seconds": 300,
                    "runs_in_window": 5120,
                    "fire_lag": {"p50": 0.021, "p99": 11.2},
                    "start_lag": {"p50": 0.035, "p99": 11.9},
                    "run_retention_days": 30,
                },
                response_only=True,
            )
        ],
    )
    def get(self, request: Request) -> Response:
        tenant = request._request.tenant
        usage = asdict(tenant_usage(tenant.schema_name, self.clock.now()))
        usage.update(
            max_concurrency=tenant.max_concurrency,
            weight=tenant.weight,
            run_retention_days=retention_days_of(tenant),
        )
        return Response(UsageSerializer(usage).data)
