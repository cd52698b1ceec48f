"""The portal's DAG pages and actions: a job's graph coloured by the latest DAG run that
includes each job, its edges edited through the job services, the upstream picker, the
job form's upstreams, deleting a job others depend on, and a DAG run's page. Each page:
anonymous -> login, another tenant -> 404, a member -> 200, CSRF enforced on each form."""

from __future__ import annotations

import re

import pytest
from django.test import Client, override_settings
from django_tenants.utils import schema_context

from core.clock import SystemClock
from jobs.models import AuditEvent, Dependency, Job
from runs import states
from runs.dags import dag_settle, dag_start
from runs.models import DagRun, Run
from runs.services import job_trigger

from ..integration.helpers import ACTOR, make_job
from .test_views import _form, csrf, login

CLOCK = SystemClock()
HTMX = {"HTTP_HX_REQUEST": "true"}


def _job(world, name: str, upstreams=(), **data):
    data.setdefault("schedule", None)
    return make_job(world.tenant, CLOCK, name=name, depends_on=[u.id for u in upstreams], **data)


def _start_dag_run(world, root: Job) -> tuple[DagRun, Run]:
    """A run of `root` claimed (its DAG run started) and succeeded, settled as the worker
    does: the jobs right below it get their runs (tests/integration/test_dags.py drives
    the whole path)."""
    now = CLOCK.now()
    with schema_context(world.schema):
        run, _ = job_trigger(tenant=world.tenant, actor=ACTOR, job_id=root.id, clock=CLOCK)
        dag_run_id = dag_start(
            schema=world.schema, run_id=run.id, job_id=root.id, trigger="manual", started_at=now
        )
        Run.objects.filter(id=run.id).update(
            status=states.SUCCEEDED, started_at=now, finished_at=now
        )
        dag_settle(schema=world.schema, dag_run_id=dag_run_id, now=now)
        return DagRun.objects.get(id=dag_run_id), Run.objects.get(id=run.id)


def _finish_all(world, dag_run: DagRun, rounds: int = 4) -> None:
    """Every run of the DAG run succeeds, round after round, until it has ended."""
    with schema_context(world.schema):
        for _ in range(rounds):
            now = CLOCK.now()
            Run.objects.filter(dag_run=dag_run.id).exclude(status=states.SUCCEEDED).update(
                status=states.SUCCEEDED, started_at=now, finished_at=now
            )
            dag_settle(schema=world.schema, dag_run_id=dag_run.id, now=now)
        assert DagRun.objects.get(id=dag_run.id).status == states.DAG_SUCCEEDED


@pytest.fixture
def diamond(live):
    """alpha: the diamond a -> (b, c) -> d, a DAG run from a (a succeeded, b and c
    scheduled, d not reached), and `lone`, a scheduled job in no graph; beta: a DAG run of
    its own, and more jobs than alpha, so that beta's ids do not exist in alpha."""
    alpha, beta = live["alpha"], live["beta"]
    a = _job(alpha, "dag-a")
    b = _job(alpha, "dag-b", [a])
    c = _job(alpha, "dag-c", [a])
    d = _job(alpha, "dag-d", [b, c])
    lone = _job(alpha, "lone-nightly", schedule={"cron": "30 2 * * *"})
    dag_run, root_run = _start_dag_run(alpha, a)
    beta_jobs = [_job(beta, f"beta-secret-{n}") for n in range(6)]
    beta_down = _job(beta, "beta-secret-down", [beta_jobs[-1]])
    beta_dag_run, _ = _start_dag_run(beta, beta_jobs[-1])
    yield {
        "alpha": alpha,
        "beta": beta,
        "jobs": {"a": a, "b": b, "c": c, "d": d},
        "lone": lone,
        "dag_run": dag_run,
        "root_run": root_run,
        "beta_job": beta_down,
        "beta_up": beta_jobs[-1],
        "beta_dag_run": beta_dag_run,
    }


def pages(w) -> list[str]:
    j = w["jobs"]
    return [
        f"/jobs/{j['d'].id}/dag",
        f"/jobs/{j['a'].id}/",
        f"/dag-runs/{w['dag_run'].id}/",
        f"/runs/{w['root_run'].id}/",
        f"/jobs/pick?mode=edge&for={j['d'].id}&add=dag",
        "/jobs/pick?mode=form&upstream_add=dag",
        f"/jobs/pick/chip?id={j['a'].id}",
    ]


