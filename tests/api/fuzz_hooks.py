"""What schemathesis needs to know about this API beyond its OpenAPI schema (loaded by
the repository's schemathesis.toml, so `schemathesis run -c all` from the repository root
uses it; tests/api/test_fuzz_cli.py runs it against gunicorn in CI).

The schema states every rule that JSON Schema can: types, bounds, enums, patterns,
`additionalProperties: false`. Two kinds of rule it cannot:

- the meaning of a few strings: a cron expression's fields, a time zone name. They carry a
  custom `format` (`cron`, `time-zone`), and here are generators of valid values, so that
  schema-valid requests are mostly acceptable ones;
- rules across fields or against the tenant's rows: an end after its start, a one-off in
  the future, calendars and upstream jobs that exist, a backfill's size, a URL's host. A
  schema-valid request may be refused for those, always with a 400 naming the field: the
  check below holds each such refusal to the fields listed here, so a schema-valid request
  refused for anything else (an unknown field, a type, a bound) still fails the run.

No Django here: the schemathesis CLI imports this module in its own process.
"""

from __future__ import annotations

import json
import re
from zoneinfo import available_timezones

import schemathesis
from hypothesis import strategies as st

VALID_CRONS = (
    "* * * * *",
    "*/5 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0 9 * * 1-5",
    "0 9 * * MON-FRI",
    "15 10 1,15 * *",
    "0 18 * * 5L",
    "0 12 L * *",
    "0 8 * * 1#2",
    "H * * * *",
    "H H * * *",
    "@hourly",
    "@daily",
    "@weekly",
    "@monthly",
)
schemathesis.openapi.format("cron", st.sampled_from(VALID_CRONS))
schemathesis.openapi.format("time-zone", st.sampled_from(sorted(available_timezones())))

_SCHEDULE = (
    r"schedule(\.(cron|timezone|start|end|start_at|at|calendars(\.\d+)?"
    r"|specs\.\d+\.(cron|timezone)))?"
)
_JOB = rf"({_SCHEDULE}|target\.url|target\.headers|payload|jitter_seconds|dst_repeat|depends_on)"
_CHANNEL = r"(name|url|headers|emails|job|on_dead_letter)"
# The fields a schema-valid request may be refused for, by operation (`METHOD path`).
RULES_BEYOND_THE_SCHEMA = {
    "POST /api/v1/jobs": _JOB,
    "PATCH /api/v1/jobs/{job_id}": _JOB,
    "POST /api/v1/jobs/bulk": rf"(jobs\.\d+\.{_JOB}|ids\.\d+)",
    "POST /api/v1/jobs/{job_id}/resume": r"schedule",
    "POST /api/v1/jobs/{job_id}/run": r"payload",
    "POST /api/v1/jobs/{job_id}/backfill": r"(start|end|job)",
    "GET /api/v1/schedule/preview": r"(cron|timezone|interval_seconds|start)",
    "POST /api/v1/schedule/preview": rf"({_SCHEDULE}|jitter_seconds|dst_repeat|after)",
    "POST /api/v1/calendars": r"(name|dates|ranges(\.\d+)?|ics|timezone)",
    "PATCH /api/v1/calendars/{name}": r"(name|dates|ranges(\.\d+)?|ics|timezone)",
    # A channel's URL (the SSRF guard), header names, addresses, job, a name in use, the
    # fields that belong to the other kind, and "at least one condition".
    "POST /api/v1/alerts/channels": _CHANNEL,
    "PATCH /api/v1/alerts/channels/{channel_id}": _CHANNEL,
}
# Refusals for the tenant's state rather than a field: the job quota.
STATE_PROBLEMS = {"urn:tickwork:problem:quota-exceeded"}


@schemathesis.check
def refused_only_for_rules_the_schema_cannot_state(ctx, response, case) -> bool | None:
    """A 400 to a schema-valid request names only fields of RULES_BEYOND_THE_SCHEMA."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    label = f"{case.operation.method.upper()} {case.operation.path}"
    try:
        problem = json.loads(response.content)
    except ValueError:
        raise AssertionError(f"{label}: a 400 that is no problem+json") from None
    if problem.get("type") in STATE_PROBLEMS:
        return None
    rules = RULES_BEYOND_THE_SCHEMA.get(label)
    fields = list(problem.get("errors") or {})
    stray = [f for f in fields if rules is None or not re.fullmatch(rules, f)]
    if not fields or stray:
        raise AssertionError(
            f"{label}: a schema-valid request refused for {stray or problem.get('detail')!r}, "
            "which the schema could state"
        )
    return None
