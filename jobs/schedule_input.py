"""A job's `schedule` as the API gives it -> the model's schedule fields, or errors naming
the field (`schedule.cron`, `schedule.specs.1.timezone`, `schedule.end`, ...).

Shapes (any of them may add `start`, `end` and `calendars`):

- `null`: on demand, or as a dependency, only;
- `{"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"}`: one cron spec (five fields,
  macros, `H`, `L`/`W`/`#`; six fields with seconds when the operator's minimum interval
  allows it);
- `{"specs": [{"cron": ...}, {"cron": ..., "timezone": ...}], "timezone": ...}`: several
  cron specs, each in its own zone if it gives one (else the schedule's); the job fires on
  their union, an instant shared by two specs once;
- `{"interval_seconds": 600, "start_at": ...}`: every N seconds from an anchor (default now);
- `{"at": "2026-12-24T18:00", "timezone": ...}`: once, at a wall time in the zone (an
  instant with an offset is taken as is);
- `start` (inclusive) and `end` (exclusive): instants with an offset, no slot outside;
- `calendars`: names of the tenant's exclusion calendars; a slot whose local date (in the
  job's zone: with `specs`, the first spec's, for the slots of every spec; UTC for an
  interval) is on one is recorded as skipped, `excluded`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.utils.dateparse import parse_datetime

from .schedules import ScheduleError, interval_schedule, one_off, parse_cron, validate_timezone

MAX_SPECS = 20
KINDS = ("cron", "specs", "interval_seconds", "at")
COMMON = ("start", "end", "calendars")
ALLOWED = {
    "cron": {"cron", "timezone"},
    "specs": {"specs", "timezone"},
    "interval_seconds": {"interval_seconds", "start_at"},
    "at": {"at", "timezone"},
}
NO_SCHEDULE = {
    "schedule_kind": "none",
    "cron_expression": "",
    "cron_resolved": "",
    "interval_seconds": None,
    "anchor_at": None,
    "extra_specs": [],
    "run_at_wall": "",
    "start_at": None,
    "end_at": None,
}


class ScheduleInput:
    """The validated fields, and the calendar names the service must resolve."""

    def __init__(self, fields: dict, calendars: list[str] | None) -> None:
        self.fields = fields
        self.calendars = calendars


def validate_schedule(
    errors, schedule: Any, *, seed: str, dst_gap: str, dst_repeat: str, now: datetime
) -> ScheduleInput:
    if schedule is None:
        return ScheduleInput(dict(NO_SCHEDULE), [])
    if not isinstance(schedule, dict):
        errors.add(
            "schedule", "must be an object (`cron`, `specs`, `interval_seconds` or `at`), or null"
        )
        return ScheduleInput({}, None)
    kinds = [k for k in KINDS if k in schedule]
    if len(kinds) != 1:
        errors.add("schedule", "give exactly one of `cron`, `specs`, `interval_seconds` or `at`")
        return ScheduleInput({}, None)
    kind = kinds[0]
    for key in sorted(set(schedule) - ALLOWED[kind] - set(COMMON)):
        errors.add(f"schedule.{key}", f"unknown key for a `{kind}` schedule")
    fields = dict(NO_SCHEDULE)
    fields.update(_bounds(errors, schedule))
    policy = {"seed": seed, "dst_gap": dst_gap, "dst_repeat": dst_repeat}
    if kind == "cron":
        fields.update(_cron(errors, schedule, **policy))
    elif kind == "specs":
        fields.update(_specs(errors, schedule, **policy))
    elif kind == "interval_seconds":
        fields.update(_interval(errors, schedule, now=now, start=fields["start_at"]))
    else:
        fields.update(_at(errors, schedule, dst_gap=dst_gap, dst_repeat=dst_repeat))
    return ScheduleInput(fields, _calendar_names(errors, schedule))


def _parse_one(errors, where: str, expression: Any, zone: Any, *, seed, dst_gap, dst_repeat):
    if not isinstance(expression, str) or not isinstance(zone, str):
        errors.add(where, "cron and timezone must be strings")
        return None
    try:
        return parse_cron(
            expression,
            timezone=zone,
            seed=seed,
            dst_gap=dst_gap,
            dst_repeat=dst_repeat,
            minimum_interval_seconds=settings.SCHEDULER_MIN_INTERVAL_SECONDS,
        )
    except ScheduleError as exc:
        prefix = where.rsplit(".", 1)[0]
        field = {"timezone": f"{prefix}.timezone"}.get(exc.field or "", where)
        if exc.field in ("dst_gap", "dst_repeat"):
            field = exc.field
        errors.add(field, str(exc))
        return None


def _cron(errors, schedule: dict, **policy) -> dict:
    zone = schedule.get("timezone", "UTC")
    parsed = _parse_one(errors, "schedule.cron", schedule.get("cron"), zone, **policy)
    if parsed is None:
        return {}
    return {
        "schedule_kind": "cron",
        "cron_expression": schedule["cron"].strip(),
        "cron_resolved": parsed.expression,
        "timezone": zone,
    }


def _specs(errors, schedule: dict, **policy) -> dict:
    specs, default_zone = schedule.get("specs"), schedule.get("timezone", "UTC")
    if not isinstance(specs, list) or not 1 <= len(specs) <= MAX_SPECS:
        errors.add("schedule.specs", f"must be a list of 1 to {MAX_SPECS} cron specs")
        return {}
    parsed = []
    for n, spec in enumerate(specs):
        if not isinstance(spec, dict) or "cron" not in spec or set(spec) - {"cron", "timezone"}:
            errors.add(f"schedule.specs.{n}", "must be an object with `cron` (and `timezone`)")
            continue
        zone = spec.get("timezone", default_zone)
        one = _parse_one(errors, f"schedule.specs.{n}.cron", spec["cron"], zone, **policy)
        if one is not None:
            parsed.append((spec["cron"].strip(), one))
    if len(parsed) != len(specs):
        return {}
    (first_text, first), rest = parsed[0], parsed[1:]
    return {
        "schedule_kind": "cron",
        "cron_expression": first_text,
        "cron_resolved": first.expression,
        "timezone": first.timezone,
        "extra_specs": [
            {"cron": text, "resolved": one.expression, "timezone": one.timezone}
            for text, one in rest
        ],
    }


def _instant(errors, field: str, value: Any) -> datetime | None:
    parsed = parse_datetime(str(value)) if isinstance(value, str) else None
    if parsed is None or parsed.tzinfo is None:
        errors.add(field, "must be an ISO 8601 instant with an offset, e.g. 2026-12-24T18:00:00Z")
        return None
    return parsed.astimezone(UTC)


def _interval(errors, schedule: dict, *, now: datetime, start: datetime | None) -> dict:
    seconds = schedule.get("interval_seconds")
    anchor = start or now.replace(microsecond=0)  # bounded from `start`: anchored there too
    if schedule.get("start_at") is not None:
        anchor = _instant(errors, "schedule.start_at", schedule["start_at"])
        if anchor is None:
            return {}
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        errors.add("schedule.interval_seconds", "must be a whole number of seconds")
        return {}
    try:
        interval_schedule(
            seconds, anchor=anchor, minimum_seconds=settings.SCHEDULER_MIN_INTERVAL_SECONDS
        )
    except ScheduleError as exc:
        errors.add("schedule.interval_seconds", str(exc))
        return {}
    # an interval has no zone of its own: its calendars' dates are UTC dates (a cron job
    # changed to an interval keeps no stale zone)
    return {
        "schedule_kind": "interval",
        "interval_seconds": seconds,
        "anchor_at": anchor,
        "timezone": "UTC",
    }


def _at(errors, schedule: dict, *, dst_gap: str, dst_repeat: str) -> dict:
    zone, text = schedule.get("timezone", "UTC"), schedule.get("at")
    parsed = parse_datetime(text) if isinstance(text, str) else None
    if parsed is None:
        errors.add("schedule.at", "must be a date and time, e.g. 2026-12-24T18:00 (a wall time)")
        return {}
    try:
        validate_timezone(zone)
    except ScheduleError as exc:
        errors.add("schedule.timezone", str(exc))
        return {}
    if parsed.tzinfo is not None:  # an instant: kept as that instant's wall time in the zone
        parsed = parsed.astimezone(validate_timezone(zone)).replace(tzinfo=None)
    if dst_repeat == "both":
        errors.add("dst_repeat", "a one-off fires once: use first or last")
        return {}
    try:
        one_off(parsed, zone, dst_gap=dst_gap, dst_repeat=dst_repeat)
    except ScheduleError as exc:
        errors.add(f"schedule.{exc.field or 'at'}", str(exc))
        return {}
    return {
        "schedule_kind": "at",
        "run_at_wall": parsed.isoformat(timespec="seconds"),
        "timezone": zone,
    }


def _bounds(errors, schedule: dict) -> dict:
    out = {}
    for key in ("start", "end"):
        if schedule.get(key) is not None:
            value = _instant(errors, f"schedule.{key}", schedule[key])
            if value is not None:
                out[f"{key}_at"] = value
    if out.get("start_at") and out.get("end_at") and out["end_at"] <= out["start_at"]:
        errors.add("schedule.end", "must be after start")
    return out


def _calendar_names(errors, schedule: dict) -> list[str] | None:
    names = schedule.get("calendars", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        errors.add("schedule.calendars", "must be a list of calendar names")
        return None
    return sorted(set(names))


def schedule_as_input(job, calendar_names: list[str]) -> dict | None:
    """The stored schedule in the input shape (to re-validate it with a new DST policy, and
    for the API's output)."""
    if job.schedule_kind == "none":
        return None
    if job.schedule_kind == "cron" and job.extra_specs:
        out: dict = {
            "specs": [{"cron": job.cron_expression, "timezone": job.timezone}]
            + [{"cron": s["cron"], "timezone": s["timezone"]} for s in job.extra_specs]
        }
    elif job.schedule_kind == "cron":
        out = {"cron": job.cron_expression, "timezone": job.timezone}
    elif job.schedule_kind == "interval":
        out = {"interval_seconds": job.interval_seconds, "start_at": _iso(job.anchor_at)}
    else:
        out = {"at": job.run_at_wall, "timezone": job.timezone}
    if job.start_at is not None:
        out["start"] = _iso(job.start_at)
    if job.end_at is not None:
        out["end"] = _iso(job.end_at)
    if calendar_names:
        out["calendars"] = calendar_names
    return out


def _iso(moment: datetime | None) -> str | None:
    if moment is None:  # a broken row (a parked job) is shown as it is
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
