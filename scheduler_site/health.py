"""Liveness and readiness probes."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any failure means not ready; say which
        return f"database unreachable: {exc.__class__.__name__}: {str(exc).strip()[:200]}"
    return None


def check_redis() -> str | None:
    from core.redis import REDIS_ERRORS, new_redis

    try:
        client = new_redis(socket_connect_timeout=1, socket_timeout=1)
    except (*REDIS_ERRORS, OSError) as exc:  # a cluster client reads the slot map at once
        return f"redis unreachable: {exc.__class__.__name__}: {str(exc).strip()[:200]}"
    try:
        client.ping()
    except REDIS_ERRORS as exc:
        return f"redis unreachable: {exc.__class__.__name__}: {str(exc).strip()[:200]}"
    finally:
        client.close()
    return None


def check_broker() -> str | None:
    """RabbitMQ, when it is the broker (ADR 0019): a connection within a second (to any
    node of a cluster's URL list, each tried for a second: ADR 0026)."""
    from core.broker import amqp_connection, is_amqp

    if not is_amqp():
        return None  # the broker is the Redis checked above
    try:
        amqp_connection(timeout=1).collect()
    except Exception as exc:
        return f"rabbitmq unreachable: {exc.__class__.__name__}: {str(exc).strip()[:200]}"
    return None


def readiness_problems() -> list[str]:
    checks = (check_database(), check_redis(), check_broker())
    return [problem for problem in checks if problem]


def readyz(request: HttpRequest) -> JsonResponse:
    problems = readiness_problems()
    if problems:
        return JsonResponse({"status": "unavailable", "problems": problems}, status=503)
    return JsonResponse({"status": "ok"})
