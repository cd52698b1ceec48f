"""The DAG pages: the graph around a job (each node coloured by its run in the latest DAG
run that includes it), its upstream edges edited through `job_update` (the API's rules:
cycles, graph limits, no schedule for a job with upstreams), the upstream picker, and a
DAG run's own page, which follows a running DAG run to its end."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from jobs import services as job_services
from jobs.models import Job
from jobs.selectors import downstream_among, job_component, job_search
from jobs.validation import JobValidationError
from runs import states
from runs.dag_selectors import (
    DagRunNotFound,
    JobInDagRun,
    dag_run_get,
    dag_runs_including,
    latest_dag_run_per_job,
)
from runs.models import DagRun, Run

from .charts import DagLayout, Node, dag_layout, human_seconds
from .common import back, job_or_404, portal_view, services_kwargs
from .forms import portal_wording

DAG_LIMIT = 80  # nodes drawn around a job (the nearest ones)
DRAW_LIMIT = 200  # a DAG run with more jobs is listed, not drawn
RECENT_DAG_RUNS = 10
PICK_LIMIT = 10

# --- node colours ---------------------------------------------------------------------------


def run_colour(run: Run | None) -> tuple[str, str]:
    """(colour class, words) of a job's run in a DAG run; None: not reached yet."""
    if run is None:
        return "waiting", "waiting for upstreams"
    if run.status == states.SKIPPED and run.skip_reason:
        return states.SKIPPED, f"{states.SKIPPED}: {run.skip_reason.replace('_', ' ')}"
    return run.status, run.status


def _when(run: Run | None) -> str:
    if run is None:
        return ""
    if run.finished_at:
        return f", finished {run.finished_at:%Y-%m-%d %H:%M:%S} UTC"
    if run.started_at:
        return f", started {run.started_at:%Y-%m-%d %H:%M:%S} UTC"
    return ""


def _job_node(job_id: int, name: str, found: JobInDagRun | None, focus: bool) -> Node:
    if found is None:
        colour, words = "none", "in no DAG run yet"
        title = f"{name} (#{job_id}): in no DAG run yet"
    else:
        colour, words = run_colour(found.run)
        title = (
            f"{name} (#{job_id}): {words}{_when(found.run)}, in the DAG run started "
            f"{found.dag_run.started_at:%Y-%m-%d %H:%M:%S} UTC"
        )
    href = reverse("dashboard:job", kwargs={"job_id": job_id})
    return Node(job_id, name, colour, words, href=href, title=title, focus=focus)


def job_graph_layout(job: Job) -> tuple[DagLayout, bool]:
    """The laid-out graph around `job` (at most DAG_LIMIT jobs) and whether more are
    connected."""
    ids, edges, truncated = job_component(job_id=job.id, limit=DAG_LIMIT)
    names = dict(Job.objects.filter(id__in=ids, deleted_at__isnull=True).values_list("id", "name"))
    latest = latest_dag_run_per_job(sorted(names))
    nodes = {i: _job_node(i, name, latest.get(i), i == job.id) for i, name in names.items()}
    return dag_layout(nodes, edges), truncated


def dag_run_rows(dag_runs: list[DagRun]) -> list[dict[str, Any]]:
    """DAG runs for a table: the root job's name and the duration added."""
    names = dict(
        Job.objects.filter(id__in={d.root_job_id for d in dag_runs}).values_list("id", "name")
    )
    return [
        {
            "dag_run": d,
            "root_name": names.get(d.root_job_id, f"job {d.root_job_id}"),
            "duration": _duration(d.started_at, d.finished_at),
        }
        for d in dag_runs
    ]


def _duration(start, end) -> str:
    return human_seconds((end - start).total_seconds()) if start and end else "—"


# --- the panel: graph, latest DAG run, edges ------------------------------------------------