def actions(w) -> list[tuple[str, dict]]:
    j = w["jobs"]
    return [
        (f"/jobs/{w['lone'].id}/dag", {"add": "dag-d"}),
        (f"/jobs/{j['d'].id}/dag", {"remove": str(j["b"].id)}),
        (f"/jobs/{j['a'].id}/delete", {"confirm_name": "dag-a", "cascade": "edges"}),
        ("/jobs/new", _form(name="dependent", schedule_type="none", depends_on=[j["d"].id])),
    ]


def _edges(world) -> set[tuple[int, int]]:
    with schema_context(world.schema):
        return set(Dependency.objects.values_list("upstream_id", "downstream_id"))


# --- access -----------------------------------------------------------------------------


def test_anonymous_is_sent_to_login_on_every_dag_page_and_action(diamond):
    client = Client(HTTP_HOST=diamond["alpha"].domain)
    before = _edges(diamond["alpha"])
    for url in pages(diamond):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    for url, data in actions(diamond):
        response = client.post(url, data)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    assert _edges(diamond["alpha"]) == before


def test_a_member_sees_every_dag_page(diamond):
    client = login(diamond["alpha"])
    for url in pages(diamond):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        assert b"beta-secret" not in response.content, url


def test_another_tenants_jobs_and_dag_runs_are_404s(diamond):
    client = login(diamond["alpha"])
    beta_job, beta_dag_run = diamond["beta_job"].id, diamond["beta_dag_run"].id
    with schema_context(diamond["alpha"].schema):
        assert not Job.objects.filter(id=beta_job).exists()
    assert client.get(f"/jobs/{beta_job}/dag").status_code == 404
    assert client.get(f"/dag-runs/{beta_dag_run}/").status_code == 404
    assert client.get(f"/dag-runs/{beta_dag_run}/", **HTMX).status_code == 404
    for data in ({"add": str(diamond["jobs"]["a"].id)}, {"remove": "1"}):
        assert client.post(f"/jobs/{beta_job}/dag", data).status_code == 404
    response = client.post(f"/jobs/{beta_job}/delete", {"confirm_name": "x", "cascade": "edges"})
    assert response.status_code == 404
    # an edge to another tenant's job does not exist here: refused next to the field
    refused = client.post(f"/jobs/{diamond['jobs']['d'].id}/dag", {"add": str(beta_job)})
    assert refused.status_code == 400
    assert f"no such job (or deleted): {beta_job}" in refused.content.decode()
    # the picker and the chip never show another tenant's jobs
    picked = client.get("/jobs/pick", {"mode": "form", "q": "beta-secret"}).content.decode()
    assert _picked_ids(picked) == [] and "No other live job matches" in picked
    picked = client.get("/jobs/pick", {"mode": "form", "q": str(beta_job)}).content.decode()
    assert _picked_ids(picked) == [] and "beta-secret" not in picked
    chip = client.get("/jobs/pick/chip", {"id": beta_job}).content.decode()
    assert "beta-secret" not in chip and "no longer exists" in chip
    # beta sees its own DAG run, and none of alpha's
    beta = login(diamond["beta"])
    assert beta.get(f"/dag-runs/{beta_dag_run}/").status_code == 200
    assert beta.get(f"/dag-runs/{diamond['dag_run'].id}/").status_code == 404
    theirs = beta.get(f"/jobs/{beta_job}/dag").content.decode()
    assert "beta-secret-down" in theirs and not re.search(r"dag-[abcd]\b(?!-)", theirs)
    assert _edges(diamond["beta"]) == {(diamond["beta_up"].id, beta_job)}


def test_csrf_is_enforced_on_every_dag_form(diamond):
    client = login(diamond["alpha"], enforce=True)
    before = _edges(diamond["alpha"])
    for url, data in actions(diamond):
        assert client.post(url, data).status_code == 403, url
        assert client.post(url, data, **HTMX).status_code == 403, url
    assert _edges(diamond["alpha"]) == before
    with schema_context(diamond["alpha"].schema):
        assert Job.objects.get(id=diamond["jobs"]["a"].id).deleted_at is None
        assert not Job.objects.filter(name="dependent").exists()
    # with the token (a form field, or the header htmx sends) it goes through
    ok = client.post(
        f"/jobs/{diamond['jobs']['d'].id}/dag",
        {"remove": str(diamond["jobs"]["b"].id), "csrfmiddlewaretoken": csrf(client)},
    )
    assert ok.status_code == 302
    ok = client.post(
        f"/jobs/{diamond['jobs']['d'].id}/dag",
        {"add": "dag-b"},
        HTTP_X_CSRFTOKEN=csrf(client),
        **HTMX,
    )
    assert ok.status_code == 200
    assert _edges(diamond["alpha"]) == before


