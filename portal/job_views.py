"""A job's pages: the form (with the live schedule preview), the detail page, its actions
and the DAG around it."""

from __future__ import annotations

import json

from django.contrib import messages
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from jobs import services as job_services
from jobs.models import AuditEvent, Job
from jobs.preview import PREVIEW_SEED, Preview, schedule_preview
from jobs.preview import preview as full_preview
from jobs.schedules import ScheduleError
from jobs.validation import JobValidationError
from runs import states
from runs.models import Run
from runs.selectors import recent_durations, run_list, skipped_by_reason
from runs.services import BackfillError, job_backfill, job_trigger

from .charts import duration_chart, human_seconds
from .common import (
    CLOCK,
    back,
    decode_cursor,
    encode_cursor,
    job_or_404,
    parse_instant,
    portal_view,
    services_kwargs,
)
from .dag_views import dag_panel
from .forms import JobForm, initial_from_job, schedule_input, spec_field, time_zones
from .throttle import trigger_allowed
from .views import next_runs, schedule_words

HISTORY_PAGE = 25


# --- the form and its live preview ----------------------------------------------------------


def _form_page(request: HttpRequest, form: JobForm, job: Job | None) -> HttpResponse:
    return render(
        request,
        "portal/job_form.html",
        {"form": form, "job": job, "time_zones": time_zones()},
        status=400 if form.is_bound and form.errors else 200,
    )


def _save(request: HttpRequest, form: JobForm, job: Job | None) -> HttpResponse:
    if not form.is_valid():
        return _form_page(request, form, job)
    kwargs = services_kwargs(request)
    try:
        if job is None:
            saved = job_services.job_create(data=form.to_api(), **kwargs)
        else:
            saved = job_services.job_update(job_id=job.id, data=form.to_api(), **kwargs)
    except JobValidationError as exc:
        form.add_service_errors(exc.errors)
        return _form_page(request, form, job)
    except job_services.QuotaExceeded as exc:
        form.add_error(None, str(exc))
        return _form_page(request, form, job)
    messages.success(request, f"Job “{saved.name}” {'created' if job is None else 'saved'}.")
    return redirect("dashboard:job", job_id=saved.id)


