from __future__ import annotations

import socket

import pytest
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the socket is


def test_healthz_answers_on_public_and_tenant_hosts(alpha):
    assert Client().get("/healthz").json() == {"status": "ok"}
    assert Client(HTTP_HOST=alpha.domain).get("/healthz").status_code == 200


def test_readyz_is_ok_when_database_and_redis_answer():
    response = Client().get("/readyz")
    assert response.status_code == 200, response.content


def test_readyz_is_503_with_the_reason_when_redis_is_unreachable():
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{_closed_port()}/0"):
        response = Client().get("/readyz")
    assert response.status_code == 503
    assert any(problem.startswith("redis unreachable") for problem in response.json()["problems"])


def test_readyz_checks_rabbitmq_when_it_is_the_broker(amqp_broker, settings):
    assert Client().get("/readyz").status_code == 200
    settings.CELERY_BROKER_URL = f"amqp://guest:guest@127.0.0.1:{_closed_port()}/"
    response = Client().get("/readyz")
    assert response.status_code == 503
    [problem] = response.json()["problems"]
    assert problem.startswith("rabbitmq unreachable")


def test_admin_login_is_served_on_the_public_host():
    response = Client().get("/admin/login/")
    assert response.status_code == 200
    assert b"Tickwork" in response.content
