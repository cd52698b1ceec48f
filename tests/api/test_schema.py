"""The OpenAPI schema: valid OpenAPI 3, served without a token, describing every endpoint
with its problem+json errors; the Swagger UI from local static files; and a bounded
schemathesis run against the schema that must find no 5xx."""

from __future__ import annotations

import os
import re

import pytest
from django.core.management import call_command
from django.test import Client
from drf_spectacular.validation import validate_schema

from scheduler_site.api.urls import endpoints

from .conftest import Api


@pytest.fixture
def schema(live) -> dict:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()


def test_the_schema_is_valid_openapi_3_and_needs_no_token(schema: dict, live):
    validate_schema(schema)  # raises on any violation of the OpenAPI 3.0 meta-schema
    assert schema["openapi"].startswith("3.")
    on_domain = Client(HTTP_HOST=live["alpha"].domain).get("/api/v1/openapi.json")
    assert on_domain.json()["paths"] == schema["paths"]


def test_schema_generation_has_no_warnings(tmp_path):
    """drf-spectacular's own check: every view, serializer and field resolved unambiguously,
    and the result valid against the OpenAPI 3 meta-schema."""
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", tmp_path / "s.yml")


def test_the_schema_describes_every_endpoint_and_only_those(schema: dict):
    documented = {path.removeprefix("/api/v1/") for path in schema["paths"]}
    routed = {
        str(p.pattern)
        .replace("<job_id:job_id>", "{job_id}")
        .replace("<uuid:run_id>", "{run_id}")
        .replace("<uuid:dag_run_id>", "{dag_run_id}")
        .replace("<calendar_name:name>", "{name}")
        .replace("<job_id:channel_id>", "{channel_id}")
        for p in endpoints
    }
    assert documented == routed


def test_every_operation_needs_a_bearer_token_and_documents_problem_errors(schema: dict):
    bearer = schema["components"]["securitySchemes"]["bearerAuth"]
    assert (bearer["type"], bearer["scheme"]) == ("http", "bearer")
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert {"bearerAuth": []} in operation["security"], (method, path)
            errors = {code: r for code, r in operation["responses"].items() if code >= "400"}
            assert "401" in errors, (method, path)
            # The web server's own refusals (414, 431) are HTML; the application's problems.
            assert {"414", "431"} <= set(errors), (method, path)
            for code, response in errors.items():
                media = ["text/html"] if code in ("414", "431") else ["application/problem+json"]
                assert list(response["content"]) == media, (method, path, code)


def test_job_input_and_output_shapes_are_described(schema: dict):
    components = schema["components"]["schemas"]
    assert components["JobInput"]["required"] == ["name", "target"]
    assert set(components["Target"]["discriminator"]["mapping"]) == {"http", "task"}
    assert set(components["Job"]["required"]) == set(components["Job"]["properties"])
    run_attempt = components["Attempt"]["properties"]
    assert set(run_attempt) == {
        "number",
        "outcome",
        "worker",
        "started_at",
        "finished_at",
        "error",
        "output",
    }


def test_the_docs_page_uses_local_static_files_only(live):
    page = Client().get("/api/v1/docs")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    # No asset from another host (a bare "cdn" once matched inside the page's random CSRF
    # token): every src and href is a path on this site.
    external = re.findall(r'(?:src|href)\s*=\s*["\']((?:https?:)?//[^"\']*)', html)
    assert external == [] and "unpkg.com" not in html and "jsdelivr" not in html
    asset = Client().get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert asset.status_code == 200


# --- schemathesis ---------------------------------------------------------------------------

# CI runs 30 derandomized cases per operation (the same ones every time, ~10 s); for a deeper
# local hunt: API_FUZZ_EXAMPLES=500 API_FUZZ_RANDOM=1 make test ARGS="tests/api -k schemathesis"
MAX_EXAMPLES = int(os.environ.get("API_FUZZ_EXAMPLES", "30"))
DERANDOMIZE = os.environ.get("API_FUZZ_RANDOM") != "1"


@pytest.fixture
def api_schema(live):
    """The schema as schemathesis sees it, loaded from the WSGI app, with one job of alpha's
    (id 1, after the truncation) so that generated ids sometimes find something."""
    import schemathesis
    from django.core.handlers.wsgi import WSGIHandler

    Api(live["alpha"].token).create_job(name="fuzz target")
    return schemathesis.openapi.from_wsgi("/api/v1/openapi.json", WSGIHandler())


def _checks() -> list:
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi import checks

    # Not positive_data_acceptance: a schema-valid request may rightly be a 400 for a rule
    # JSON Schema cannot state (a cron expression's fields, an end after its start).
    # test_fuzz_cli.py runs every check, with tests/api/fuzz_hooks.py saying which.
    return [
        not_a_server_error,
        checks.status_code_conformance,
        checks.content_type_conformance,
        checks.response_schema_conformance,
        checks.response_headers_conformance,
        checks.negative_data_rejection,
        checks.ignored_auth,
    ]


