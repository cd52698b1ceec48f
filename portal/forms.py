"""The job form: what a person types, turned into the API's JSON shape for the job services.

The form checks only the shape of what was typed (a number is a number, the payload is
JSON); every rule about jobs lives in `jobs.validation` (called by `job_create` and
`job_update`), and its errors come back onto the fields here (`add_service_errors`).
Header values are write-only: an existing job's headers are shown with their values
replaced by KEEP, and a line still reading KEEP keeps the stored value. Secret headers
(encrypted at rest, jobs/headers.py) have their own field: a KEEP line there keeps the
sealed value without the portal ever reading it, and a plain header moved there with KEEP
becomes secret.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC
from functools import lru_cache
from typing import Any
from zoneinfo import available_timezones

from django import forms

from core.registry import task_names
from jobs.headers import is_secret, secret_names
from jobs.models import ExclusionCalendar, Job
from jobs.validation import CONCURRENCY, HTTP_METHODS, MISFIRE, PRIORITIES, RETRY_DEFAULTS

KEEP = "(unchanged)"

# jobs.validation's error keys -> the form field that shows them
FIELD_OF = {
    "schedule": "schedule_type",
    "schedule.cron": "cron",
    "schedule.timezone": "timezone",
    "schedule.interval_seconds": "interval_seconds",
    "schedule.start_at": "interval_seconds",
    "schedule.at": "run_at",
    "schedule.start": "start",
    "schedule.end": "end",
    "schedule.calendars": "calendars",
    "schedule.specs": "more_crons",
    "target": "target_type",
    "target.type": "target_type",
    "target.url": "url",
    "target.method": "method",
    "target.headers": "headers",  # secret ones included: the message names the header
    "target.task": "task",
    "retry": "max_attempts",
    "retry.max_attempts": "max_attempts",
    "retry.backoff_seconds": "backoff_seconds",
    "retry.backoff_multiplier": "backoff_multiplier",
    "retry.backoff_max_seconds": "backoff_max_seconds",
    "retry.jitter": "retry_jitter",
    "depends_on": "upstream_add",
    "non_field_errors": None,
}


@lru_cache(maxsize=1)
def time_zones() -> list[str]:
    return sorted(z for z in available_timezones() if "/" in z or z == "UTC")


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v.replace("_", " ")) for v in values]


class WriteOnlyTextarea(forms.Textarea):
    """`Name: value` lines shown back without their values (a form returned with an error
    must not print a secret that was typed); KEEP lines stay as they are."""

    def format_value(self, value: Any) -> str | None:
        lines = []
        for line in str(value or "").splitlines():
            name, sep, typed = line.partition(":")
            lines.append(line if not sep or typed.strip() == KEEP else f"{name.strip()}: ")
        return "\n".join(lines) if value else None


class IdListField(forms.Field):
    """Job ids posted as repeated values (the ticked upstreams)."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[int]:
        ids = []
        for item in value or []:
            item = str(item).strip()
            if not item.isdigit() or int(item) >= 2**63:
                raise forms.ValidationError(f"{item!r} is not a job id")
            ids.append(int(item))
        return ids


