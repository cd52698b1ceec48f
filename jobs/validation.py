"""Turn a job description (the API's JSON shape, also used by the dashboard and commands)
into model field values, or a JobValidationError naming every bad field and why."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from django.conf import settings

from core.encryption import keyring
from core.registry import get_task, task_names
from core.ssrf import RefusedDestination, check_saved_url, parse_allow_networks

from .headers import clean_headers
from .schedule_input import schedule_as_input, validate_schedule

BIGINT_MAX = 2**63 - 1  # the largest id PostgreSQL's bigint holds
# A name needs one character that is not white space, in the set that both Python and the
# ECMAScript regular expressions of the OpenAPI schema (`\s`) call white space; it is
# stored without the white space around it.
WHITE_SPACE = (
    " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
)
WHITE_SPACE += "\u2028\u2029\u202f\u205f\u3000\ufeff"
NAME_PATTERN = (
    "[^ \\t\\n\\v\\f\\r\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]"
)
PRIORITIES = ("high", "normal", "low")
CONCURRENCY = ("allow", "forbid", "queue", "replace")
MISFIRE = ("run_once", "run_all", "skip")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
RETRY_DEFAULTS = {
    "max_attempts": 3,
    "backoff_seconds": 10.0,
    "backoff_multiplier": 2.0,
    "backoff_max_seconds": 3600.0,
    "jitter": True,
}
SCHEDULE_FIELDS = (
    "schedule_kind",
    "cron_expression",
    "cron_resolved",
    "timezone",
    "interval_seconds",
    "anchor_at",
    "dst_gap",
    "dst_repeat",
    "jitter_seconds",  # the due time of every slot
    "extra_specs",
    "run_at_wall",
    "start_at",
    "end_at",
)


class JobValidationError(Exception):
    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {', '.join(v)}" for k, v in errors.items()))
        self.errors = errors


class Errors:
    def __init__(self) -> None:
        self.items: dict[str, list[str]] = {}

    def add(self, field: str, message: str) -> None:
        self.items.setdefault(field, []).append(message)

    def raise_if_any(self) -> None:
        if self.items:
            raise JobValidationError(self.items)


def _int(errors: Errors, field: str, value: Any, lo: int, hi: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors.add(field, "must be a whole number")
        return None
    if not lo <= value <= hi:
        errors.add(field, f"must be between {lo} and {hi}")
        return None
    return int(value)


def _number(errors: Errors, field: str, value: Any, lo: float, hi: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors.add(field, "must be a number")
        return None
    if not lo <= value <= hi:
        errors.add(field, f"must be between {lo:g} and {hi:g}")
        return None
    return float(value)


def _choice(errors: Errors, field: str, value: Any, choices: tuple[str, ...]) -> str | None:
    if value not in choices:
        errors.add(field, f"must be one of {', '.join(choices)}")
        return None
    return value


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


TARGET_KEYS = {"task": {"type", "task"}, "http": {"type", "url", "method", "headers"}}


def validate_target(errors: Errors, target: Any, stored_headers: dict | None = None) -> dict:
    if not isinstance(target, dict) or target.get("type") not in ("http", "task"):
        errors.add("target.type", "must be `http` or `task`")
        return {}
    for key in sorted(set(target) - TARGET_KEYS[target["type"]]):
        errors.add(f"target.{key}", f"unknown key for a `{target['type']}` target")
    if target["type"] == "task":
        name = target.get("task")
        if not isinstance(name, str) or get_task(name) is None:
            errors.add("target.task", f"unknown task {name!r}; known: {', '.join(task_names())}")
            return {}
        return {"target_type": "task", "target": {"task": name}}
    return _validate_http_target(errors, target, stored_headers)


def _validate_http_target(errors: Errors, target: dict, stored_headers: dict | None) -> dict:
    url, method = target.get("url"), target.get("method", "POST")
    headers = target.get("headers", {})
    if not isinstance(url, str) or len(url) > 2048:
        errors.add("target.url", "must be a URL of at most 2048 characters")
    else:
        try:
            check_saved_url(url, allow=parse_allow_networks(settings.SCHEDULER_HTTP_ALLOW_NETWORKS))
        except RefusedDestination as exc:
            errors.add("target.url", str(exc))
    _choice(errors, "target.method", method, HTTP_METHODS)
    # Plain or secret values (jobs/headers.py); a secret given without a value keeps the
    # one stored under its name.
    headers = clean_headers(
        errors,
        headers,
        stored_headers,
        ring=keyring(),
        max_bytes=settings.SCHEDULER_MAX_HEADERS_BYTES,
    )
    return {"target_type": "http", "target": {"url": url, "method": method, "headers": headers}}


def validate_retry(errors: Errors, retry: Any, current: dict) -> dict:
    if not isinstance(retry, dict):
        errors.add("retry", "must be an object")
        return {}
    unknown = set(retry) - set(RETRY_DEFAULTS)
    if unknown:
        errors.add("retry", f"unknown keys: {', '.join(sorted(unknown))}")
    merged = {**current, **retry}
    out = {
        "max_attempts": _int(errors, "retry.max_attempts", merged["max_attempts"], 1, 100),
        "backoff_seconds": _number(
            errors, "retry.backoff_seconds", merged["backoff_seconds"], 0, 86400
        ),
        "backoff_multiplier": _number(
            errors, "retry.backoff_multiplier", merged["backoff_multiplier"], 1, 100
        ),
        "backoff_max_seconds": _number(
            errors, "retry.backoff_max_seconds", merged["backoff_max_seconds"], 0, 7 * 86400
        ),
    }
    if not isinstance(merged["jitter"], bool):
        errors.add("retry.jitter", "must be true or false")
    out["retry_jitter"] = merged["jitter"]
    return out


def validate_payload(errors: Errors, payload: Any, field: str = "payload") -> dict | None:
    if not isinstance(payload, dict):
        errors.add(field, "must be a JSON object")
        return None
    if _json_size(payload) > settings.SCHEDULER_MAX_PAYLOAD_BYTES:
        errors.add(field, f"larger than {settings.SCHEDULER_MAX_PAYLOAD_BYTES} bytes")
        return None
    return payload


# A slot's run is due at most this long after the slot: what the edits and the relay that
# look for runs prepared but not yet due may bound their reads by.
MAX_JITTER_SECONDS = 3600

SIMPLE_FIELDS = {
    "timeout_seconds": ("int", 1, 86400),
    "max_concurrent_runs": ("int", 1, 1000),
    "misfire_grace_seconds": ("int", 0, 7 * 86400),
    "jitter_seconds": ("int", 0, MAX_JITTER_SECONDS),
    "priority": ("choice", PRIORITIES),
    "concurrency_policy": ("choice", CONCURRENCY),
    "misfire_policy": ("choice", MISFIRE),
    "dst_gap": ("choice", ("shift", "skip")),
    "dst_repeat": ("choice", ("first", "last", "both")),
}
KNOWN_KEYS = {
    "name",
    "description",
    "schedule",
    "target",
    "payload",
    "retry",
    "depends_on",
    *SIMPLE_FIELDS,
}


_UNCHANGED = object()


class CleanJob:
    def __init__(
        self, fields: dict, depends_on: list[int] | None, calendars: list[str] | None = None
    ) -> None:
        self.fields = fields
        self.depends_on = depends_on
        self.calendars = calendars  # names, or None: unchanged


def _existing_retry(job) -> dict:
    if job is None:
        return dict(RETRY_DEFAULTS)
    return {
        "max_attempts": job.max_attempts,
        "backoff_seconds": job.backoff_seconds,
        "backoff_multiplier": job.backoff_multiplier,
        "backoff_max_seconds": job.backoff_max_seconds,
        "jitter": job.retry_jitter,
    }


def _simple(errors: Errors, data: dict, fields: dict) -> None:
    for name, rule in SIMPLE_FIELDS.items():
        if name not in data:
            continue
        if rule[0] == "int":
            value = _int(errors, name, data[name], rule[1], rule[2])
        else:
            value = _choice(errors, name, data[name], rule[1])
        if value is not None:
            fields[name] = value


def _name_and_description(errors: Errors, data: dict, fields: dict, creating: bool) -> None:
    if "name" in data or creating:
        name = data.get("name")
        if not isinstance(name, str) or not re.search(NAME_PATTERN, name):
            errors.add("name", "is required")
        elif len(name) > 200:
            errors.add("name", "must be at most 200 characters")
        else:
            fields["name"] = name.strip(WHITE_SPACE)
    if "description" in data:
        if not isinstance(data["description"], str) or len(data["description"]) > 5000:
            errors.add("description", "must be a string of at most 5000 characters")
        else:
            fields["description"] = data["description"]


def _depends_on(errors: Errors, data: dict) -> list[int] | None:
    if "depends_on" not in data:
        return None
    ids = data["depends_on"]
    if not isinstance(ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 1 <= i <= BIGINT_MAX for i in ids
    ):
        errors.add("depends_on", "must be a list of job ids")
        return None
    return sorted(set(ids))


def clean_job_input(data: Any, *, existing=None, seed: str, now: datetime) -> CleanJob:
    if not isinstance(data, dict):
        raise JobValidationError({"non_field_errors": ["expected a JSON object"]})
    errors, fields, creating = Errors(), {}, existing is None
    for key in sorted(set(data) - KNOWN_KEYS):
        errors.add(key, "unknown field")
    if creating:
        for key in ("target",):
            if key not in data:
                errors.add(key, "is required")
        if "schedule" not in data and "depends_on" not in data:
            errors.add(
                "schedule",
                "is required (use null for a job run on demand or by "
                "dependencies, or give depends_on)",
            )
    _name_and_description(errors, data, fields, creating)
    _simple(errors, data, fields)
    dst_gap = fields.get("dst_gap", getattr(existing, "dst_gap", "shift"))
    dst_repeat = fields.get("dst_repeat", getattr(existing, "dst_repeat", "first"))
    calendars = None
    if "schedule" in data or creating:
        # A job created with only `depends_on` runs on demand or as a dependency.
        schedule = data.get("schedule")
    elif ("dst_gap" in fields or "dst_repeat" in fields) and existing.schedule_kind in (
        "cron",
        "at",
    ):
        schedule = schedule_as_input(existing, [])  # re-resolve with the new DST policy
    else:
        schedule = _UNCHANGED
    if schedule is not _UNCHANGED:
        parsed = validate_schedule(
            errors, schedule, seed=seed, dst_gap=dst_gap, dst_repeat=dst_repeat, now=now
        )
        fields.update(parsed.fields)
        # Calendars change only with a `schedule` given (a DST edit keeps the job's own).
        calendars = parsed.calendars if "schedule" in data or creating else None
    if "target" in data:
        stored = (existing.target or {}).get("headers") if existing is not None else None
        fields.update(validate_target(errors, data["target"], stored))
    if "payload" in data:
        payload = validate_payload(errors, data["payload"])
        if payload is not None:
            fields["payload"] = payload
    if "retry" in data:
        fields.update(validate_retry(errors, data["retry"], _existing_retry(existing)))
    depends_on = _depends_on(errors, data)
    interval = fields.get("interval_seconds", getattr(existing, "interval_seconds", None))
    jitter = fields.get("jitter_seconds", getattr(existing, "jitter_seconds", 0))
    if interval and jitter and jitter >= interval:
        errors.add("jitter_seconds", "must be shorter than the interval")
    errors.raise_if_any()
    return CleanJob(fields, depends_on, calendars)
