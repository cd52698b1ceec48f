"""Dashboard pages for a tenant (server-rendered): its jobs and their latest runs."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.clock import SystemClock
from jobs.schedule_fields import schedule_of
from jobs.schedules import describe
from jobs.selectors import job_list
from runs.selectors import newest_runs, run_list, with_last_run

PAGE = 100


def _schedule_words(job) -> str:
    schedule = schedule_of(job)
    return describe(schedule) if schedule is not None else "on demand / dependencies"


@login_required
def home(request: HttpRequest) -> HttpResponse:
    now = SystemClock().now()
    jobs = list(with_last_run(job_list(), now).order_by("name", "id")[:PAGE])
    for job in jobs:
        job.schedule_words = _schedule_words(job)
    runs = newest_runs(run_list(until=now), 25)
    names = {job.id: job.name for job in jobs}
    for run in runs:
        run.job_name = names.get(run.job_id, f"job {run.job_id}")
    return render(request, "dashboard/home.html", {"jobs": jobs, "runs": runs, "now": now})
