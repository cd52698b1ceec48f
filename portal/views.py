"""The tenant portal's overview and jobs list (server-rendered, htmx for the partials).

Every action goes through the services the API uses (`jobs.services`, `runs.services`);
reads go through the selectors. See docs/portal.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from jobs import services as job_services
from jobs.models import Job
from jobs.preview import fire_times
from jobs.schedule_fields import job_calendars, schedule_of
from jobs.schedules import ScheduleError, describe
from jobs.selectors import job_list
from jobs.validation import PRIORITIES, JobValidationError
from runs import states
from runs.selectors import (
    lag_percentiles,
    newest_runs,
    outcome_counts,
    recent_statuses,
    run_list,
    with_job_names,
    with_last_run,
)
from runs.services import job_trigger
from runs.usage import tenant_usage
from tenants.services import retention_days_of

from .charts import human_seconds
from .common import CLOCK, back, portal_view, services_kwargs
from .throttle import trigger_allowed

PAGE = 50
BULK_LIMIT = 1000
JOB_STATES = ("active", "paused", "parked", "completed")


def schedule_words(job: Job) -> str:
    """The schedule in words, naming its exclusion calendars (prefetched by job_list and
    job_get, so no query per job)."""
    schedule = schedule_of(job, job_calendars(job))
    return describe(schedule) if schedule is not None else "on demand / after upstream jobs"


def next_runs(job: Job, now: datetime, count: int = 10) -> list:
    """The job's next fire times after now; none while paused, parked or deleted. Not
    from its cursor: the runs the leader has already prepared (up to the lookahead and its
    extra ahead) are behind the cursor and would be left out. Slots its exclusion calendars
    skip are left out (they will not run: the ledger records them as skipped, `excluded`),
    as are `dst_gap: skip` slots."""
    schedule = schedule_of(job, job_calendars(job))
    if schedule is None or not job.schedulable:
        return []
    try:
        return fire_times(schedule, now, count)
    except (ScheduleError, OverflowError):
        return []


def run_job_names(runs: list) -> None:
    """`run.job_name` and `run.job_deleted` for a list of runs (one query)."""
    with_job_names(runs)


@portal_view
def home(request: HttpRequest) -> HttpResponse:
    """The overview: the last 24 h by outcome, fire and start lag, what is in flight."""
    now = CLOCK.now()
    since = now - timedelta(hours=24)
    counts = outcome_counts(since, now)
    lags = lag_percentiles(since, now)
    latest = newest_runs(run_list(until=now), 10)
    run_job_names(latest)
    total = sum(counts.values())
    outcomes = [
        {"status": s, "count": counts[s], "share": (counts[s] / total * 100) if total else 0}
        for s in states.ALL
        if counts[s]
    ]
    context = {
        "now": now,
        "outcomes": outcomes,
        "total": total,
        "lags": {k: human_seconds(v) if k != "runs" else v for k, v in lags.items()},
        "usage": tenant_usage(request.tenant.schema_name, now),
        "max_concurrency": request.tenant.max_concurrency,
        "weight": request.tenant.weight,
        "retention_days": retention_days_of(request.tenant),
        "jobs": {s: job_list(state=s).count() for s in JOB_STATES},
        "latest": latest,
    }
    return render(request, "portal/home.html", context)


def _filters(get) -> dict[str, str]:
    """The jobs list's filters from a query (or a bulk form's hidden fields)."""
    out = {}
    if (q := get.get("q", "").strip()[:200]) != "":
        out["q"] = q
    if get.get("state") in JOB_STATES:
        out["state"] = get["state"]
    if get.get("priority") in PRIORITIES:
        out["priority"] = get["priority"]
    if get.get("last") in (*states.ALL, "none"):
        out["last"] = get["last"]
    return out


def filtered_jobs(filters: dict[str, str], now):
    jobs = with_last_run(
        job_list(state=filters.get("state"), priority=filters.get("priority"), q=filters.get("q")),
        now,
    )
    last = filters.get("last")
    if last == "none":
        jobs = jobs.filter(last_run_status__isnull=True)
    elif last:
        jobs = jobs.filter(last_run_status=last)
    return jobs


@portal_view
def jobs_page(request: HttpRequest) -> HttpResponse:
    """Name order would need a sort of every match; id order is an index range scan from the
    cursor (`after` / `before`), so page 2,000 of 100,000 jobs costs what page 1 costs."""
    now = CLOCK.now()
    filters = _filters(request.GET)
    jobs = filtered_jobs(filters, now)
    after, before = request.GET.get("after", ""), request.GET.get("before", "")
    if before.isdigit():
        page = list(jobs.filter(id__lt=int(before)).order_by("-id")[: PAGE + 1])
        has_more_before = len(page) > PAGE
        page = list(reversed(page[:PAGE]))
        has_more_after = True
    else:
        if after.isdigit():
            jobs = jobs.filter(id__gt=int(after))
        page = list(jobs.order_by("id")[: PAGE + 1])
        has_more_after = len(page) > PAGE
        page = page[:PAGE]
        has_more_before = after.isdigit()
    strips = recent_statuses([job.id for job in page], now, 20)
    for job in page:
        job.schedule_words = schedule_words(job)
        job.next_fire_at = next(iter(next_runs(job, now, 1)), None)
        job.strip = list(reversed(strips.get(job.id, [])))
    base = urlencode(filters)
    links = {
        "next": f"?{urlencode({**filters, 'after': page[-1].id})}"
        if page and has_more_after
        else None,
        "prev": f"?{urlencode({**filters, 'before': page[0].id})}"
        if page and has_more_before
        else None,
    }
    context = {
        "jobs": page,
        "filters": filters,
        "query": base,
        "links": links,
        "states": JOB_STATES,
        "priorities": PRIORITIES,
        "statuses": states.ALL,
        "bulk_limit": BULK_LIMIT,
        "here": request.get_full_path(),
    }
    return render(request, "portal/jobs.html", context)


BULK_ACTIONS = {"pause": "Pause", "resume": "Resume", "trigger": "Run now"}


def _bulk_targets(request: HttpRequest) -> tuple[list[int], bool]:
    """The selected jobs, or the first BULK_LIMIT of all the jobs the filters match."""
    if request.POST.get("scope") == "filtered":
        clean = _filters(request.POST)
        ids = list(
            filtered_jobs(clean, CLOCK.now())
            .order_by("id")
            .values_list("id", flat=True)[: BULK_LIMIT + 1]
        )
        return ids[:BULK_LIMIT], len(ids) > BULK_LIMIT
    ids = [int(i) for i in request.POST.getlist("job") if i.isdigit()][:BULK_LIMIT]
    return ids, False


@portal_view
@require_POST
def jobs_bulk(request: HttpRequest) -> HttpResponse:
    """Pause, resume or run the selected jobs (or all the filtered ones): a confirmation
    page first, then each job through its service; the outcome is counted."""
    action = request.POST.get("action", "")
    if action not in BULK_ACTIONS:
        messages.error(request, "Choose an action for the selected jobs.")
        return back(request, reverse("dashboard:jobs"))
    ids, more = _bulk_targets(request)
    if not ids:
        messages.error(request, "No job selected.")
        return back(request, reverse("dashboard:jobs"))
    if request.POST.get("confirm") != "yes":
        names = list(
            Job.objects.filter(id__in=ids[:20]).order_by("id").values_list("name", flat=True)
        )
        return render(
            request,
            "portal/bulk_confirm.html",
            {
                "action": action,
                "label": BULK_ACTIONS[action],
                "ids": ids,
                "count": len(ids),
                "more": more,
                "names": names,
                "post": request.POST,
                "scope": request.POST.get("scope", "selected"),
                "next": request.POST.get("next", ""),
            },
        )
    done, failed, throttled = 0, [], 0
    kwargs = services_kwargs(request)
    for job_id in ids:
        try:
            if action == "pause":
                job_services.job_pause(
                    job_id=job_id, reason=request.POST.get("reason", ""), **kwargs
                )
            elif action == "resume":
                job_services.job_resume(job_id=job_id, **kwargs)
            else:
                if not trigger_allowed(request.tenant):
                    throttled = len(ids) - done - len(failed)
                    break
                job_trigger(job_id=job_id, **kwargs)
            done += 1
        except (job_services.JobNotFound, JobValidationError) as exc:
            failed.append(f"{job_id}: {exc}")
    verb = {"pause": "paused", "resume": "resumed", "trigger": "triggered"}[action]
    messages.success(request, f"{done} job{'s' if done != 1 else ''} {verb}.")
    if failed:
        messages.error(request, f"{len(failed)} not {verb}: " + "; ".join(failed[:5]))
    if throttled:
        messages.error(
            request,
            f"{throttled} not triggered: the tenant's manual-trigger limit per minute is reached.",
        )
    if more:
        messages.info(request, f"Only the first {BULK_LIMIT} matching jobs were {verb}.")
    return back(request, reverse("dashboard:jobs"))
