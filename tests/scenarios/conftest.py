"""Scenario fixtures: the broker the processes run on."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["redis", "rabbitmq"])
def broker_env(request) -> dict[str, str]:
    """The environment that puts a scenario's processes on Redis (the default) or on
    RabbitMQ (the tests' vhost; skipped when no RabbitMQ answers)."""
    if request.param == "redis":
        return {}
    return {"CELERY_BROKER_URL": request.getfixturevalue("amqp_broker")}
