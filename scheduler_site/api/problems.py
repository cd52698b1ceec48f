"""Every API error as an RFC 9457 problem: `application/problem+json` with `type`, `title`,
`status`, `detail`, and `errors: {field: [messages]}` for invalid input.

One exception handler maps the service layer's exceptions and DRF's own (parse errors,
authentication, throttling, 404, 405, ...) so that no endpoint formats an error itself.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import set_rollback

from alerts.channels import ChannelNotFound
from core.logs import log_event
from core.metrics import API_PROBLEMS
from jobs.calendars import CalendarInUse, CalendarNotFound
from jobs.services import HasDownstreams, JobNotFound, QuotaExceeded
from jobs.validation import JobValidationError
from runs.dag_selectors import DagRunNotFound
from runs.services import BackfillError, RunNotFound, RunStateError

logger = logging.getLogger(__name__)

PROBLEM_CONTENT_TYPE = "application/problem+json"
TYPE_BASE = "urn:tickwork:problem:"
VALIDATION = TYPE_BASE + "validation-error"
QUOTA = TYPE_BASE + "quota-exceeded"
RUN_STATE = TYPE_BASE + "run-state-conflict"
TENANT_SUSPENDED = TYPE_BASE + "tenant-suspended"


class TenantSuspendedError(Exception):
    """The request's tenant is suspended by an operator: nothing it asks is done."""


IN_USE = TYPE_BASE + "in-use"
HAS_DOWNSTREAMS = TYPE_BASE + "has-downstreams"
Errors = dict[str, list[str]]
NOT_FOUND_WORDS = {
    JobNotFound: "No such job in this tenant (or it was deleted).",
    RunNotFound: "No such run in this tenant.",
    CalendarNotFound: "No such calendar in this tenant.",
    DagRunNotFound: "No such DAG run in this tenant.",
    ChannelNotFound: "No such alert channel in this tenant.",
}


def problem(
    status: int, detail: str, *, type_: str = "about:blank", errors: Errors | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": type_,
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = errors
    return body


def problem_response(body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(body, status=body["status"], headers=headers, content_type=PROBLEM_CONTENT_TYPE)


def flatten_errors(detail: Any, prefix: str = "") -> Errors:
    """DRF's nested error detail -> {"retry.max_attempts": ["..."], "run_ids.0": [...]}."""
    if isinstance(detail, dict):
        out: Errors = {}
        for key, value in detail.items():
            out.update(flatten_errors(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        out = {}
        for item in detail:
            out.update(flatten_errors(item, prefix))
        return out
    messages = detail if isinstance(detail, list) else [detail]
    return {prefix or "non_field_errors": [str(m) for m in messages]}


def summary(errors: Errors) -> str:
    """The first few errors in one line, for people reading curl output."""
    parts = [f"{field}: {'; '.join(messages)}" for field, messages in list(errors.items())[:3]]
    more = len(errors) - 3
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def validation_problem(errors: Errors) -> dict[str, Any]:
    return problem(400, summary(errors), type_=VALIDATION, errors=errors)


def _domain_problem(exc: Exception) -> dict[str, Any] | None:
    """The service layer's exceptions."""
    if isinstance(exc, JobValidationError):
        return validation_problem(exc.errors)
    if isinstance(exc, BackfillError):
        return validation_problem({exc.field: [str(exc)]})
    if isinstance(
        exc,
        JobNotFound | RunNotFound | CalendarNotFound | DagRunNotFound | ChannelNotFound | Http404,
    ):
        # Ids of other tenants land here too: 404 never confirms that something exists.
        return problem(404, NOT_FOUND_WORDS.get(type(exc), "No such object."))
    if isinstance(exc, QuotaExceeded):
        return problem(400, str(exc), type_=QUOTA)
    if isinstance(exc, RunStateError):
        return problem(409, str(exc), type_=RUN_STATE)
    if isinstance(exc, TenantSuspendedError):
        return problem(403, str(exc), type_=TENANT_SUSPENDED)
    if isinstance(exc, CalendarInUse):
        return problem(409, str(exc), type_=IN_USE)
    if isinstance(exc, HasDownstreams):
        return problem(409, str(exc), type_=HAS_DOWNSTREAMS)
    return None


def _api_problem(exc: exceptions.APIException) -> dict[str, Any]:
    if isinstance(exc, exceptions.ValidationError):
        return validation_problem(flatten_errors(exc.detail))
    detail = exc.detail if isinstance(exc.detail, str) else summary(flatten_errors(exc.detail))
    return problem(exc.status_code, str(detail))


def _headers(exc: Exception) -> dict[str, str]:
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        headers["Retry-After"] = str(max(1, int(exc.wait + 0.999)))
    return headers


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's EXCEPTION_HANDLER: every exception a view raises becomes a problem response."""
    set_rollback()
    body = _domain_problem(exc)
    if body is None and isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    if body is None and isinstance(exc, exceptions.APIException):
        body = _api_problem(exc)
    if body is None:
        # A bug, not the client's fault: log it whole, answer without internals.
        log_event(
            logger,
            "api.error",
            "unhandled API error",
            level=logging.ERROR,
            exc_info=exc,
            error=exc.__class__.__name__,
            **request_fields(context.get("request")),
        )
        body = problem(500, "An internal error occurred; it has been logged.")
    API_PROBLEMS.labels(status=str(body["status"])).inc()
    return problem_response(body, _headers(exc))


def request_fields(request: Any) -> dict[str, Any]:
    """What a log event says of the request: method, path, and its tenant when known."""
    if request is None:
        return {}
    tenant = getattr(request, "tenant", None)  # the token's, or the domain's
    slug = getattr(tenant, "slug", None)
    return {
        "tenant": slug if slug and slug != "public" else None,
        "method": request.method,
        "path": request.path,
    }


# --- the schema side ---------------------------------------------------------------------


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details."""

    type = serializers.CharField(help_text="A URI naming the kind of problem (see docs/api.md).")
    title = serializers.CharField(help_text="The HTTP status phrase.")
    status = serializers.IntegerField()
    detail = serializers.CharField(help_text="What went wrong, for a person.")
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Invalid input only: field name (dotted for nested fields) -> reasons.",
    )


DESCRIPTIONS = {
    400: "Invalid input: `errors` names each field and why.",
    401: "No credentials, an unknown or revoked token, or a token of another tenant.",
    403: "Session authentication without a valid CSRF token, or the tenant is suspended "
    "(type urn:tickwork:problem:tenant-suspended).",
    404: "No such object in this tenant.",
    405: "Method not allowed.",
    406: "Only application/json responses are offered.",
    409: "The object's state does not allow the action (a run's status, a calendar in use, "
    "a job that others depend on).",
    413: "The request body is larger than SCHEDULER_API_MAX_BODY_BYTES.",
    415: "The request body must be application/json.",
    429: "Too many requests; Retry-After says when to try again.",
}


# The problems any authenticated endpoint may answer, and those of one with a JSON body.
READ_PROBLEMS = (401, 403, 406)
WRITE_PROBLEMS = (400, 401, 403, 406, 413, 415)


def problem_responses(*statuses: int) -> dict[tuple[int, str], OpenApiResponse]:
    """`responses=` entries for extend_schema: problem+json bodies for these statuses."""
    return {
        (status, PROBLEM_CONTENT_TYPE): OpenApiResponse(ProblemSerializer, DESCRIPTIONS[status])
        for status in statuses
    }