def _fuzz(operation, token: str, examples: int) -> tuple[int, BaseException | None]:
    """Positive and negative cases for one operation; (cases sent, first failure)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    sent, CHECKS = 0, _checks()
    strategy = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )

    # Derandomized, unshrunk: the same bounded run every time, in seconds.
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=DERANDOMIZE,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def check(case) -> None:
        nonlocal sent
        sent += 1
        case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)

    try:
        check()
    except Exception as exc:  # reported per operation by the caller
        return sent, exc
    return sent, None


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_or_schema_violation(api_schema, live):
    """Every operation, MAX_EXAMPLES positive and negative cases: no 5xx, and every response
    (status, content type, body, headers) conforms to the schema."""
    import time

    started, total, failures = time.monotonic(), 0, {}
    for result in api_schema.get_all_operations():
        operation = result.ok()
        sent, failure = _fuzz(operation, live["alpha"].token, MAX_EXAMPLES)
        total += sent
        if failure is not None:
            failures[operation.label] = failure
    print(f"\nschemathesis: {total} cases, {time.monotonic() - started:.1f}s")
    assert not failures, "\n\n".join(f"{label}: {exc}" for label, exc in failures.items())


def _operations(schema: dict):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            yield f"{method.upper()} {path}", operation


def _examples(operation: dict) -> list[str]:
    found = []
    for content in operation.get("requestBody", {}).get("content", {}).values():
        found += list(content.get("examples", {}))
    for response in operation["responses"].values():
        for content in (response.get("content") or {}).values():
            found += list(content.get("examples", {}))
    return found


def test_every_operation_has_a_summary_a_description_for_users_and_an_example(schema: dict):
    """No view's docstring (a note for maintainers) leaks into the docs."""
    from scheduler_site.api import urls

    notes = {
        " ".join(view.__doc__.split())
        for pattern in urls.endpoints
        for view in [getattr(pattern.callback, "view_class", None)]
        if view is not None
        for view in view.__mro__
        if view.__doc__
    }
    operations = dict(_operations(schema))
    assert len(operations) >= 26
    for label, operation in operations.items():
        assert operation.get("summary"), label
        description = " ".join(operation.get("description", "").split())
        assert len(description) >= 60, label
        assert description not in notes, label
        assert _examples(operation), label


def test_the_docs_header_links_to_the_guide_page_which_a_browser_opens(schema: dict, live):
    description = schema["info"]["description"]
    assert "](/api/v1/guide)" in description and "docs/api.md" not in description
    page = Client().get("/api/v1/guide")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    html = page.content.decode()
    assert "<h1>REST API v1</h1>" in html and "<table>" in html
    assert 'href="/api/v1/guide/schedules"' in html  # the other guide, served here too
    assert 'href="schedules.md"' not in html and 'href="benchmarks.md' not in html
    schedules = Client(HTTP_HOST=live["alpha"].domain).get("/api/v1/guide/schedules")
    assert schedules.status_code == 200 and "<h1>" in schedules.content.decode()
    assert Client().get("/api/v1/guide/nope").status_code == 404


def _operation(schema: dict, operation_id: str) -> dict:
    [found] = [op for _, op in _operations(schema) if op.get("operationId") == operation_id]
    return found


def _request_examples(operation: dict) -> dict[str, object]:
    content = operation["requestBody"]["content"]["application/json"]
    return {e.get("summary", key): e["value"] for key, e in content["examples"].items()}


def _answer_examples(operation: dict, status: str) -> dict[str, object]:
    content = operation["responses"][status]["content"]["application/json"]
    return {e.get("summary", key): e["value"] for key, e in content["examples"].items()}


def test_the_schedule_examples_are_what_the_api_takes_and_answers(
    schema: dict, alpha_api: Api, monkeypatch
):
    """Every request example of creating a calendar, creating and changing a job and the
    full preview is accepted (at the examples' own time, 2026-11-20); each preview example's
    answer is the API's answer, word for word."""
    from datetime import UTC, datetime

    from core.clock import FakeClock
    from scheduler_site.api.views import ApiView

    monkeypatch.setattr(ApiView, "clock", FakeClock(datetime(2026, 11, 20, 9, tzinfo=UTC)))
    for title, body in _request_examples(_operation(schema, "calendars_create")).items():
        response = alpha_api.post("calendars", body)
        assert response.status_code == 201, (title, response.content)
    created = []
    for title, body in _request_examples(_operation(schema, "jobs_create")).items():
        response = alpha_api.post("jobs", body)
        assert response.status_code == 201, (title, response.content)
        created.append(response.json()["id"])
    assert len(created) >= 9
    for title, body in _request_examples(_operation(schema, "jobs_update")).items():
        response = alpha_api.patch(f"jobs/{created[0]}", body)
        assert response.status_code == 200, (title, response.content)
    full = _operation(schema, "schedule_preview_full")
    answers = _answer_examples(full, "200")
    requests = _request_examples(full)
    assert len(requests) >= 3 and set(answers) == {f"Answer: {t}" for t in requests}
    skips = set()
    for title, body in requests.items():
        response = alpha_api.post("schedule/preview", body)
        assert response.status_code == 200, (title, response.content)
        assert response.json() == answers[f"Answer: {title}"], title
        skips |= {slot["skip_reason"] for slot in response.json()["slots"]}
    assert skips == {None, "excluded"}
