"""How the OpenAPI schema is generated: an operation's description is what its
`extend_schema` says for the API's users, never the view's docstring (which is a note for
the people who maintain the code)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema


class ApiAutoSchema(AutoSchema):
    def get_description(self) -> str:
        return ""


def strict_request_bodies(result: dict, generator: object, request: object, public: bool) -> dict:
    """drf-spectacular post-processing hook: every object a request body describes refuses
    keys it does not name (`additionalProperties: false`), as the server does (a 400
    `unknown field`). Objects that take any keys say so themselves (a job's `payload`, a
    target's `headers`) and are left alone."""
    components = result.get("components", {}).get("schemas", {})
    seen: set[int] = set()

    def close(schema: Any) -> None:
        if isinstance(schema, list):
            for item in schema:
                close(item)
            return
        if not isinstance(schema, dict) or id(schema) in seen:
            return
        seen.add(id(schema))
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            close(components.get(ref.rsplit("/", 1)[1]))
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for key in ("properties",):
            for sub in schema.get(key, {}).values():
                close(sub)
        for key in ("items", "oneOf", "anyOf", "allOf"):
            if key in schema:
                close(schema[key])

    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            body = operation.get("requestBody", {})
            for content in body.get("content", {}).values():
                close(content.get("schema"))
                if "oneOf" in _resolved(content.get("schema"), components):
                    body["required"] = True  # one of several shapes: none is no shape
    return result


def _resolved(schema: Any, components: dict) -> dict:
    ref = schema.get("$ref", "") if isinstance(schema, dict) else ""
    return components.get(ref.rsplit("/", 1)[-1], {}) if ref else (schema or {})


# gunicorn answers these itself, before the application sees the request, as HTML.
FRONT_SERVER_LIMITS = {
    "414": "The request line (path and query) is longer than the web server reads "
    "(gunicorn's limit_request_line, 4094 bytes by default).",
    "431": "A request header is larger than the web server reads (gunicorn's "
    "limit_request_field_size, 8190 bytes by default).",
}


def registered_tasks(result: dict, generator: object, request: object, public: bool) -> dict:
    """drf-spectacular post-processing hook: a task target's `task` is one of the names this
    server registered (core/registry.py, SCHEDULER_TASK_MODULES), as an enum."""
    from core.registry import task_names

    task = result.get("components", {}).get("schemas", {}).get("TaskTarget", {})
    if "task" in task.get("properties", {}):
        task["properties"]["task"]["enum"] = sorted(task_names())
    return result


def front_server_limits(result: dict, generator: object, request: object, public: bool) -> dict:
    """drf-spectacular post-processing hook: the web server's own refusals, on every
    operation (they are not problem+json: the application never saw the request)."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            for status, description in FRONT_SERVER_LIMITS.items():
                operation["responses"].setdefault(
                    status,
                    {
                        "description": description,
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    },
                )
    return result
