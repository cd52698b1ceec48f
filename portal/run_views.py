"""A run's page (polling itself while the run goes on) and the dead-letter queue."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from jobs.models import Job
from runs import states
from runs.models import DagRun
from runs.selectors import dlq_list, run_get
from runs.services import (
    RunNotFound,
    RunStateError,
    dlq_discard,
    dlq_replay,
    run_cancel,
    run_discard,
    run_replay,
)

from .charts import human_seconds
from .common import back, decode_cursor, encode_cursor, parse_instant, portal_view, services_kwargs
from .views import run_job_names

DLQ_PAGE = 50
MAX_BULK = 1000


def _run_or_404(run_id: Any):
    try:
        run = run_get(run_id=run_id)
    except RunNotFound:
        raise Http404("no such run") from None
    run_job_names([run])
    return run


def _run_context(run) -> dict:
    job = Job.objects.filter(id=run.job_id).first()
    target: dict = {}
    payload: Any = None
    if job is not None:
        target = dict(job.target or {})
        if target.get("headers"):
            target["headers"] = {name: "•••" for name in target["headers"]}  # write-only
        payload = run.payload_override if run.payload_override is not None else job.payload
    attempts = run.attempt_history()
    for attempt in attempts:
        if attempt.started_at and attempt.finished_at:
            attempt.duration = human_seconds(
                (attempt.finished_at - attempt.started_at).total_seconds()
            )
    dag_run, root_name = _dag_run_of(run)
    return {
        "run": run,
        "job": job,
        "dag_run": dag_run,
        "dag_root_name": root_name,
        "attempts": attempts,
        "terminal": run.status in states.TERMINAL,
        "cancellable": run.status in states.CANCELLABLE,
        "replayable": run.status in states.REPLAYABLE,
        "discardable": run.status in states.DISCARDABLE,
        "target_json": json.dumps(target, indent=2, sort_keys=True),
        "payload_json": json.dumps(payload, indent=2, sort_keys=True),
        "payload_overridden": run.payload_override is not None,
    }


def _dag_run_of(run) -> tuple[DagRun | None, str]:
    """The DAG run the run belongs to (set at a root's first claim) and its root's name."""
    dag_run = DagRun.objects.filter(id=run.dag_run).first() if run.dag_run else None
    if dag_run is None:
        return None, ""
    name = Job.objects.filter(id=dag_run.root_job_id).values_list("name", flat=True).first()
    return dag_run, name or f"job {dag_run.root_job_id}"


@portal_view
def run_detail(request: HttpRequest, run_id) -> HttpResponse:
    run = _run_or_404(run_id)
    template = "portal/_run_live.html" if request.htmx else "portal/run_detail.html"
    return render(request, template, _run_context(run))


def _run_action(request: HttpRequest, run_id, call, done: str) -> HttpResponse:
    default = reverse("dashboard:run", kwargs={"run_id": run_id})
    try:
        call(run_id=run_id, **services_kwargs(request))
    except RunNotFound:
        raise Http404("no such run") from None
    except RunStateError as exc:
        messages.error(request, str(exc).capitalize() + ".")
        return back(request, default)
    messages.success(request, done)
    return back(request, default)


@portal_view
@require_POST
def run_cancel_view(request: HttpRequest, run_id) -> HttpResponse:
    return _run_action(request, run_id, run_cancel, "Run cancelled.")


@portal_view
@require_POST
def run_replay_view(request: HttpRequest, run_id) -> HttpResponse:
    return _run_action(request, run_id, run_replay, "Run replayed: a new attempt is on its way.")


@portal_view
@require_POST
def run_discard_view(request: HttpRequest, run_id) -> HttpResponse:
    return _run_action(request, run_id, run_discard, "Run discarded from the dead-letter queue.")


@portal_view
def dlq(request: HttpRequest) -> HttpResponse:
    runs = dlq_list().order_by("-scheduled_for", "-id")
    job = request.GET.get("job", "")
    if job.isdigit():
        runs = runs.filter(job_id=int(job))
    cursor = decode_cursor(request.GET.get("cursor", "")) if request.GET.get("cursor") else None
    if cursor and len(cursor) == 2 and (at := parse_instant(str(cursor[0]))) is not None:
        runs = runs.filter(Q(scheduled_for__lt=at) | Q(scheduled_for=at, id__lt=cursor[1]))
    page = list(runs.prefetch_related("attempts")[: DLQ_PAGE + 1])
    more, page = len(page) > DLQ_PAGE, page[:DLQ_PAGE]
    run_job_names(page)
    for run in page:
        failed = [a for a in run.attempts.all() if a.error]
        run.last_error = (failed[-1].error if failed else run.error) or "—"
    next_url = None
    if more and page:
        extra = f"&job={job}" if job.isdigit() else ""
        next_url = f"?cursor={encode_cursor([page[-1].scheduled_for, str(page[-1].id)])}{extra}"
    return render(
        request,
        "portal/dlq.html",
        {"runs": page, "next": next_url, "job": job, "here": request.get_full_path()},
    )


@portal_view
@require_POST
def dlq_bulk(request: HttpRequest) -> HttpResponse:
    """Replay or discard the selected dead runs (each independently; the outcome counted)."""
    ids = [i for i in request.POST.getlist("run")][:MAX_BULK]
    valid = []
    for raw in ids:
        try:
            from uuid import UUID

            valid.append(str(UUID(raw)))
        except ValueError:
            continue
    action = request.POST.get("action")
    if not valid or action not in ("replay", "discard"):
        messages.error(request, "Select dead runs and an action.")
        return back(request, reverse("dashboard:dlq"))
    kwargs = services_kwargs(request)
    if action == "replay":
        result = dlq_replay(run_ids=valid, **kwargs)
        done, refused = result.replayed, result.not_replayable
    else:
        result = dlq_discard(run_ids=valid, **kwargs)
        done, refused = result.discarded, result.not_discardable
    verb = "replayed" if action == "replay" else "discarded"
    messages.success(request, f"{len(done)} run{'s' if len(done) != 1 else ''} {verb}.")
    if refused or result.not_found:
        reasons = [*refused.values(), *(["not found"] * len(result.not_found))]
        messages.error(request, f"{len(reasons)} not {verb}: {'; '.join(sorted(set(reasons)))}.")
    return back(request, reverse("dashboard:dlq"))
