"""The operator console's own pages inside Django admin (public host, staff only): fleet
health, and a read-only drill-down into any tenant's jobs and runs with bulk pause/resume
for incident response. Every operator action is written to the tenant's audit log (the
job services audit with the actor `operator:<name>`)."""

from __future__ import annotations

import math
from datetime import timedelta

from django.conf import settings
from django.contrib import admin, messages
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django_tenants.utils import schema_context
from psycopg import sql

from beat.status import scheduler_status
from core.broker import queue_depths
from core.clock import SystemClock
from core.keys import leader_info_key
from core.redis import get_redis
from core.sql import table
from jobs import services as job_services
from jobs.models import Job
from jobs.selectors import job_list
from jobs.services import Actor
from jobs.validation import PRIORITIES, JobValidationError
from runs import states
from runs.models import Run
from runs.selectors import newest_runs, run_list, with_last_run
from runs.status_sql import STATUS
from tenants.models import Tenant

CLOCK = SystemClock()
PAGE = 50
BULK_LIMIT = 1000


def operator_actor(request: HttpRequest) -> Actor:
    return Actor(f"operator:{request.user.get_username()}")


def dlq_sizes(tenants: list[Tenant]) -> dict[int, int | None]:
    """Dead runs per tenant: one UNION ALL statement (the status index of each schema);
    None for a tenant whose tables cannot be read."""
    if not tenants:
        return {}
    parts = [
        sql.SQL("SELECT {tid}::bigint, count(*) FROM {runs} WHERE status = {dead}").format(
            tid=sql.Literal(t.id), runs=table(t.schema_name, "runs_run"), dead=STATUS[states.DEAD]
        )
        for t in tenants
    ]
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql.SQL(" UNION ALL ").join(parts))
            return dict(cursor.fetchall())
    except Exception:
        if len(tenants) == 1:
            return {tenants[0].id: None}
        out: dict[int, int | None] = {}
        for tenant in tenants:
            out.update(dlq_sizes([tenant]))
        return out


def fleet(now) -> dict:
    client = get_redis()
    status = scheduler_status(client, now)
    lease = settings.SCHEDULER_LEASE_SECONDS
    # Each partition's last lease renewal, from its leader key's remaining time to live.
    pipe = client.pipeline(transaction=False)
    for part in status["partitions"]:
        pipe.pttl(leader_info_key(part["partition"]))
    partitions = [
        {
            **part,
            "renewed_ago": (
                None if ttl_ms is None or ttl_ms < 0 else max(0.0, lease - ttl_ms / 1000)
            ),
        }
        for part, ttl_ms in zip(status["partitions"], pipe.execute(), strict=True)
    ]
    renewed_ago = partitions[0]["renewed_ago"]
    depths = queue_depths(client)
    tenants = list(Tenant.objects.exclude(schema_name="public").order_by("slug"))
    sizes = dlq_sizes(tenants)
    warnings = []
    if status["partition_count"] > 1 and status["partitions_led"] < status["partition_count"]:
        unled = [p["partition"] for p in status["partitions"] if p["leader"] is None]
        warnings.append(
            f"No scheduler holds the lease of partition(s) {', '.join(map(str, unled))}: their "
            f"tenants' jobs do not fire. A lease expires {lease:g} s after its leader's last "
            "renewal; start `manage.py runscheduler`."
        )
    elif status["leader"] is None:
        warnings.append(
            f"No scheduler holds the lease: nothing fires. The lease expires {lease:g} s after "
            "the leader's last renewal; start `manage.py runscheduler`."
        )
    lag = status["oldest_unfired_lag_seconds"]
    if lag is not None and lag > max(5.0, 2 * lease):
        at_quota = [
            row["tenant"]
            for row in status["tenants"]
            if not row.get("unreadable")
            and row["waiting"]
            and row["in_flight"] >= row["max_concurrency"]
        ]
        broker_full = (status.get("admission") or {}).get("room") == 0
        if at_quota or broker_full:  # waiting for admission, by design
            why = [f"{len(at_quota)} tenant(s) at their quota"] if at_quota else []
            why += ["the workers are busy (the broker is at its watermark)"] if broker_full else []
            warnings.append(f"Due work waits up to {lag:.1f} s for admission: {', '.join(why)}.")
        else:
            warnings.append(f"Due work is {lag:.1f} s late: the leader is behind or stuck.")
    if status["failing_tenants"]:
        warnings.append(f"{len(status['failing_tenants'])} tenant(s) failing; see below.")
    return {
        "status": status,
        "renewed_ago": renewed_ago,
        "partitions": partitions,
        "depths": depths,
        "depth_total": sum(depths.values()),
        "dlq": [(t, sizes.get(t.id)) for t in tenants],
        "warnings": warnings,
        "suspended": [t for t in tenants if t.suspended_at],
        "now": now,
    }


