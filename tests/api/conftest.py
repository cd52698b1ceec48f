"""An HTTP client per tenant for the API tests, and helpers to look at a tenant's rows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.test import Client
from django_tenants.utils import schema_context

PUBLIC_HOST = "localhost"
TASK = {"type": "task", "task": "builtin.noop"}


@dataclass
class Api:
    """Calls /api/v1/ as one tenant's token (or none), on one host."""

    token: str | None
    host: str = PUBLIC_HOST
    client: Client = field(default_factory=Client)

    def call(
        self, method: str, path: str, body: Any = None, headers: dict | None = None, **params: Any
    ) -> Any:
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in (headers or {}).items()}
        if self.token is not None:
            extra.setdefault("HTTP_AUTHORIZATION", f"Bearer {self.token}")
        url = path if path.startswith("/") else f"/api/v1/{path}"
        kwargs: dict[str, Any] = {"HTTP_HOST": self.host, **extra}
        if body is not None:
            kwargs.update(data=json.dumps(body), content_type="application/json")
        elif method in ("POST", "PATCH"):
            kwargs.update(data=b"", content_type="application/json")  # no body at all
        elif params:
            kwargs["data"] = params
        return getattr(self.client, method.lower())(url, **kwargs)

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, **params)

    def post(self, path: str, body: Any = None, headers: dict | None = None) -> Any:
        return self.call("POST", path, body, headers)

    def patch(self, path: str, body: Any) -> Any:
        return self.call("PATCH", path, body)

    def delete(self, path: str) -> Any:
        return self.call("DELETE", path)

    def create_job(self, **data: Any) -> dict:
        data.setdefault("name", "job")
        data.setdefault("target", TASK)
        # A job with upstreams runs when they succeed: it has no schedule of its own.
        data.setdefault("schedule", None if data.get("depends_on") else {"cron": "*/5 * * * *"})
        response = self.post("jobs", data)
        assert response.status_code == 201, response.content
        return response.json()


@pytest.fixture
def alpha_api(live) -> Api:
    return Api(live["alpha"].token)


@pytest.fixture
def beta_api(live) -> Api:
    return Api(live["beta"].token)


def rows(tenant: Any, model: Any, *fields: str) -> list[tuple]:
    """Every row of `model` in the tenant's schema, as tuples of `fields` (all if none)."""
    with schema_context(tenant.schema_name):
        names = fields or [f.attname for f in model._meta.concrete_fields]
        return sorted(model.objects.values_list(*names), key=repr)
