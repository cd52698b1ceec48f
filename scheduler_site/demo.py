"""The demo tenant that `make run` sets up (development only)."""

from __future__ import annotations

import json
from pathlib import Path

from django.contrib.auth import get_user_model
from django_tenants.utils import schema_context

from jobs.demo import ensure_demo_jobs
from tenants.models import Tenant
from tenants.services import tenant_provision
from tenants.tokens import token_authenticate, token_issue

DEMO = {"slug": "demo", "domain": "demo.localhost", "user": "demo", "password": "demo"}
OPERATOR = ("admin", "admin")


def ensure_operator(user_model) -> tuple[str, str]:
    """An operator account in the public schema for Django admin."""
    name, password = OPERATOR
    if not user_model.objects.filter(username=name).exists():
        user_model.objects.create_superuser(username=name, password=password, email="")
    return OPERATOR


def _saved_token(state_file: Path) -> str | None:
    try:
        return json.loads(state_file.read_text()).get("token")
    except (OSError, ValueError):
        return None


def ensure_demo_tenant(state_file: Path) -> str:
    """Create the demo tenant once; return a working API token (reused across runs)."""
    tenant = Tenant.objects.filter(slug=DEMO["slug"]).first()
    if tenant is None:
        result = tenant_provision(
            slug=DEMO["slug"],
            domain=DEMO["domain"],
            name="Demo",
            admin_user=DEMO["user"],
            admin_password=DEMO["password"],
        )
        tenant, token = result.tenant, result.token.plain
    else:
        token = _saved_token(state_file)
        found = token_authenticate(token) if token else None
        if found is None or found.tenant_id != tenant.id:
            token = token_issue(tenant=tenant, name="make run").plain
        with schema_context(tenant.schema_name):
            if not get_user_model().objects.filter(username=DEMO["user"]).exists():
                get_user_model().objects.create_user(
                    username=DEMO["user"], password=DEMO["password"], is_staff=True
                )
    ensure_demo_jobs(tenant)
    return token