def dag_panel(
    request: HttpRequest, job: Job, *, value: str = "", errors: list[str] | None = None
) -> dict[str, Any]:
    """What the DAG panel shows (on the job's page and on its DAG page)."""
    layout, truncated = job_graph_layout(job)
    recent = dag_runs_including(job_id=job.id, limit=RECENT_DAG_RUNS)
    upstream_ids = [link.upstream_id for link in getattr(job, "upstreams", [])]
    return {
        "job": job,
        "dag": layout,
        "truncated": truncated,
        "dag_limit": DAG_LIMIT,
        "recent_dag_runs": dag_run_rows(recent),
        "latest_dag_run": recent[0] if recent else None,
        "upstream": list(
            Job.objects.filter(id__in=upstream_ids).order_by("name").values("id", "name")
        ),
        "downstream": list(
            Job.objects.filter(upstream_links__upstream=job, deleted_at__isnull=True)
            .order_by("name")
            .values("id", "name")
        ),
        "has_schedule": job.schedule_kind != Job.ScheduleKind.NONE,
        "edge_value": value,
        "edge_errors": errors or [],
        "here": request.POST.get("next") or request.get_full_path(),
    }


def _resolve(value: str) -> tuple[int | None, str]:
    """A job id (`12`, `#12`) or an exact name -> (id, "") or (None, why not)."""
    value = value.strip()
    digits = value.removeprefix("#")
    if digits.isdigit():
        return int(digits), ""
    if not value:
        return None, "type a job's name or id, or pick one from the search"
    found = list(
        Job.objects.filter(name=value, deleted_at__isnull=True).values_list("id", flat=True)[:2]
    )
    if not found:
        return None, f"no job is named “{value}”"
    if len(found) > 1:
        return None, f"several jobs are named “{value}”: give its id"
    return found[0], ""


def _edit_edges(request: HttpRequest, job: Job) -> tuple[list[str], str]:
    """Apply the POSTed add or remove through job_update: (errors, what was done)."""
    upstream = [link.upstream_id for link in getattr(job, "upstreams", [])]
    remove = request.POST.get("remove", "")
    if remove.isdigit():
        if int(remove) not in upstream:
            return [f"job {remove} is not upstream of “{job.name}”"], ""
        wanted = [u for u in upstream if u != int(remove)]
        name = Job.objects.filter(id=int(remove)).values_list("name", flat=True).first()
        done = f"Removed the edge from “{name or remove}”."
    else:
        ref, why = _resolve(request.POST.get("add", ""))
        if ref is None:
            return [why], ""
        if ref in upstream:
            return [f"job {ref} is already upstream of “{job.name}”"], ""
        wanted = [*upstream, ref]
        name = Job.objects.filter(id=ref).values_list("name", flat=True).first()
        done = f"Added “{name or ref}” upstream of “{job.name}”."
    try:
        job_services.job_update(
            job_id=job.id, data={"depends_on": wanted}, **services_kwargs(request)
        )
    except job_services.JobNotFound:
        raise Http404("no such job") from None
    except JobValidationError as exc:
        return [portal_wording(m, in_form=False) for ms in exc.errors.values() for m in ms], ""
    return [], done


@portal_view
def job_dag(request: HttpRequest, job_id: int) -> HttpResponse:
    """The DAG around a job with its recent DAG runs; POST adds (`add`: id or exact name)
    or removes (`remove`: id) one of its upstream edges. Under htmx the answer is the panel
    alone; otherwise a redirect back (done) or the page with the error by its field."""
    job = job_or_404(job_id)
    if request.method != "POST":
        return render(request, "portal/job_dag.html", dag_panel(request, job))
    errors, done = _edit_edges(request, job)
    typed = request.POST.get("add", "") if errors else ""
    if request.htmx:
        context = dag_panel(request, job_or_404(job_id), value=typed, errors=errors)
        context["done"] = done
        return render(request, "portal/_dag_panel.html", context, status=400 if errors else 200)
    if errors:
        context = dag_panel(request, job, value=typed, errors=errors)
        return render(request, "portal/job_dag.html", context, status=400)
    messages.success(request, done)
    return back(request, reverse("dashboard:job-dag", kwargs={"job_id": job_id}))


# --- the upstream picker --------------------------------------------------------------------


def _ids(values: list[str]) -> set[int]:
    return {int(v) for v in values if v.isdigit() and int(v) < 2**63}