class JobForm(forms.Form):
    name = forms.CharField(max_length=200)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    schedule_type = forms.ChoiceField(
        label="Schedule",
        choices=[
            ("cron", "Cron expression"),
            ("interval", "Fixed interval"),
            ("at", "Once, at a date and time"),
            ("none", "None: runs after its upstreams (or on demand)"),
        ],
        initial="cron",
        widget=forms.RadioSelect,
        help_text="A job with upstream jobs has no schedule of its own: it runs each time "
        "they have all succeeded.",
    )
    cron = forms.CharField(
        label="Cron expression",
        required=False,
        initial="*/15 * * * *",
        help_text="minute hour day-of-month month day-of-week, a macro such as @daily, or H "
        "for a stable spread value.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    more_crons = forms.CharField(
        label="More cron expressions (optional)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "class": "mono"}),
        help_text="One a line; the job fires on all of them together. Add `| Zone` for "
        "another time zone, e.g. `0 12 * * 6 | Asia/Tokyo`.",
    )
    timezone = forms.CharField(
        label="Time zone",
        initial="UTC",
        required=False,
        widget=forms.TextInput(attrs={"list": "time-zones", "autocomplete": "off"}),
    )
    interval_seconds = forms.IntegerField(label="Every (seconds)", required=False, min_value=1)
    run_at = forms.CharField(
        label="Run once at (local date and time)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}),
        help_text="For “Once”: a wall time in the job's zone.",
    )
    start = forms.CharField(
        label="Not before (UTC)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}),
        help_text="Optional: no run before this instant.",
    )
    end = forms.CharField(
        label="Until (UTC, not included)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}),
        help_text="Optional: no run from this instant on; the job is completed once its "
        "last run is prepared.",
    )
    calendars = forms.MultipleChoiceField(
        label="Skip the dates of these calendars",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="A run on one of their dates (in the job's zone) is recorded as skipped, "
        "excluded. Calendars are made with the API (POST /api/v1/calendars).",
    )
    dst_gap = forms.ChoiceField(
        label="When a time does not exist (clocks go forward)",
        choices=[("shift", "run at the next valid time"), ("skip", "skip that run")],
        initial="shift",
    )
    dst_repeat = forms.ChoiceField(
        label="When a time happens twice (clocks go back)",
        choices=[
            ("first", "run the first time"),
            ("last", "run the second time"),
            ("both", "run both"),
        ],
        initial="first",
    )
    target_type = forms.ChoiceField(
        label="Target",
        choices=[("task", "Registered task"), ("http", "HTTP request")],
        initial="task",
        widget=forms.RadioSelect,
    )
    task = forms.ChoiceField(label="Task", required=False, choices=(), initial="builtin.noop")
    url = forms.CharField(label="URL", required=False, max_length=2048)
    method = forms.ChoiceField(label="Method", choices=_choices(HTTP_METHODS), initial="POST")
    headers = forms.CharField(
        label="Headers",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text=f"One `Name: value` per line. Values are write-only: a stored value shows as "
        f"{KEEP}; leave that to keep it.",
    )
    secret_headers = forms.CharField(
        label="Secret headers",
        required=False,
        widget=WriteOnlyTextarea(attrs={"rows": 2, "spellcheck": "false", "autocomplete": "off"}),
        help_text=f"Same format. Encrypted at rest, never shown again (type a value again "
        f"if the form comes back with an error), redacted from run records and logs: for "
        f"credentials such as Authorization. {KEEP} keeps a value.",
    )
    payload = forms.CharField(
        label="Payload (JSON object)",
        required=False,
        initial="{}",
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "mono"}),
    )
    max_attempts = forms.IntegerField(label="Attempts", initial=RETRY_DEFAULTS["max_attempts"])
    backoff_seconds = forms.FloatField(
        label="First retry after (s)", initial=RETRY_DEFAULTS["backoff_seconds"]
    )
    backoff_multiplier = forms.FloatField(
        label="Backoff multiplier", initial=RETRY_DEFAULTS["backoff_multiplier"]
    )
    backoff_max_seconds = forms.FloatField(
        label="Longest delay (s)", initial=RETRY_DEFAULTS["backoff_max_seconds"]
    )
    retry_jitter = forms.BooleanField(label="Randomise retry delays", required=False, initial=True)
    timeout_seconds = forms.IntegerField(label="Timeout (s)", initial=300)
    priority = forms.ChoiceField(choices=_choices(PRIORITIES), initial="normal")
    concurrency_policy = forms.ChoiceField(
        label="If the previous run is still going",
        choices=[
            ("allow", "allow: run alongside"),
            ("forbid", "forbid: skip this run"),
            ("queue", "queue: wait for it"),
            ("replace", "replace: cancel it"),
        ],
        initial="allow",
    )
    max_concurrent_runs = forms.IntegerField(label="Runs at once", initial=1)
    misfire_policy = forms.ChoiceField(
        label="Missed runs (scheduler down, paused)",
        choices=[
            ("run_once", "run once"),
            ("run_all", "run all"),
            ("skip", "skip"),
        ],
        initial="run_once",
    )
    misfire_grace_seconds = forms.IntegerField(label="Late by up to (s)", initial=60)
    jitter_seconds = forms.IntegerField(label="Random delay up to (s)", initial=0)
    depends_on = IdListField(label="Upstream jobs", required=False)
    upstream_add = forms.CharField(
        label="Add upstream jobs",
        required=False,
        max_length=2000,
        help_text="Search by name and pick from the list, or type ids or exact names, "
        "comma-separated.",
    )

    def __init__(self, *args: Any, job: Job | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job = job
        self.fields["task"].choices = [(name, name) for name in task_names()]
        names = ExclusionCalendar.objects.values_list("name", flat=True)
        self.fields["calendars"].choices = [(name, name) for name in names]
        assert set(dict(self.fields["concurrency_policy"].choices)) == set(CONCURRENCY)
        assert set(dict(self.fields["misfire_policy"].choices)) == set(MISFIRE)

    # --- reading what was typed ------------------------------------------------------------

    def clean_payload(self) -> dict:
        raw = (self.cleaned_data.get("payload") or "").strip() or "{}"
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError('must be a JSON object, like {"key": "value"}')
        return value

    def _stored_headers(self) -> dict[str, Any]:
        return (self.job.target or {}).get("headers") or {} if self.job else {}

    def clean_headers(self) -> dict[str, str]:
        stored = self._stored_headers()
        headers: dict[str, str] = {}
        for number, name, value in _header_lines(self.cleaned_data.get("headers")):
            if value == KEEP:
                if name not in stored:
                    raise forms.ValidationError(f"line {number}: {name} has no stored value")
                if is_secret(stored[name]):
                    raise forms.ValidationError(
                        f"line {number}: {name} is secret: keep it under Secret headers, or "
                        "type its value to make it plain"
                    )
                value = stored[name]
            headers[name] = value
        return headers

    def clean_secret_headers(self) -> dict[str, dict]:
        """In the API's shape: {"value": …, "secret": true}, or {"secret": true} to keep."""
        stored = self._stored_headers()
        headers: dict[str, dict] = {}
        for number, name, value in _header_lines(self.cleaned_data.get("secret_headers")):
            if value != KEEP:
                headers[name] = {"value": value, "secret": True}
            elif name not in stored:
                raise forms.ValidationError(f"line {number}: {name} has no stored value")
            elif is_secret(stored[name]):
                headers[name] = {"secret": True}
            else:  # a plain header moved here: it becomes secret
                headers[name] = {"value": stored[name], "secret": True}
        return headers

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        both = set(data.get("headers") or {}) & set(data.get("secret_headers") or {})
        if both:
            self.add_error("secret_headers", f"also under Headers: {', '.join(sorted(both))}")
        return data

    def clean_upstream_add(self) -> list[int]:
        raw = self.cleaned_data.get("upstream_add") or ""
        ids: list[int] = []
        for item in (part.strip() for part in raw.split(",")):
            if not item:
                continue
            if item.isdigit():
                ids.append(int(item))
                continue
            found = list(
                Job.objects.filter(name=item, deleted_at__isnull=True).values_list("id", flat=True)[
                    :2
                ]
            )
            if len(found) != 1:
                raise forms.ValidationError(
                    f"{item!r}: {'no job' if not found else 'several jobs'} with that name; "
                    "use its id"
                )
            ids.append(found[0])
        return ids

    def upstream_ids(self) -> list[int]:
        """The ticked upstreams, then those typed, each once (call after is_valid())."""
        both = [*(self.cleaned_data.get("depends_on") or []), *self.cleaned_data["upstream_add"]]
        return list(dict.fromkeys(both))

    def upstream_rows(self) -> list[dict[str, Any]]:
        """The upstream list as the form shows it: every job once listed (ticked or not,
        so that an untick survives an error), with its name."""
        if self.is_bound:
            shown = _digits(self.data.getlist("upstream_shown"))
            ticked = set(_digits(self.data.getlist("depends_on")))
            ids = list(dict.fromkeys([*shown, *ticked]))
        else:
            ids = list(self.initial.get("depends_on") or [])
            ticked = set(ids)
        names = dict(Job.objects.filter(id__in=ids).values_list("id", "name"))
        return [
            {"id": i, "name": names.get(i, f"job {i} (no such job)"), "checked": i in ticked}
            for i in ids
        ]

    def to_api(self) -> dict[str, Any]:
        """The API's JSON shape of what was typed (call after is_valid())."""
        data = self.cleaned_data
        schedule = schedule_input(data, job=self.job)
        if data["target_type"] == "http":
            target = {
                "type": "http",
                "url": data.get("url") or "",
                "method": data["method"],
                "headers": {**(data.get("headers") or {}), **(data.get("secret_headers") or {})},
            }
        else:
            target = {"type": "task", "task": data.get("task") or ""}
        return {
            "name": data["name"],
            "description": data.get("description") or "",
            "schedule": schedule,
            "target": target,
            "payload": data.get("payload") or {},
            "retry": {
                "max_attempts": data["max_attempts"],
                "backoff_seconds": data["backoff_seconds"],
                "backoff_multiplier": data["backoff_multiplier"],
                "backoff_max_seconds": data["backoff_max_seconds"],
                "jitter": bool(data.get("retry_jitter")),
            },
            "timeout_seconds": data["timeout_seconds"],
            "priority": data["priority"],
            "concurrency_policy": data["concurrency_policy"],
            "max_concurrent_runs": data["max_concurrent_runs"],
            "misfire_policy": data["misfire_policy"],
            "misfire_grace_seconds": data["misfire_grace_seconds"],
            "jitter_seconds": data["jitter_seconds"],
            "dst_gap": data["dst_gap"],
            "dst_repeat": data["dst_repeat"],
            "depends_on": self.upstream_ids(),
        }

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        for key, messages in errors.items():
            key, prefix = spec_field(key)
            messages = [prefix + m for m in messages]
            field = FIELD_OF.get(key, key)
            if field is not None and field not in self.fields:
                field = None
            for message in messages:
                self.add_error(field, portal_wording(message))


def initial_from_job(job: Job) -> dict[str, Any]:
    """The form's initial values for an existing job; header values stay hidden."""
    target = job.target or {}
    headers = target.get("headers") or {}
    upstream_ids = [link.upstream_id for link in getattr(job, "upstreams", [])]
    return {
        "name": job.name,
        "description": job.description,
        "schedule_type": job.schedule_kind,
        "cron": job.cron_expression,
        "more_crons": "\n".join(
            spec["cron"]
            if spec["timezone"] == job.timezone
            else f"{spec['cron']} | {spec['timezone']}"
            for spec in job.extra_specs or []
        ),
        "timezone": job.timezone,
        "interval_seconds": job.interval_seconds,
        "run_at": job.run_at_wall,
        "start": _utc_local(job.start_at),
        "end": _utc_local(job.end_at),
        "calendars": list(job.calendars.values_list("name", flat=True)) if job.pk else [],
        "dst_gap": job.dst_gap,
        "dst_repeat": job.dst_repeat,
        "target_type": job.target_type,
        "task": target.get("task", ""),
        "url": target.get("url", ""),
        "method": target.get("method", "POST"),
        "headers": "\n".join(f"{name}: {KEEP}" for name in headers if not is_secret(headers[name])),
        "secret_headers": "\n".join(f"{name}: {KEEP}" for name in secret_names(headers)),
        "payload": json.dumps(job.payload or {}, indent=2),
        "max_attempts": job.max_attempts,
        "backoff_seconds": job.backoff_seconds,
        "backoff_multiplier": job.backoff_multiplier,
        "backoff_max_seconds": job.backoff_max_seconds,
        "retry_jitter": job.retry_jitter,
        "timeout_seconds": job.timeout_seconds,
        "priority": job.priority,
        "concurrency_policy": job.concurrency_policy,
        "max_concurrent_runs": job.max_concurrent_runs,
        "misfire_policy": job.misfire_policy,
        "misfire_grace_seconds": job.misfire_grace_seconds,
        "jitter_seconds": job.jitter_seconds,
        "depends_on": upstream_ids,
        "upstream_add": "",
    }


def _header_lines(text: str | None) -> Iterator[tuple[int, str, str]]:
    """(line number, name, value) of each `Name: value` line."""
    for number, line in enumerate((text or "").splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise forms.ValidationError(f"line {number}: write `Name: value`")
        yield number, name.strip(), value.strip()


def schedule_input(values: Any, *, job: Job | None) -> dict | None:
    """The API's `schedule` of what the form says: from the cleaned form on a save, from
    the raw query on the live preview (the same shape, so that the preview shows what the
    save will do). `values` has .get(); `calendars` is a list."""
    kind = values.get("schedule_type") or "cron"
    zone = (values.get("timezone") or "").strip() or "UTC"
    if kind == "none":
        return None
    if kind == "interval":
        seconds = values.get("interval_seconds")
        if isinstance(seconds, str):
            seconds = int(seconds) if seconds.strip().isdigit() else seconds.strip()
        schedule: dict = {"interval_seconds": seconds}
        if job is not None and job.interval_seconds == seconds and job.anchor_at:
            schedule["start_at"] = job.anchor_at.isoformat()  # keep the phase
    elif kind == "at":
        schedule = {"at": (values.get("run_at") or "").strip(), "timezone": zone}
    else:
        main, more = (values.get("cron") or "").strip(), _more_specs(values.get("more_crons"))
        schedule = {"specs": [{"cron": main}, *more]} if more else {"cron": main}
        schedule["timezone"] = zone
    for key in ("start", "end"):
        if (values.get(key) or "").strip():
            schedule[key] = _as_instant(values.get(key).strip())
    if values.get("calendars"):
        schedule["calendars"] = list(values.get("calendars"))
    return schedule


def _more_specs(text: str | None) -> list[dict[str, str]]:
    specs = []
    for line in (text or "").splitlines():
        expression, _, zone = line.partition("|")
        if expression.strip():
            spec = {"cron": expression.strip()}
            if zone.strip():
                spec["timezone"] = zone.strip()
            specs.append(spec)
    return specs


def _as_instant(value: str) -> str:
    """A `datetime-local` value (UTC) as an instant; anything else as typed, for the
    service to refuse by its field."""
    from .common import parse_instant

    parsed = parse_instant(value)
    return parsed.isoformat().replace("+00:00", "Z") if parsed else value


def _utc_local(moment) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") if moment else ""


def spec_field(key: str) -> tuple[str, str]:
    """`schedule.specs.N.cron` -> the field that shows it and a prefix: the first spec is
    the cron expression, the others lines of "more cron expressions"."""
    parts = key.split(".")
    if len(parts) >= 3 and parts[:2] == ["schedule", "specs"] and parts[2].isdigit():
        n = int(parts[2])
        if n == 0:
            return ("schedule.timezone" if parts[-1] == "timezone" else "schedule.cron"), ""
        return "schedule.specs", f"line {n}: "
    return key, ""


def _digits(values: list[str]) -> list[int]:
    return [int(v) for v in values if v.isdigit() and int(v) < 2**63]


def portal_wording(message: str, *, in_form: bool = True) -> str:
    """A service error's API wording (`schedule: null`) said in the portal's words: on the
    job form, or on a DAG page (which edits only the edges)."""
    words = {
        "(schedule: null)": "(choose Schedule “None: runs after its upstreams”)"
        if in_form
        else "(edit the job and choose Schedule “None: runs after its upstreams”)",
        "(depends_on: [])": "(untick its upstream jobs)",
    }
    for api, portal in words.items():
        message = message.replace(api, portal)
    return message