# --- the graph and its colours ----------------------------------------------------------


def _node_statuses(html: str) -> dict[str, str]:
    """job id -> colour class of each node drawn."""
    return dict(re.findall(r'data-job="(\d+)" data-status="([a-z_]+)"', html))


def test_each_node_is_coloured_by_its_run_in_the_latest_dag_run_that_includes_it(diamond):
    client = login(diamond["alpha"])
    j = diamond["jobs"]
    page = client.get(f"/jobs/{j['d'].id}/dag").content.decode()
    assert page.count('class="edge"') == 4
    assert _node_statuses(page) == {
        str(j["a"].id): "succeeded",
        str(j["b"].id): "scheduled",
        str(j["c"].id): "scheduled",
        str(j["d"].id): "waiting",  # in the running DAG run, not reached yet
    }
    # status in words too (drawn, in the tooltip and the link's name), and a legend
    assert ">waiting for upstreams</text>" in page and "<title>dag-d (#" in page
    assert 'aria-label="dag-a (#' in page and "succeeded" in page
    legend = page[page.index('class="legend dag-legend"') :]
    assert "succeeded" in legend and "waiting for upstreams" in legend
    # each node links to its job; the latest DAG run and the recent ones are linked
    assert f'href="/jobs/{j["a"].id}/"' in page
    dag_run_url = f"/dag-runs/{diamond['dag_run'].id}/"
    assert page.count(dag_run_url) == 2 and "Recent DAG runs" in page
    # a job in no graph and no DAG run: grey, said so
    lone = client.get(f"/jobs/{diamond['lone'].id}/dag").content.decode()
    assert "No dependencies yet" in lone and "No DAG run has included this job yet" in lone
    # the job's page has the same panel
    detail = client.get(f"/jobs/{j['b'].id}/").content.decode()
    assert 'id="dag-panel"' in detail and _node_statuses(detail)[str(j["b"].id)] == "scheduled"
    assert dag_run_url in detail


def test_a_newer_dag_run_recolours_only_the_jobs_it_includes(diamond):
    """b's own DAG run (b -> d) is newer than a's: b and d take its colours, a and c keep
    theirs from a's DAG run."""
    alpha, j = diamond["alpha"], diamond["jobs"]
    _finish_all(alpha, diamond["dag_run"])
    newer, _ = _start_dag_run(alpha, j["b"])  # b succeeded, d scheduled
    with schema_context(alpha.schema):
        Run.objects.filter(dag_run=newer.id, job=j["d"]).update(status=states.DEAD)
        dag_settle(schema=alpha.schema, dag_run_id=newer.id, now=CLOCK.now())
    page = login(alpha).get(f"/jobs/{j['a'].id}/dag").content.decode()
    statuses = _node_statuses(page)
    assert statuses[str(j["a"].id)] == statuses[str(j["c"].id)] == "succeeded"
    assert statuses[str(j["b"].id)] == "succeeded" and statuses[str(j["d"].id)] == "dead"
    assert f"/dag-runs/{newer.id}/" not in page  # a is not in b's DAG run
    assert f"/dag-runs/{newer.id}/" in login(alpha).get(f"/jobs/{j['d'].id}/dag").content.decode()


# --- a DAG run's page -------------------------------------------------------------------