@portal_view
def job_new(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _save(request, JobForm(request.POST), None)
    return _form_page(request, JobForm(), None)


@portal_view
def job_edit(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_or_404(job_id)
    if request.method == "POST":
        return _save(request, JobForm(request.POST, job=job), job)
    return _form_page(request, JobForm(initial=initial_from_job(job), job=job), job)


@portal_view
def schedule_preview_partial(request: HttpRequest) -> HttpResponse:
    """The form's live preview (htmx, as you type): the schedule in words and its next six
    fire times in its zone with DST days flagged, or why it is invalid."""
    get = request.GET
    kind = get.get("schedule_type", "cron")
    context: dict = {"kind": kind}
    seed = PREVIEW_SEED
    if get.get("job", "").isdigit():
        seed = (
            Job.objects.filter(id=int(get["job"])).values_list("hash_seed", flat=True).first()
            or PREVIEW_SEED
        )
    if kind != "none" and _needs_full_preview(get):
        context.update(_full_preview(get, seed))
        return render(request, "portal/_preview.html", context)
    try:
        if kind == "cron":
            preview = schedule_preview(
                cron=get.get("cron", ""),
                timezone=get.get("timezone") or "UTC",
                start=CLOCK.now(),
                count=6,
                dst_gap=get.get("dst_gap") if get.get("dst_gap") in ("shift", "skip") else "shift",
                dst_repeat=get.get("dst_repeat")
                if get.get("dst_repeat") in ("first", "last", "both")
                else "first",
                seed=seed,
            )
        elif kind == "interval":
            raw = get.get("interval_seconds", "")
            if not raw.strip().isdigit():
                raise ScheduleError("enter the interval as a whole number of seconds", "interval")
            preview = schedule_preview(interval_seconds=int(raw), start=CLOCK.now(), count=6)
        else:
            preview = None
        context["preview"] = preview
    except ScheduleError as exc:
        field = {"timezone": "time zone", "interval_seconds": "interval"}.get(exc.field or "", "")
        context["error"] = f"{field + ': ' if field else ''}{exc}"
    except OverflowError:
        context["error"] = "no fire time before the year 9999"
    return render(request, "portal/_preview.html", context)


PREVIEW_FIELDS = ("schedule_type", "cron", "more_crons", "timezone", "interval_seconds", "run_at")
PREVIEW_WHERE = {
    "schedule.cron": "",
    "schedule.timezone": "time zone",
    "schedule.interval_seconds": "interval",
    "schedule.at": "once at",
    "schedule.start": "not before",
    "schedule.end": "until",
    "schedule.calendars": "calendars",
    "schedule.specs": "more cron expressions",
    "dst_repeat": "DST",
    "dst_gap": "DST",
}


def _needs_full_preview(get) -> bool:
    """A one-off, several cron expressions, bounds or calendars: the preview of the whole
    schedule (jobs.preview.preview, the API's POST /schedule/preview)."""
    extras = any(get.get(k, "").strip() for k in ("more_crons", "start", "end"))
    return get.get("schedule_type") == "at" or extras or bool(get.getlist("calendars"))


def _full_preview(get, seed: str) -> dict:
    values = {k: get.get(k, "") for k in (*PREVIEW_FIELDS, "start", "end")}
    values["calendars"] = get.getlist("calendars")
    gap = get.get("dst_gap") if get.get("dst_gap") in ("shift", "skip") else "shift"
    repeat = (
        get.get("dst_repeat") if get.get("dst_repeat") in ("first", "last", "both") else "first"
    )
    try:
        result = full_preview(
            schedule_input(values, job=None),
            now=CLOCK.now(),
            count=6,
            dst_gap=gap,
            dst_repeat=repeat,
            seed=seed,
        )
    except JobValidationError as exc:
        return {
            "error": "; ".join(_preview_error(k, m) for k, ms in exc.errors.items() for m in ms)
        }
    except (ScheduleError, OverflowError) as exc:
        return {"error": str(exc) or "no fire time before the year 9999"}
    return {"preview": Preview(result["description"], result["timezone"], result["slots"])}


def _preview_error(key: str, message: str) -> str:
    key, prefix = spec_field(key)
    where = PREVIEW_WHERE.get(key, key)
    if prefix:
        where = f"{where}, {prefix.rstrip(': ')}"
    return f"{where + ': ' if where else ''}{message}"


# --- the detail page ------------------------------------------------------------------------


def _history(request: HttpRequest, job: Job) -> dict:
    get = request.GET
    filters = {
        "status": get.get("status") if get.get("status") in states.ALL else None,
        "trigger": get.get("trigger") if get.get("trigger") in Run.Trigger.values else None,
        "since": parse_instant(get.get("since", "")),
        "until": parse_instant(get.get("until", "")),
    }
    runs = run_list(job_id=job.id, **filters).order_by("-scheduled_for", "-id")
    cursor = decode_cursor(get.get("cursor", "")) if get.get("cursor") else None
    if cursor and len(cursor) == 2:
        at = parse_instant(str(cursor[0]))
        if at is not None:
            runs = runs.filter(Q(scheduled_for__lt=at) | Q(scheduled_for=at, id__lt=cursor[1]))
    page = list(runs.prefetch_related("attempts")[: HISTORY_PAGE + 1])
    more = len(page) > HISTORY_PAGE
    page = page[:HISTORY_PAGE]
    for run in page:
        if run.started_at and run.finished_at:
            run.duration = human_seconds((run.finished_at - run.started_at).total_seconds())
    query = {k: v for k, v in get.items() if k in ("status", "trigger", "since", "until") and v}
    next_url = None
    if more and page:
        from urllib.parse import urlencode

        last = page[-1]
        next_url = "?" + urlencode(
            {**query, "cursor": encode_cursor([last.scheduled_for, str(last.id)])}
        )
    return {"runs": page, "next": next_url, "query": query, "first": not get.get("cursor")}


def _audit_rows(job: Job) -> list[dict]:
    rows = []
    for event in AuditEvent.objects.filter(job_id=job.id).order_by("-at", "-id")[:30]:
        diff = (event.changes or {}).get("diff") or {}
        rows.append(
            {
                "event": event,
                "diff": [
                    {"field": k, "old": _show(v[0]), "new": _show(v[1])} for k, v in diff.items()
                ],
                "other": {k: v for k, v in (event.changes or {}).items() if k not in ("diff",)},
            }
        )
    return rows


def _show(value) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return "—" if value in (None, "") else str(value)


@portal_view
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_or_404(job_id)
    job.schedule_words = schedule_words(job)
    upcoming = next_runs(job, CLOCK.now())
    job.next_fire_at = upcoming[0] if upcoming else None
    history = _history(request, job)
    if request.htmx and request.htmx.target == "history":
        return render(request, "portal/_history.html", {"job": job, "history": history})
    durations = recent_durations(job.id)
    chart = duration_chart(durations)
    context = {
        **dag_panel(request, job),
        "job": job,
        "next_runs": upcoming,
        "history": history,
        "chart": chart,
        "p50": human_seconds(chart.p50),
        "p95": human_seconds(chart.p95),
        "skips": skipped_by_reason(job.id),
        "audit": _audit_rows(job),
        "target_shown": _target_shown(job),
        "statuses": states.ALL,
        "triggers": Run.Trigger.values,
        "payload_json": json.dumps(job.payload or {}, indent=2),
        "here": request.get_full_path(),
    }
    return render(request, "portal/job_detail.html", context)


def _target_shown(job: Job) -> dict:
    target = dict(job.target or {})
    if target.get("headers"):
        target["headers"] = {name: "•••" for name in target["headers"]}
    return target


# --- actions --------------------------------------------------------------------------------


def _act(request: HttpRequest, job_id: int, call, done: str) -> HttpResponse:
    default = reverse("dashboard:job", kwargs={"job_id": job_id})
    try:
        job = call()
    except job_services.JobNotFound:
        raise Http404("no such job") from None
    except JobValidationError as exc:
        messages.error(request, "; ".join(m for ms in exc.errors.values() for m in ms))
        return back(request, default)
    messages.success(request, done.format(name=getattr(job, "name", "")))
    return back(request, default)


@portal_view
@require_POST
def job_pause(request: HttpRequest, job_id: int) -> HttpResponse:
    reason = request.POST.get("reason", "").strip()[:500]
    return _act(
        request,
        job_id,
        lambda: job_services.job_pause(job_id=job_id, reason=reason, **services_kwargs(request)),
        "Paused “{name}”.",
    )


@portal_view
@require_POST
def job_resume(request: HttpRequest, job_id: int) -> HttpResponse:
    return _act(
        request,
        job_id,
        lambda: job_services.job_resume(job_id=job_id, **services_kwargs(request)),
        "Resumed “{name}”.",
    )


@portal_view
@require_POST
def job_run(request: HttpRequest, job_id: int) -> HttpResponse:
    """Run now, with an optional payload for this run only; then the run's page, which
    follows it to its end."""
    default = reverse("dashboard:job", kwargs={"job_id": job_id})
    raw = request.POST.get("payload", "").strip()
    payload = None
    if raw:
        try:
            payload = json.loads(raw)
        except ValueError as exc:
            messages.error(request, f"Payload: not valid JSON: {exc}")
            return back(request, default)
    if not trigger_allowed(request.tenant):
        messages.error(request, "The tenant's manual-trigger limit per minute is reached.")
        return back(request, default)
    try:
        run, _ = job_trigger(job_id=job_id, payload=payload, **services_kwargs(request))
    except job_services.JobNotFound:
        raise Http404("no such job") from None
    except JobValidationError as exc:
        messages.error(request, "; ".join(f"{k}: {', '.join(v)}" for k, v in exc.errors.items()))
        return back(request, default)
    if request.POST.get("stay"):
        messages.success(request, "Run started.")
        return back(request, default)
    return redirect("dashboard:run", run_id=run.id)


@portal_view
@require_POST
def job_backfill_view(request: HttpRequest, job_id: int) -> HttpResponse:
    default = reverse("dashboard:job", kwargs={"job_id": job_id})
    start, end = (
        parse_instant(request.POST.get("start", "")),
        parse_instant(request.POST.get("end", "")),
    )
    if start is None or end is None:
        messages.error(request, "Backfill: give a start and an end (UTC).")
        return back(request, default)
    try:
        runs = job_backfill(job_id=job_id, start=start, end=end, **services_kwargs(request))
    except job_services.JobNotFound:
        raise Http404("no such job") from None
    except BackfillError as exc:
        messages.error(request, f"Backfill {exc.field}: {exc}")
        return back(request, default)
    messages.success(request, f"Backfill: {len(runs)} run{'s' if len(runs) != 1 else ''} created.")
    return back(request, default)


@portal_view
@require_POST
def job_delete(request: HttpRequest, job_id: int) -> HttpResponse:
    """Delete after the name is typed. A job that others depend on is refused by the
    service (`HasDownstreams`): the answer names them and offers to delete the job with
    its edges (`cascade_edges`), each downstream then running after its other upstreams
    or on demand."""
    job = job_or_404(job_id)
    if request.POST.get("confirm_name", "").strip() != job.name:
        messages.error(request, "To delete the job, type its name exactly.")
        return redirect("dashboard:job", job_id=job_id)
    cascade = request.POST.get("cascade") == "edges"
    try:
        job_services.job_delete(job_id=job_id, cascade_edges=cascade, **services_kwargs(request))
    except job_services.JobNotFound:
        raise Http404("no such job") from None
    except job_services.HasDownstreams as exc:
        context = {
            "job": job,
            "downstreams": exc.downstreams[:50],
            "more": len(exc.downstreams) - 50,
        }
        return render(request, "portal/job_delete_confirm.html", context, status=409)
    edges = " and its dependencies" if cascade else ""
    messages.success(request, f"Deleted “{job.name}”{edges}; its run history stays.")
    return redirect("dashboard:jobs")
