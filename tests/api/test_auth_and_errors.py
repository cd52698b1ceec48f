"""Who may call the API and in which schema a request runs; every error as problem+json."""

from __future__ import annotations

import io

import pytest
from django.db import connection
from django.middleware.csrf import _get_new_csrf_string
from django.test import Client, override_settings
from django_tenants.utils import schema_context

from jobs.models import AuditEvent
from scheduler_site.api.exceptions import PayloadTooLarge
from scheduler_site.api.parsers import CappedJSONParser
from tenants.tokens import token_issue, token_revoke

from .conftest import TASK, Api

PROBLEM = "application/problem+json"


def test_a_token_on_the_public_host_selects_its_tenant(alpha_api: Api, beta_api: Api):
    alpha_api.create_job(name="alpha's")
    assert [j["name"] for j in alpha_api.get("jobs").json()["results"]] == ["alpha's"]
    assert beta_api.get("jobs").json()["results"] == []


def test_the_connection_is_back_in_public_after_each_request(alpha_api: Api):
    alpha_api.create_job()
    assert connection.schema_name == "public"
    alpha_api.get("jobs/12345")  # an error path too
    assert connection.schema_name == "public"


def test_on_a_tenant_domain_another_tenants_token_is_a_401(live):
    alpha, beta = live["alpha"], live["beta"]
    assert Api(alpha.token, host=alpha.domain).get("jobs").status_code == 200
    response = Api(beta.token, host=alpha.domain).get("jobs")
    assert (response.status_code, response["Content-Type"]) == (401, PROBLEM)
    assert "another tenant" in response.json()["detail"]


@pytest.mark.parametrize(
    "header", ["", "Bearer", "Bearer tw_unknown", "Bearer a b", "Basic dXNlcjpwYXNz", "Bearer ñ"]
)
def test_missing_or_bad_credentials_are_a_401_with_a_challenge(live, header: str):
    headers = {"Authorization": header} if header else {}
    response = Api(None).call("GET", "jobs", headers=headers)
    assert (response.status_code, response["Content-Type"]) == (401, PROBLEM)
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_a_revoked_token_is_a_401(live):
    issued = token_issue(tenant=live["alpha"].tenant, name="short-lived")
    assert Api(issued.plain).get("jobs").status_code == 200
    token_revoke(token=issued.token)
    assert Api(issued.plain).get("jobs").status_code == 401


def _session_client(world, csrf: str) -> Client:
    client = Client(enforce_csrf_checks=True, HTTP_HOST=world.domain)
    with schema_context(world.schema):
        assert client.login(username=world.admin_user, password=world.admin_password)
    client.cookies["csrftoken"] = csrf
    return client


def test_a_session_works_on_the_tenant_domain_with_csrf(live):
    alpha, csrf = live["alpha"], _get_new_csrf_string()
    client = _session_client(alpha, csrf)
    body = {"name": "from the dashboard", "target": TASK, "schedule": None}
    assert client.get("/api/v1/jobs").status_code == 200
    refused = client.post("/api/v1/jobs", body, content_type="application/json")
    assert (refused.status_code, refused["Content-Type"]) == (403, PROBLEM)
    assert "CSRF" in refused.json()["detail"]
    created = client.post(
        "/api/v1/jobs", body, content_type="application/json", HTTP_X_CSRFTOKEN=csrf
    )
    assert created.status_code == 201
    with schema_context(alpha.schema):
        assert AuditEvent.objects.get(action="create").actor == f"user:{alpha.admin_user}"


def test_an_operators_admin_session_is_not_an_api_login(live):
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(
        username="api-test-operator", defaults={"is_staff": True}
    )
    client = Client()
    client.force_login(user)  # a session in the public schema, as Django admin makes
    assert client.get("/api/v1/jobs").status_code == 401


def test_token_actions_are_audited_with_the_token_prefix(alpha_api: Api, live):
    alpha_api.create_job()
    with schema_context(live["alpha"].schema):
        actor = AuditEvent.objects.get(action="create").actor
    assert actor == f"token:{live['alpha'].token[3:11]}"


def test_unknown_paths_and_methods_are_problems(alpha_api: Api):
    unknown = alpha_api.get("nothing/here")
    assert (unknown.status_code, unknown["Content-Type"]) == (404, PROBLEM)
    not_allowed = alpha_api.call("PUT", "jobs", {"name": "x"})
    assert (not_allowed.status_code, not_allowed["Content-Type"]) == (405, PROBLEM)
    assert "POST" in not_allowed["Allow"] and "OPTIONS" not in not_allowed["Allow"]
    assert alpha_api.call("OPTIONS", "jobs").status_code == 405