def test_the_dag_run_page_shows_every_jobs_run_and_polls_until_it_ends(diamond):
    alpha, j, dag_run = diamond["alpha"], diamond["jobs"], diamond["dag_run"]
    client = login(alpha)
    url = f"/dag-runs/{dag_run.id}/"
    page = client.get(url).content.decode()
    assert 'hx-trigger="every 1s"' in page and 'data-status="running"' in page
    assert "1 of 4 jobs ended" in page
    assert f'href="/runs/{diamond["root_run"].id}/"' in page and "a manual run" in page
    with schema_context(alpha.schema):
        runs = {r.job_id: r for r in Run.objects.filter(dag_run=dag_run.id)}
    for name in ("a", "b", "c"):
        assert f'href="/runs/{runs[j[name].id].id}/"' in page  # the table and the graph
    assert "not reached yet" in page  # d
    assert _node_statuses(page)[str(j["d"].id)] == "waiting"
    partial = client.get(url, **HTMX).content.decode()
    assert partial.lstrip().startswith('<div id="dag-run-live"') and "<html" not in partial
    _finish_all(alpha, dag_run)
    done = client.get(url, **HTMX).content.decode()
    assert "hx-trigger" not in done and 'data-status="succeeded"' in done
    assert set(_node_statuses(done).values()) == {"succeeded"} and "4 of 4 jobs ended" in done
    assert client.get("/dag-runs/00000000-0000-7000-8000-000000000000/").status_code == 404
    assert client.get("/dag-runs/not-a-uuid/").status_code == 404


def test_a_dag_run_too_large_to_draw_is_listed(diamond, monkeypatch):
    from portal import dag_views

    monkeypatch.setattr(dag_views, "DRAW_LIMIT", 3)
    page = login(diamond["alpha"]).get(f"/dag-runs/{diamond['dag_run'].id}/").content.decode()
    assert "More than 3 jobs: too many to draw here" in page and "<svg" not in page
    assert page.count('<tr data-job="') == 4


def test_a_run_links_to_its_dag_run(diamond):
    alpha, j = diamond["alpha"], diamond["jobs"]
    client = login(alpha)
    root = client.get(f"/runs/{diamond['root_run'].id}/").content.decode()
    assert f"/dag-runs/{diamond['dag_run'].id}/" in root and "started by this run" in root
    with schema_context(alpha.schema):
        b_run = Run.objects.get(dag_run=diamond["dag_run"].id, job=j["b"])
    below = client.get(f"/runs/{b_run.id}/", **HTMX).content.decode()
    assert f"/dag-runs/{diamond['dag_run'].id}/" in below and "started by a run of dag-a" in below
    with schema_context(alpha.schema):
        alone, _ = job_trigger(
            tenant=alpha.tenant, actor=ACTOR, job_id=diamond["lone"].id, clock=CLOCK
        )
    assert "/dag-runs/" not in client.get(f"/runs/{alone.id}/").content.decode()


# --- editing edges ----------------------------------------------------------------------


def test_edges_are_added_and_removed_through_the_job_services(diamond):
    alpha, j = diamond["alpha"], diamond["jobs"]
    client = login(alpha)
    e = _job(alpha, "dag-e")
    added = client.post(f"/jobs/{e.id}/dag", {"add": "dag-d"}, follow=True).content.decode()
    assert "Added “dag-d” upstream of “dag-e”." in added
    by_id = client.post(f"/jobs/{e.id}/dag", {"add": f"#{j['c'].id}", "next": f"/jobs/{e.id}/"})
    assert by_id.status_code == 302 and by_id["Location"] == f"/jobs/{e.id}/"
    assert {(j["d"].id, e.id), (j["c"].id, e.id)} <= _edges(alpha)
    removed = client.post(f"/jobs/{e.id}/dag", {"remove": str(j["c"].id)}, follow=True)
    assert "Removed the edge from “dag-c”." in removed.content.decode()
    assert (j["c"].id, e.id) not in _edges(alpha)
    with schema_context(alpha.schema):
        event = AuditEvent.objects.filter(job_id=e.id, action="update").order_by("-id").first()
        assert event.changes["diff"]["depends_on"] == [[j["c"].id, j["d"].id], [j["d"].id]]
        assert event.actor == f"user:{alpha.admin_user}"
    # under htmx the answer is the panel alone, redrawn
    panel = client.post(f"/jobs/{e.id}/dag", {"add": "dag-b"}, **HTMX)
    html = panel.content.decode()
    assert panel.status_code == 200 and html.lstrip().startswith('<div id="dag-panel"')
    assert "Added “dag-b”" in html and f'data-edge="{j["b"].id}-{e.id}"' in html


