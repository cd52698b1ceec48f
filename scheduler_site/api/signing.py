"""The tenant's webhook signing secret: /signing-secret (what may be known of it) and
/signing-secret/rotate (a new secret, shown in that response only)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from jobs.services import audit_record
from scheduler_site.api.fields import StrictSerializer, validated
from scheduler_site.api.problems import READ_PROBLEMS, WRITE_PROBLEMS, problem_responses
from scheduler_site.api.views import ApiView
from tenants.signing import SigningSecretInfo, signing_secret_info, signing_secret_rotate

from .authentication import actor_of, tenant_of

TAGS = ["signing secret"]
MAX_OVERLAP_SECONDS = 7 * 86400


class SigningSecretSerializer(serializers.Serializer):
    scheme = serializers.CharField(help_text="How deliveries are signed: `standard-webhooks-v1`.")
    version = serializers.IntegerField(help_text="Moves at every rotation.")
    created_at = serializers.DateTimeField(
        allow_null=True, help_text="When the current secret was made."
    )
    previous_expires_at = serializers.DateTimeField(
        allow_null=True,
        help_text="Until then the previous secret signs too (each delivery carries both "
        "signatures); null when only the current one signs.",
    )


class RotatedSigningSecretSerializer(SigningSecretSerializer):
    secret = serializers.CharField(help_text="The new secret (whsec_…): shown this once.")


class RotateSerializer(StrictSerializer):
    overlap_seconds = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_OVERLAP_SECONDS,
        help_text="How long the current secret keeps signing beside the new one (default "
        "SCHEDULER_SIGNING_SECRET_OVERLAP_SECONDS). 0: it stops at once, for a leaked secret.",
    )


def _json(info: SigningSecretInfo) -> dict[str, Any]:
    return SigningSecretSerializer(
        {
            "scheme": "standard-webhooks-v1",
            "version": info.version,
            "created_at": info.created_at,
            "previous_expires_at": info.previous_expires_at,
        }
    ).data


class SigningSecretView(ApiView):
    @extend_schema(
        operation_id="signing_secret_retrieve",
        tags=TAGS,
        summary="Describe the webhook signing secret",
        description=(
            "How the tenant's HTTP deliveries are signed (Standard Webhooks), the secret's "
            "version and age, and until when the previous secret still signs beside it. "
            "Never the secret itself: rotate to obtain a new one."
        ),
        responses={200: SigningSecretSerializer, **problem_responses(*READ_PROBLEMS)},
        examples=[
            OpenApiExample(
                "During a rotation's overlap",
                {
                    "scheme": "standard-webhooks-v1",
                    "version": 2,
                    "created_at": "2026-12-01T09:00:00Z",
                    "previous_expires_at": "2026-12-02T09:00:00Z",
                },
                response_only=True,
            )
        ],
    )
    def get(self, request: Request) -> Response:
        return Response(_json(signing_secret_info(tenant=tenant_of(request), now=self.clock.now())))


class SigningSecretRotateView(ApiView):
    @extend_schema(
        operation_id="signing_secret_rotate",
        tags=TAGS,
        summary="Rotate the webhook signing secret",
        description="Makes a new secret current and returns it, in this response only. The "
        "previous one keeps signing for `overlap_seconds` (both signatures are sent), so that "
        "receivers can switch without refusing a delivery.",
        request=RotateSerializer,
        examples=[
            OpenApiExample("A day of overlap", {"overlap_seconds": 86400}, request_only=True),
            OpenApiExample(
                "The new secret, shown once",
                {
                    "scheme": "standard-webhooks-v1",
                    "version": 3,
                    "created_at": "2026-12-01T09:00:00Z",
                    "previous_expires_at": "2026-12-02T09:00:00Z",
                    "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                },
                response_only=True,
            ),
        ],
        responses={200: RotatedSigningSecretSerializer, **problem_responses(*WRITE_PROBLEMS)},
    )
    def post(self, request: Request) -> Response:
        data = validated(RotateSerializer, request.data)
        seconds = data.get("overlap_seconds", settings.SCHEDULER_SIGNING_SECRET_OVERLAP_SECONDS)
        issued = signing_secret_rotate(
            tenant=tenant_of(request), now=self.clock.now(), overlap=timedelta(seconds=seconds)
        )
        audit_record(
            actor=actor_of(request),
            action="signing_secret_rotate",
            changes={"version": issued.info.version, "overlap_seconds": seconds},
        )
        body = {**_json(issued.info), "secret": issued.secret}
        return Response(body, headers={"Cache-Control": "no-store"})