@portal_view
def job_pick(request: HttpRequest) -> HttpResponse:
    """Search-as-you-type for an upstream job (a tenant may have 100,000): up to
    PICK_LIMIT live jobs by id or name. `mode=edge`: each result is a button that adds the
    edge to job `for`; `mode=form`: a button that adds a ticked upstream to the job form.
    The query is `q`, or the input that asks (`add`; the last comma-separated part of
    `upstream_add`)."""
    get = request.GET
    typed = get.get("upstream_add", "").split(",")
    q = (get.get("q") or get.get("add") or typed[-1]).strip()[:200]
    kept = ", ".join(part.strip() for part in typed[:-1] if part.strip())
    mode = "edge" if get.get("mode") == "edge" else "form"
    for_id = int(get["for"]) if get.get("for", "").isdigit() else None
    exclude = _ids(get.getlist("depends_on"))
    if for_id is not None:
        exclude.add(for_id)
        if mode == "edge":
            exclude |= set(
                Job.objects.filter(downstream_links__downstream_id=for_id).values_list(
                    "id", flat=True
                )
            )
    found = job_search(q=q, exclude=exclude, limit=PICK_LIMIT) if q else []
    below = downstream_among(job_id=for_id, among=[j.id for j in found]) if for_id else set()
    for job in found:
        job.makes_cycle = job.id in below
    context = {
        "found": found,
        "q": q,
        "kept": kept,
        "mode": mode,
        "for_id": for_id,
        "next": get.get("next", ""),
    }
    return render(request, "portal/_job_pick.html", context)


@portal_view
def job_pick_chip(request: HttpRequest) -> HttpResponse:
    """The job form's picker chose a job: a ticked upstream for the form's list, unless
    it is ticked already."""
    raw = request.GET.get("id", "")
    job = None
    if raw.isdigit() and int(raw) < 2**63:
        job = Job.objects.filter(id=int(raw), deleted_at__isnull=True).only("id", "name").first()
    chosen = _ids(request.GET.getlist("depends_on"))
    context = {"picked": job, "already": job is not None and job.id in chosen}
    return render(request, "portal/_pick_chip.html", context)


# --- a DAG run's page -----------------------------------------------------------------------


def _dag_run_context(dag_run_id: Any) -> dict[str, Any]:
    try:
        detail = dag_run_get(dag_run_id=dag_run_id)
    except DagRunNotFound:
        raise Http404("no such DAG run") from None
    dag_run = detail.dag_run
    nodes, rows = {}, []
    for node in detail.nodes:
        colour, words = (
            ("deleted", "job deleted")
            if node.deleted and node.run is None
            else (run_colour(node.run))
        )
        href = (
            reverse("dashboard:run", kwargs={"run_id": node.run.id})
            if node.run is not None
            else reverse("dashboard:job", kwargs={"job_id": node.job_id})
        )
        nodes[node.job_id] = Node(
            node.job_id,
            node.name,
            colour,
            words,
            href=href,
            title=f"{node.name} (#{node.job_id}): {words}{_when(node.run)}",
            focus=node.job_id == dag_run.root_job_id,
            deleted=node.deleted,
        )
        run = node.run
        rows.append(
            {
                "node": node,
                "colour": colour,
                "words": words,
                "duration": _duration(run.started_at, run.finished_at) if run else "—",
            }
        )
    root_name = next((n.name for n in detail.nodes if n.job_id == dag_run.root_job_id), "")
    drawn = len(nodes) <= DRAW_LIMIT
    return {
        "dag_run": dag_run,
        "dag": dag_layout(nodes, detail.edges) if drawn else None,
        "draw_limit": DRAW_LIMIT,
        "rows": rows,
        "root_name": root_name or f"job {dag_run.root_job_id}",
        "duration": _duration(dag_run.started_at, dag_run.finished_at),
        "terminal": dag_run.status != states.DAG_RUNNING,
        "ended": sum(1 for r in rows if r["node"].run and r["node"].run.status in states.TERMINAL),
    }


@portal_view
def dag_run_detail(request: HttpRequest, dag_run_id: Any) -> HttpResponse:
    """A DAG run: its graph coloured by its runs and every job's run; while it runs, the
    live part reloads itself every second (htmx), and a finished one carries no polling."""
    context = _dag_run_context(dag_run_id)
    template = "portal/_dag_run_live.html" if request.htmx else "portal/dag_run.html"
    return render(request, template, context)