def test_edge_errors_are_shown_by_the_field_and_keep_what_was_typed(diamond):
    alpha, j = diamond["alpha"], diamond["jobs"]
    client = login(alpha)
    before = _edges(alpha)
    cases = [
        (j["a"].id, "no-such-job", "no job is named “no-such-job”"),
        (j["a"].id, "dag-d", "would create a cycle: "),
        (j["d"].id, "dag-b", "is already upstream of “dag-d”"),
        (diamond["lone"].id, "dag-a", "a job with upstreams runs when they succeed"),
    ]
    for job_id, typed, error in cases:
        response = client.post(f"/jobs/{job_id}/dag", {"add": typed})
        html = response.content.decode()
        assert response.status_code == 400, typed
        assert error in html and 'id="edge-add-error"' in html, typed
        assert f'value="{typed}"' in html, typed  # nothing typed is lost
        partial = client.post(f"/jobs/{job_id}/dag", {"add": typed}, **HTMX)
        assert partial.status_code == 400 and error in partial.content.decode()
        assert "<html" not in partial.content.decode()
    cycle = client.post(f"/jobs/{j['a'].id}/dag", {"add": "dag-d"}).content.decode()
    assert "dag-a (" in cycle and "dag-d (" in cycle and " -&gt; " in cycle
    lone = client.post(f"/jobs/{diamond['lone'].id}/dag", {"add": "dag-a"}).content.decode()
    assert "(edit the job and choose Schedule “None: runs after its upstreams”)" in lone
    assert "schedule: null" not in lone
    assert _edges(alpha) == before


@override_settings(SCHEDULER_DAG_MAX_NODES=4)
def test_the_graph_limits_are_errors_by_the_field(diamond):
    alpha = diamond["alpha"]
    e = _job(alpha, "dag-e")
    response = login(alpha).post(f"/jobs/{e.id}/dag", {"add": "dag-d"})
    assert response.status_code == 400
    assert "the graph would have 5 jobs; the limit is 4" in response.content.decode()


# --- the upstream picker and the job form -----------------------------------------------


def _picked_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r"#(\d+)\)? ?(?:as an upstream|to the upstream)", html)]


def test_the_picker_finds_jobs_by_name_or_id_and_leaves_out_what_cannot_be_added(diamond):
    alpha, j = diamond["alpha"], diamond["jobs"]
    client = login(alpha)
    found = client.get("/jobs/pick", {"mode": "form", "upstream_add": "12, dag-"}).content
    assert _picked_ids(found.decode()) == [j[n].id for n in "abcd"]
    by_id = client.get("/jobs/pick", {"mode": "form", "q": f"#{j['c'].id}"}).content.decode()
    assert _picked_ids(by_id) == [j["c"].id]
    # edge mode for b: b itself and its upstream a are left out; d is below b (a cycle)
    edge = client.get("/jobs/pick", {"mode": "edge", "for": j["b"].id, "add": "dag"}).content
    html = edge.decode()
    assert _picked_ids(html) == [j["c"].id]
    assert "downstream of this job: an edge from it would make a cycle" in html
    assert f'name="add" value="{j["c"].id}"' in html
    # form mode leaves out the upstreams already ticked
    ticked = client.get(
        "/jobs/pick", {"mode": "form", "q": "dag", "depends_on": [j["a"].id, j["b"].id]}
    ).content.decode()
    assert _picked_ids(ticked) == [j["c"].id, j["d"].id]
    # at most ten results (lowest ids), prefix matches first
    early = _job(alpha, "a-zz-early")
    zz = [_job(alpha, f"zz-{n:02}") for n in range(12)]
    many = _picked_ids(client.get("/jobs/pick", {"mode": "form", "q": "zz"}).content.decode())
    assert many == [job.id for job in zz[:9]] + [early.id]
    assert client.get("/jobs/pick", {"mode": "form", "q": ""}).content.strip() == b""


def test_a_picked_job_becomes_a_ticked_upstream_and_the_search_is_emptied(diamond):
    client = login(diamond["alpha"])
    a = diamond["jobs"]["a"]
    found = client.get("/jobs/pick", {"mode": "form", "upstream_add": "17, x , dag-a"}).content
    assert 'data-kept="17, x"' in found.decode()  # what the search box keeps on a pick
    chip = client.get("/jobs/pick/chip", {"id": a.id}, **HTMX).content.decode()
    assert f'name="depends_on" value="{a.id}" checked' in chip
    assert 'id="upstream-pick"' in chip and 'hx-swap-oob="true"' in chip
    assert "Added “dag-a”" in chip
    again = client.get("/jobs/pick/chip", {"id": a.id, "depends_on": a.id}).content.decode()
    assert "already an upstream" in again and 'name="depends_on"' not in again