def test_malformed_json_and_other_media_types_are_problems(alpha_api: Api):
    client, auth = alpha_api.client, {"HTTP_AUTHORIZATION": f"Bearer {alpha_api.token}"}
    broken = client.post("/api/v1/jobs", "{", content_type="application/json", **auth)
    assert (broken.status_code, broken["Content-Type"]) == (400, PROBLEM)
    form = client.post("/api/v1/jobs", {"name": "x"}, **auth)
    assert (form.status_code, form["Content-Type"]) == (415, PROBLEM)
    accept = client.get("/api/v1/jobs", HTTP_ACCEPT="text/html", **auth)
    assert (accept.status_code, accept["Content-Type"]) == (406, PROBLEM)


@pytest.mark.parametrize(
    "body",
    [
        {"name": "nul\x00name", "target": TASK, "schedule": None},
        {"name": "x", "target": TASK, "schedule": None, "payload": {"k": "\ud800"}},
        {"name": "x", "target": TASK, "schedule": None, "payload": {"k": 1e400}},
    ],
)
def test_what_postgresql_cannot_store_is_a_400_not_a_500(alpha_api: Api, body):
    import json

    raw = json.dumps(body).replace("Infinity", "1e400")
    response = alpha_api.client.post(
        "/api/v1/jobs",
        raw,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {alpha_api.token}",
    )
    assert (response.status_code, response["Content-Type"]) == (400, PROBLEM)


@override_settings(SCHEDULER_API_MAX_BODY_BYTES=1024)
def test_a_body_over_the_cap_is_a_413(alpha_api: Api):
    body = {"name": "big", "target": TASK, "schedule": None, "payload": {"x": "y" * 2000}}
    response = alpha_api.post("jobs", body)
    assert (response.status_code, response["Content-Type"]) == (413, PROBLEM)
    with pytest.raises(PayloadTooLarge):  # no Content-Length (chunked): the parser counts
        CappedJSONParser().parse(io.BytesIO(b'"' + b"y" * 2000 + b'"'))


@pytest.mark.parametrize(
    ("header", "says"),
    [
        ("Token {token}", "must be `Bearer`, not `Token`"),
        ("{token}", "holds no scheme: it must be `Bearer`"),
        ("Basic dXNlcjpwYXNz", "must be `Bearer`, not `Basic`"),
        ("", "No credentials: send `Authorization: Bearer <token>`"),
    ],
)
def test_another_scheme_or_a_bare_token_says_the_scheme_must_be_bearer(live, header, says):
    headers = {"Authorization": header.format(token=live["alpha"].token)} if header else {}
    response = Api(None).call("GET", "jobs", headers=headers)
    assert (response.status_code, response["Content-Type"]) == (401, PROBLEM)
    assert says in response.json()["detail"]
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_a_session_on_the_tenant_domain_still_works_beside_another_scheme(live):
    """The hint is given only when nothing authenticated the request: a browser behind a
    proxy that sends Basic credentials keeps its dashboard session."""
    alpha = live["alpha"]
    client = _session_client(alpha, _get_new_csrf_string())
    response = client.get("/api/v1/jobs", HTTP_AUTHORIZATION="Basic dXNlcjpwYXNz")
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("jobs/abc", "No such job: a job id is a whole number from 1 to 9223372036854775807"),
        ("jobs/abc/pause", "a job id is a whole number"),
        ("jobs/99999999999999999999", "a job id is a whole number"),
        ("jobs/1.5/graph", "a job id is a whole number"),
        ("runs/not-a-uuid", "No such run: a run id is a UUID (e.g. /api/v1/runs/01a22689-"),
        ("runs/123/cancel", "a run id is a UUID"),
        ("dag-runs/7", "No such DAG run: a DAG run id is a UUID"),
        ("jobs/", "API paths have no trailing slash (/api/v1/jobs)"),
        ("jobs/4/nothing", "No such API endpoint; see /api/v1/docs."),
    ],
)
def test_a_malformed_id_is_a_404_that_says_what_an_id_looks_like(alpha_api: Api, path, says):
    response = alpha_api.get(path)
    assert (response.status_code, response["Content-Type"]) == (404, PROBLEM)
    assert says in response.json()["detail"]


def test_a_well_formed_unknown_id_is_a_404_naming_the_kind_of_object(alpha_api: Api):
    job = alpha_api.get("jobs/424242")
    run = alpha_api.get("runs/01a22689-11d9-754e-8aa1-48ddf05cae1b")
    assert job.status_code == run.status_code == 404
    assert job.json()["detail"] == "No such job in this tenant (or it was deleted)."
    assert run.json()["detail"] == "No such run in this tenant."
