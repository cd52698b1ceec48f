"""The OpenAPI schema is exactly as strict as the server: what the schema refuses the server
refuses (unknown keys, wrong JSON types, cursors of another shape, a parameter given twice),
and what the schema allows the server takes. Each case here is one schemathesis found."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from core.registry import task_names

from .conftest import TASK, Api

RUN_ID = "01a22689-11d9-754e-8aa1-48ddf05cae1b"


@pytest.fixture
def schema(live) -> dict:
    return Client().get("/api/v1/openapi.json").json()


def _bodies(schema: dict):
    components = schema["components"]["schemas"]
    for operations in schema["paths"].values():
        for operation in operations.values():
            for content in operation.get("requestBody", {}).get("content", {}).values():
                yield operation["operationId"], content["schema"], components


def _objects(schema, components, seen=None):
    seen = set() if seen is None else seen
    if isinstance(schema, list):
        for item in schema:
            yield from _objects(item, components, seen)
        return
    if not isinstance(schema, dict) or id(schema) in seen:
        return
    seen.add(id(schema))
    if "$ref" in schema:
        yield from _objects(components[schema["$ref"].rsplit("/", 1)[1]], components, seen)
    if "properties" in schema:
        yield schema
        for sub in schema["properties"].values():
            yield from _objects(sub, components, seen)
    for key in ("items", "oneOf", "anyOf", "allOf"):
        if key in schema:
            yield from _objects(schema[key], components, seen)


def test_every_object_a_request_body_describes_refuses_unknown_keys(schema: dict):
    checked = 0
    for operation_id, body, components in _bodies(schema):
        for obj in _objects(body, components):
            assert obj.get("additionalProperties") is False, (operation_id, list(obj["properties"]))
            checked += 1
    assert checked > 20


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "jobs",
            {"name": "x", "schedule": None, "target": {**TASK, "timeout": 5}},
            "target.timeout",
        ),
        (
            "jobs",
            {"name": "x", "schedule": {"cron": "* * * * *", "tz": "UTC"}, "target": TASK},
            "schedule.tz",
        ),
        ("jobs", {"name": "x", "schedule": None, "target": TASK, "retry": {"tries": 1}}, "retry"),
        ("jobs/bulk", {"action": "pause", "ids": [1], "cascade": "edges"}, "cascade"),
        ("dlq/replay", {"run_ids": [RUN_ID], "force": True}, "force"),
        ("calendars", {"name": "c", "dates": [], "colour": "red"}, "colour"),
        ("schedule/preview", {"schedule": {"cron": "* * * * *"}, "verbose": True}, "verbose"),
    ],
)
def test_the_server_refuses_the_unknown_keys_the_schema_refuses(alpha_api: Api, path, body, field):
    response = alpha_api.post(path, body)
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("dlq/replay", {"run_ids": [False]}, "run_ids.0"),  # was replayed as the UUID 0
        ("dlq/replay", {"run_ids": [0]}, "run_ids.0"),
        ("jobs/{job}/pause", {"reason": 0}, "reason"),
        ("jobs/{job}/run", {"payload": [1]}, "payload"),
        ("jobs/bulk", {"action": "pause", "ids": ["1"]}, "ids.0"),
        ("jobs/bulk", {"action": "pause", "ids": [1.0]}, "ids.0"),
        ("schedule/preview", {"schedule": {"cron": "* * * * *"}, "count": "3"}, "count"),
        ("calendars", {"name": "c", "timezone": 140737488355329}, "timezone"),
        ("calendars", {"name": "c", "ranges": [[False, True]]}, "ranges.0.0"),  # was stored null
        (
            "jobs",
            {"name": "x", "schedule": None, "target": TASK, "retry": {"max_attempts": 3.0}},
            "retry.max_attempts",
        ),
        (
            "jobs",
            {"name": "x", "schedule": None, "target": TASK, "timeout_seconds": 5.0},
            "timeout_seconds",
        ),
        (
            "jobs",
            {
                "name": "x",
                "schedule": None,
                "target": {"type": "http", "url": "https://e.com", "method": "post"},
            },
            "target.method",
        ),
        (
            "jobs",
            {
                "name": "x",
                "schedule": None,
                "target": {"type": "http", "url": "https://e.com", "headers": None},
            },
            "target.headers",
        ),
        ("jobs", {"name": "\u3000\t", "schedule": None, "target": TASK}, "name"),
        (
            "jobs",
            {"name": "x", "schedule": None, "target": TASK, "depends_on": [2**63]},
            "depends_on",
        ),
    ],
)
def test_a_value_of_another_json_type_or_shape_is_a_400(alpha_api: Api, path, body, field):
    job = alpha_api.create_job()
    response = alpha_api.post(path.format(job=job["id"]), body)
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()


def test_null_bounds_are_what_the_schema_says_they_are_the_same_as_none(alpha_api: Api):
    job = alpha_api.create_job(
        schedule={"interval_seconds": 600, "start_at": None, "start": None, "end": None}
    )
    assert job["schedule"]["interval_seconds"] == 600 and "end" not in job["schedule"]


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        ("jobs", "page_size=1.0", "page_size"),
        ("jobs", "page_size=2&page_size=3", "page_size"),
        ("runs", "job=5.0", "job"),
        ("runs", "status=dead&status=failed", "status"),
        ("schedule/preview", "interval_seconds=60&count=3.0", "count"),
    ],
)
def test_a_query_parameter_of_another_shape_or_given_twice_is_a_400(
    alpha_api: Api, path, query, field
):
    response = alpha_api.get(f"/api/v1/{path}?{query}")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]


def _cursor_pattern(schema: dict, path: str) -> str:
    [cursor] = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "cursor"]
    return cursor["schema"]["pattern"]


def test_every_cursor_of_the_schemas_shape_is_taken_and_next_has_that_shape(
    schema: dict, alpha_api: Api, live
):
    for n in range(3):
        job = alpha_api.create_job(name=f"c{n}")
        alpha_api.post(f"jobs/{job['id']}/run")
    jobs, runs = _cursor_pattern(schema, "/api/v1/jobs"), _cursor_pattern(schema, "/api/v1/runs")
    for path, pattern in (("jobs", jobs), ("runs", runs), ("dlq", runs)):
        nxt = alpha_api.get(path, page_size=1).json()["next"]
        if nxt is not None:
            assert re.fullmatch(pattern, re.search(r"cursor=([^&]+)", nxt).group(1)), path
    # Any text of the shape names a position: past the end, before the beginning.
    for path, cursor in (
        ("jobs", "9" * 19),
        ("jobs", "0"),
        ("runs", "0." + "0" * 32),
        ("runs", "9" * 17 + "." + "f" * 32),
    ):
        assert re.fullmatch(_cursor_pattern(schema, f"/api/v1/{path}"), cursor)
        response = alpha_api.get(path, cursor=cursor)
        assert response.status_code == 200, (path, cursor, response.content)
    assert alpha_api.get("jobs", cursor="9" * 19).json()["results"] == []
    assert len(alpha_api.get("jobs", cursor="0").json()["results"]) == 3
    assert len(alpha_api.get("runs", cursor="9" * 17 + "." + "f" * 32).json()["results"]) == 3
    for path, cursor in (("jobs", "abc"), ("runs", "5"), ("runs", "1.ABC")):
        assert not re.fullmatch(_cursor_pattern(schema, f"/api/v1/{path}"), cursor)
        assert alpha_api.get(path, cursor=cursor).status_code == 400


def test_a_task_targets_names_are_the_registered_tasks(schema: dict):
    task = schema["components"]["schemas"]["TaskTarget"]["properties"]["task"]
    assert task["enum"] == sorted(task_names())
