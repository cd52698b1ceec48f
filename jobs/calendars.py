"""Exclusion calendars: a tenant's named sets of dates that jobs skip (public holidays, a
change freeze). Actions for the API and the portal, in the current tenant schema; each
writes an audit record. A change to a calendar is a change to the schedule of every job
attached to it: their prepared runs (the lookahead window and its extra) are brought in line
(`jobs.signals.schedule_changed`) and the leader re-materialises from the first slot not
yet planned (slots missed while a job was paused still go to its misfire policy).
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any

from django.db import transaction

from core.clock import Clock
from tenants.models import Tenant

from .indexing import save_and_index
from .models import AuditEvent, ExclusionCalendar, Job
from .schedule_fields import calendar_value
from .schedules import ScheduleError, calendar_from_ics
from .services import Actor, cursor_after_calendar_change, first_slot_after
from .signals import schedule_changed
from .validation import Errors, JobValidationError

MAX_SPANS = 5000
NAME_PATTERN = re.compile(r"[^/\x00-\x1f\x7f]+")
KNOWN = {"name", "description", "dates", "ranges", "ics", "timezone"}


class CalendarNotFound(Exception):
    pass


class CalendarInUse(Exception):
    """Deleting a calendar that jobs use needs them detached first (the message names them)."""


def _date(errors: Errors, field: str, value: Any) -> str | None:
    if isinstance(value, str):
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    errors.add(field, "must be a date, YYYY-MM-DD")
    return None


def clean_calendar_input(data: Any, *, creating: bool) -> dict:
    """{"name", "description", "dates": [...], "ranges": [[first, last], ...]}, or dates
    read from an iCalendar file (`ics`, with `timezone` for its date-times)."""
    if not isinstance(data, dict):
        raise JobValidationError({"non_field_errors": ["expected a JSON object"]})
    errors, out = Errors(), {}
    for key in sorted(set(data) - KNOWN):
        errors.add(key, "unknown field")
    if "name" in data or creating:
        name = data.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            errors.add("name", "is required: 1 to 200 characters")
        elif not NAME_PATTERN.fullmatch(name):
            errors.add("name", "may not contain '/' or control characters (it is part of URLs)")
        else:
            out["name"] = name.strip()
    if "description" in data:
        if not isinstance(data["description"], str) or len(data["description"]) > 5000:
            errors.add("description", "must be a string of at most 5000 characters")
        else:
            out["description"] = data["description"]
    if "timezone" in data and not isinstance(data["timezone"], str):
        errors.add("timezone", "must be an IANA time zone name")
    elif "ics" in data:
        out.update(_from_ics(errors, data))
    else:
        out.update(_dates_and_ranges(errors, data))
    if len(out.get("dates", [])) + len(out.get("ranges", [])) > MAX_SPANS:
        errors.add("dates", f"at most {MAX_SPANS} dates and ranges")
    errors.raise_if_any()
    return out


def _dates_and_ranges(errors: Errors, data: dict) -> dict:
    out = {}
    if "dates" in data:
        if not isinstance(data["dates"], list):
            errors.add("dates", "must be a list of dates")
        else:
            out["dates"] = [_date(errors, f"dates.{n}", d) for n, d in enumerate(data["dates"])]
    if "ranges" in data:
        ranges = data["ranges"]
        if not isinstance(ranges, list) or not all(
            isinstance(r, list) and len(r) == 2 for r in ranges
        ):
            errors.add("ranges", "must be a list of [first, last] date pairs")
        else:
            out["ranges"] = []
            for n, (first, last) in enumerate(ranges):
                a, b = _date(errors, f"ranges.{n}.0", first), _date(errors, f"ranges.{n}.1", last)
                if a and b and b < a:
                    errors.add(f"ranges.{n}", "ends before it starts")
                out["ranges"].append([a, b])
    return out


def _from_ics(errors: Errors, data: dict) -> dict:
    if "dates" in data or "ranges" in data:
        errors.add("ics", "give `ics`, or `dates` and `ranges`, not both")
        return {}
    if not isinstance(data["ics"], str):
        errors.add("ics", "must be the text of an iCalendar file")
        return {}
    try:
        calendar = calendar_from_ics(data["ics"], timezone=data.get("timezone", "UTC"))
    except ScheduleError as exc:
        errors.add("ics" if exc.field != "timezone" else "timezone", str(exc))
        return {}
    return {
        "dates": [],
        "ranges": [[first.isoformat(), last.isoformat()] for first, last in calendar.spans],
    }


def calendar_create(*, tenant: Tenant, actor: Actor, data: dict, clock: Clock) -> ExclusionCalendar:
    fields = clean_calendar_input(data, creating=True)
    with transaction.atomic():
        if ExclusionCalendar.objects.filter(name=fields["name"]).exists():
            raise JobValidationError({"name": ["a calendar of this name exists"]})
        calendar = ExclusionCalendar.objects.create(**fields)
        _audit(actor, "calendar_create", calendar)
    return calendar


def calendar_update(
    *, tenant: Tenant, actor: Actor, name: str, data: dict, clock: Clock
) -> ExclusionCalendar:
    fields = clean_calendar_input(data, creating=False)
    with transaction.atomic():
        calendar = _locked(name)
        renamed = fields.get("name", calendar.name) != calendar.name
        if renamed and ExclusionCalendar.objects.filter(name=fields["name"]).exists():
            raise JobValidationError({"name": ["a calendar of this name exists"]})
        for key, value in fields.items():
            setattr(calendar, key, value)
        calendar.save()
        if "dates" in fields or "ranges" in fields:
            _reschedule_jobs_of(tenant, calendar, clock.now())
        _audit(actor, "calendar_update", calendar, sorted(fields))
    return calendar


def calendar_delete(*, tenant: Tenant, actor: Actor, name: str, clock: Clock) -> None:
    with transaction.atomic():
        calendar = _locked(name)
        users = list(calendar.jobs.filter(deleted_at__isnull=True).values_list("id", flat=True))
        if users:
            listed = ", ".join(map(str, users[:20])) + (", ..." if len(users) > 20 else "")
            raise CalendarInUse(f"jobs {listed} use this calendar: remove it from them first")
        _audit(actor, "calendar_delete", calendar)
        calendar.delete()


def _locked(name: str) -> ExclusionCalendar:
    calendar = ExclusionCalendar.objects.select_for_update().filter(name=name).first()
    if calendar is None:
        raise CalendarNotFound(name)
    return calendar


def _reschedule_jobs_of(tenant: Tenant, calendar: ExclusionCalendar, now: datetime) -> None:
    """The calendar's dates changed: each job using it keeps the slots it has not had
    planned yet (`cursor_after_calendar_change`), and its prepared runs follow (kept where
    unchanged, removed otherwise). Parked jobs are left out: their stored schedule cannot
    be computed (one of them would fail the whole change), and the edit or resume that
    un-parks one has it planned with its calendars as they are then."""
    jobs = Job.objects.select_for_update().filter(
        calendars=calendar, deleted_at__isnull=True, fault_code=""
    )
    for job in jobs:
        values = [calendar_value(c.name, c.dates, c.ranges) for c in job.calendars.all()]
        first = first_slot_after(job, now, values)
        job.next_run_at = cursor_after_calendar_change(job.next_run_at, first)
        job.completed_at = (job.completed_at or now) if job.next_run_at is None else None
        save_and_index(tenant, job)
        schedule_changed.send(sender=Job, job=job, now=now)


def _audit(actor: Actor, action: str, calendar: ExclusionCalendar, fields=None) -> None:
    AuditEvent.objects.create(
        actor=actor.label,
        action=action,
        changes={"calendar": calendar.name, **({"fields": fields} if fields else {})},
    )


def calendar_list():
    return ExclusionCalendar.objects.all()


def calendar_get(*, name: str) -> ExclusionCalendar:
    calendar = ExclusionCalendar.objects.filter(name=name).first()
    if calendar is None:
        raise CalendarNotFound(name)
    return calendar