def test_a_dependent_job_is_created_and_edited_in_the_form(diamond):
    alpha, j = diamond["alpha"], diamond["jobs"]
    client = login(alpha)
    form = client.get("/jobs/new").content.decode()
    assert "None: runs after its upstreams (or on demand)" in form
    assert 'id="upstream-search"' in form and 'hx-get="/jobs/pick?mode=form' in form
    # a schedule and upstreams: the error by the upstreams, everything kept
    data = _form(
        name="dependent",
        depends_on=[j["b"].id],
        upstream_shown=[j["b"].id, j["c"].id],
        upstream_add="dag-d",
    )
    refused = client.post("/jobs/new", data)
    html = refused.content.decode()
    assert refused.status_code == 400
    assert "a job with upstreams runs when they succeed" in html
    assert "(choose Schedule “None: runs after its upstreams”)" in html
    assert f'name="depends_on" value="{j["b"].id}" checked' in html
    assert f'name="depends_on" value="{j["c"].id}">' in html  # unticked, still listed
    assert 'value="dag-d"' in html
    created = client.post("/jobs/new", {**data, "schedule_type": "none"})
    assert created.status_code == 302
    with schema_context(alpha.schema):
        job = Job.objects.get(name="dependent")
    assert {(j["b"].id, job.id), (j["d"].id, job.id)} <= _edges(alpha)
    assert (j["c"].id, job.id) not in _edges(alpha)
    edit = client.get(f"/jobs/{job.id}/edit").content.decode()
    assert f'name="depends_on" value="{j["b"].id}" checked' in edit
    assert f'hx-get="/jobs/pick?mode=form&amp;for={job.id}"' in edit
    # untick b: the edge goes
    kept = client.post(
        f"/jobs/{job.id}/edit",
        _form(
            name="dependent",
            schedule_type="none",
            depends_on=[j["d"].id],
            upstream_shown=[j["b"].id, j["d"].id],
        ),
    )
    assert kept.status_code == 302
    assert (j["b"].id, job.id) not in _edges(alpha) and (j["d"].id, job.id) in _edges(alpha)
    unknown = client.post("/jobs/new", _form(name="x", schedule_type="none", depends_on=["abc"]))
    assert (
        unknown.status_code == 400 and "&#x27;abc&#x27; is not a job id" in unknown.content.decode()
    )


# --- deleting a job others depend on ----------------------------------------------------


def test_deleting_a_job_with_downstreams_explains_and_offers_to_remove_its_edges(diamond):
    alpha, j = diamond["alpha"], diamond["jobs"]
    client = login(alpha)
    detail = client.get(f"/jobs/{j['a'].id}/").content.decode()
    assert "2 jobs depend on this one" in detail
    refused = client.post(f"/jobs/{j['a'].id}/delete", {"confirm_name": "dag-a"})
    html = refused.content.decode()
    assert refused.status_code == 409
    assert "Other jobs depend on “dag-a”" in html and "dag-b" in html and "dag-c" in html
    assert "Delete and remove its edges" in html and 'name="cascade" value="edges"' in html
    with schema_context(alpha.schema):
        assert Job.objects.get(id=j["a"].id).deleted_at is None
    done = client.post(
        f"/jobs/{j['a'].id}/delete", {"confirm_name": "dag-a", "cascade": "edges"}, follow=True
    )
    assert "Deleted “dag-a” and its dependencies" in done.content.decode()
    with schema_context(alpha.schema):
        assert Job.objects.get(id=j["a"].id).deleted_at is not None
        event = AuditEvent.objects.get(job_id=j["a"].id, action="delete")
        assert event.changes == {"edges_removed": 2}
    assert _edges(alpha) == {(j["b"].id, j["d"].id), (j["c"].id, j["d"].id)}
    # the DAG run that a began still shows it, marked deleted
    page = client.get(f"/dag-runs/{diamond['dag_run'].id}/").content.decode()
    assert "dag-a" in page and "deleted" in page