def fleet_health(request: HttpRequest) -> HttpResponse:
    context = {**admin.site.each_context(request), "title": "Fleet health", **fleet(CLOCK.now())}
    return render(request, "admin/fleet_health.html", context)


def _tenant(slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).exclude(schema_name="public").first()
    if tenant is None:
        raise Http404("no such tenant")
    return tenant


def tenant_jobs(request: HttpRequest, slug: str) -> HttpResponse:
    """A tenant's jobs, read-only (search, state, priority; keyset pages), with bulk pause
    and resume through the job services."""
    tenant = _tenant(slug)
    get = request.GET
    filters = {
        "q": get.get("q", "").strip()[:200] or None,
        "state": get.get("state") if get.get("state") in ("active", "paused", "parked") else None,
        "priority": get.get("priority") if get.get("priority") in PRIORITIES else None,
    }
    with schema_context(tenant.schema_name):
        if request.method == "POST":
            return _bulk(request, tenant)
        now = CLOCK.now()
        jobs = with_last_run(job_list(**filters), now).order_by("id")
        after = get.get("after", "")
        if after.isdigit():
            jobs = jobs.filter(id__gt=int(after))
        page = list(jobs[: PAGE + 1])
        more, page = len(page) > PAGE, page[:PAGE]
        total = job_list().count()
    query = {k: v for k, v in filters.items() if v}
    context = {
        **admin.site.each_context(request),
        "title": f"Jobs of {tenant.slug}",
        "tenant": tenant,
        "jobs": page,
        "filters": query,
        "total": total,
        "next_after": page[-1].id if more and page else None,
        "priorities": PRIORITIES,
    }
    return render(request, "admin/tenant_jobs.html", context)


def _bulk(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    action = request.POST.get("action")
    ids = [int(i) for i in request.POST.getlist("job") if i.isdigit()][:BULK_LIMIT]
    if action not in ("pause", "resume") or not ids:
        messages.error(request, "Select jobs and pause or resume.")
        return redirect(request.get_full_path())
    actor = operator_actor(request)
    reason = request.POST.get("reason", "").strip()[:500] or f"paused by {actor.label}"
    done, failed = 0, []
    for job_id in ids:
        try:
            if action == "pause":
                job_services.job_pause(
                    tenant=tenant, actor=actor, job_id=job_id, reason=reason, clock=CLOCK
                )
            else:
                job_services.job_resume(tenant=tenant, actor=actor, job_id=job_id, clock=CLOCK)
            done += 1
        except (job_services.JobNotFound, JobValidationError) as exc:
            failed.append(f"{job_id}: {exc}")
    messages.success(
        request, f"{done} job(s) of {tenant.slug} {action}d (audited as {actor.label})."
    )
    if failed:
        messages.error(request, "Not done: " + "; ".join(failed[:5]))
    return redirect(request.get_full_path())


def tenant_runs(request: HttpRequest, slug: str) -> HttpResponse:
    """A tenant's runs, newest first, read-only: filter by job, status, trigger."""
    tenant = _tenant(slug)
    get = request.GET
    filters = {
        "job_id": int(get["job"]) if get.get("job", "").isdigit() else None,
        "status": get.get("status") if get.get("status") in states.ALL else None,
        "trigger": get.get("trigger") if get.get("trigger") in Run.Trigger.values else None,
    }
    with schema_context(tenant.schema_name):
        now = CLOCK.now()
        runs = newest_runs(run_list(until=now + timedelta(days=1), **filters), PAGE)
        names = dict(Job.objects.filter(id__in={r.job_id for r in runs}).values_list("id", "name"))
        for run in runs:
            run.job_name = names.get(run.job_id, f"job {run.job_id}")
    context = {
        **admin.site.each_context(request),
        "title": f"Runs of {tenant.slug}",
        "tenant": tenant,
        "runs": runs,
        "filters": {k: v for k, v in get.items() if k in ("job", "status", "trigger") and v},
        "statuses": states.ALL,
        "triggers": Run.Trigger.values,
    }
    return render(request, "admin/tenant_runs.html", context)


def seconds(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.1f} s"
