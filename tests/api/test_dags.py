"""Dependencies and DAG runs through the API: edges and their errors, /jobs/{id}/graph,
/dag-runs and /dag-runs/{id}, deleting a job others depend on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.test import override_settings
from django_tenants.utils import schema_context

from core.clock import SystemClock
from jobs.models import Job
from runs import states
from runs.dags import dag_settle, dag_start
from runs.models import Run

from .conftest import Api


def _diamond(api: Api) -> dict[str, dict]:
    a = api.create_job(name="a", schedule=None)
    b = api.create_job(name="b", depends_on=[a["id"]])
    c = api.create_job(name="c", depends_on=[a["id"]])
    d = api.create_job(name="d", depends_on=[b["id"], c["id"]])
    return {"a": a, "b": b, "c": c, "d": d}


def test_a_job_with_upstreams_has_no_schedule(alpha_api: Api):
    a = alpha_api.create_job(name="a")
    response = alpha_api.post(
        "jobs",
        {
            "name": "b",
            "target": {"type": "task", "task": "builtin.noop"},
            "schedule": {"cron": "0 * * * *"},
            "depends_on": [a["id"]],
        },
    )
    assert response.status_code == 400
    assert "give it no schedule" in response.json()["errors"]["depends_on"][0]
    b = alpha_api.create_job(name="b", depends_on=[a["id"]])
    assert b["schedule"] is None and b["next_run_at"] is None
    response = alpha_api.patch(f"jobs/{b['id']}", {"schedule": {"cron": "0 * * * *"}})
    assert response.status_code == 400
    assert "remove them (depends_on: [])" in response.json()["errors"]["schedule"][0]
    ok = alpha_api.patch(f"jobs/{b['id']}", {"schedule": {"cron": "0 * * * *"}, "depends_on": []})
    assert ok.status_code == 200 and ok.json()["depends_on"] == []


def test_edges_to_deleted_or_other_tenants_jobs_are_refused(alpha_api: Api, beta_api: Api, live):
    gone = alpha_api.create_job(name="gone")
    assert alpha_api.delete(f"jobs/{gone['id']}").status_code == 204
    # Each schema numbers its jobs from 1: beta's job must have an id that alpha has not
    # used (not even for a deleted job: that refusal would be the deleted-job one) and will
    # not give the job posted below (its own id: a cycle), so one past those.
    theirs = beta_api.create_job(name="theirs")
    while theirs["id"] <= gone["id"] + 2:
        theirs = beta_api.create_job(name=f"theirs-{theirs['id']}")
    with schema_context(live["alpha"].schema):
        assert not Job.objects.filter(id=theirs["id"]).exists()
    for upstream in (theirs["id"], gone["id"]):
        response = alpha_api.post(
            "jobs",
            {
                "name": "x",
                "target": {"type": "task", "task": "builtin.noop"},
                "schedule": None,
                "depends_on": [upstream],
            },
        )
        assert response.status_code == 400
        assert f"no such job (or deleted): {upstream}" in response.json()["errors"]["depends_on"]


def test_a_cycle_is_refused_naming_every_job_on_it(alpha_api: Api):
    jobs = _diamond(alpha_api)
    response = alpha_api.patch(f"jobs/{jobs['a']['id']}", {"depends_on": [jobs["d"]["id"]]})
    assert response.status_code == 400
    message = response.json()["errors"]["depends_on"][0]
    assert message.startswith("would create a cycle: ")
    assert "a (" in message and "d (" in message and " -> " in message


@override_settings(SCHEDULER_DAG_MAX_NODES=3)
def test_graph_limits_are_clear_errors(alpha_api: Api):
    a = alpha_api.create_job(name="a", schedule=None)
    b = alpha_api.create_job(name="b", depends_on=[a["id"]])
    alpha_api.create_job(name="c", depends_on=[b["id"]])
    response = alpha_api.post(
        "jobs",
        {
            "name": "d",
            "target": {"type": "task", "task": "builtin.noop"},
            "schedule": None,
            "depends_on": [a["id"]],
        },
    )
    assert response.status_code == 400
    assert response.json()["errors"]["depends_on"] == [
        "the graph would have 4 jobs; the limit is 3"
    ]


@override_settings(SCHEDULER_DAG_MAX_DEPTH=1)
def test_the_depth_limit(alpha_api: Api):
    a = alpha_api.create_job(name="a", schedule=None)
    b = alpha_api.create_job(name="b", depends_on=[a["id"]])
    response = alpha_api.post(
        "jobs",
        {
            "name": "c",
            "target": {"type": "task", "task": "builtin.noop"},
            "schedule": None,
            "depends_on": [b["id"]],
        },
    )
    assert "2 dependencies deep; the limit is 1" in response.json()["errors"]["depends_on"][0]


def test_deleting_a_job_others_depend_on_is_a_409_unless_cascade_edges(alpha_api: Api):
    jobs = _diamond(alpha_api)
    response = alpha_api.delete(f"jobs/{jobs['a']['id']}")
    assert response.status_code == 409
    body = response.json()
    assert body["type"] == "urn:tickwork:problem:has-downstreams"
    assert f"b ({jobs['b']['id']}), c ({jobs['c']['id']})" in body["detail"]
    bad = alpha_api.delete(f"jobs/{jobs['a']['id']}?cascade=all")
    assert bad.status_code == 400 and "cascade" in bad.json()["errors"]
    assert alpha_api.delete(f"jobs/{jobs['a']['id']}?cascade=edges").status_code == 204
    assert alpha_api.get(f"jobs/{jobs['b']['id']}").json()["depends_on"] == []


def test_the_graph_around_a_job(alpha_api: Api, live):
    jobs = _diamond(alpha_api)
    alpha_api.create_job(name="elsewhere")
    alpha_api.post(f"jobs/{jobs['b']['id']}/run")
    graph = alpha_api.get(f"jobs/{jobs['c']['id']}/graph").json()
    ids = {name: job["id"] for name, job in jobs.items()}
    assert graph["job"] == ids["c"] and graph["truncated"] is False
    assert sorted(n["name"] for n in graph["nodes"]) == ["a", "b", "c", "d"]
    assert sorted(map(tuple, graph["edges"])) == sorted(
        [(ids["a"], ids["b"]), (ids["a"], ids["c"]), (ids["b"], ids["d"]), (ids["c"], ids["d"])]
    )
    by_name = {n["name"]: n for n in graph["nodes"]}
    assert by_name["b"]["last_run"]["status"] == states.SCHEDULED
    assert by_name["a"]["last_run"] is None and by_name["a"]["state"] == "active"
    assert alpha_api.get("jobs/999999/graph").status_code == 404


def test_dag_runs_list_and_detail(alpha_api: Api, live):
    """The DAG run started and settled as a worker does (tests/integration/test_dags.py
    drives the whole path)."""
    alpha = live["alpha"].tenant
    jobs = _diamond(alpha_api)
    run = alpha_api.post(f"jobs/{jobs['a']['id']}/run").json()
    now = SystemClock().now()
    with schema_context(alpha.schema_name):
        dag_run_id = dag_start(
            schema=alpha.schema_name,
            run_id=run["id"],
            job_id=jobs["a"]["id"],
            trigger="manual",
            started_at=now,
        )
        Run.objects.filter(id=run["id"]).update(status=states.SUCCEEDED, finished_at=now)
        dag_settle(schema=alpha.schema_name, dag_run_id=dag_run_id, now=now)
    listed = alpha_api.get("dag-runs").json()["results"]
    assert [d["id"] for d in listed] == [str(dag_run_id)]
    assert listed[0]["status"] == "running" and listed[0]["jobs"] == 4
    assert alpha_api.get("dag-runs", job=jobs["b"]["id"]).json()["results"] == listed
    assert alpha_api.get("dag-runs", job=jobs["d"]["id"]).json()["results"] == []  # not yet
    assert alpha_api.get("dag-runs", status="succeeded").json()["results"] == []
    detail = alpha_api.get(f"dag-runs/{dag_run_id}").json()
    assert detail["root_job"] == jobs["a"]["id"] and detail["root_run"] == run["id"]
    nodes = {n["name"]: n for n in detail["nodes"]}
    assert nodes["a"]["run"]["status"] == "succeeded"
    assert nodes["b"]["run"]["status"] == "scheduled"
    assert nodes["d"]["run"] is None
    assert len(detail["edges"]) == 4
    shown = alpha_api.get(f"runs/{nodes['b']['run']['id']}").json()
    assert shown["dag_run"] == str(dag_run_id) and shown["trigger"] == "dependency"
    missing = alpha_api.get("dag-runs/00000000-0000-7000-8000-000000000000")
    assert missing.status_code == 404
    assert alpha_api.get("dag-runs", status="done").status_code == 400


def _dag_run_of_a_manual_run(alpha_api: Api, alpha, job_id: int, started_at: datetime) -> str:
    run = alpha_api.post(f"jobs/{job_id}/run").json()
    with schema_context(alpha.schema_name):
        dag_run_id = dag_start(
            schema=alpha.schema_name,
            run_id=run["id"],
            job_id=job_id,
            trigger="manual",
            started_at=started_at,
        )
    return str(dag_run_id)


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_dag_runs_since_and_until_select_by_started_at(alpha_api: Api, live):
    """`since` is inclusive, `until` exclusive, both on `started_at`; an instant without an
    offset is refused."""
    alpha = live["alpha"].tenant
    jobs = _diamond(alpha_api)
    t1 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    t2 = t1 + timedelta(hours=1)
    first = _dag_run_of_a_manual_run(alpha_api, alpha, jobs["a"]["id"], t1)
    second = _dag_run_of_a_manual_run(alpha_api, alpha, jobs["a"]["id"], t2)

    def listed(**params) -> list[str]:
        response = alpha_api.get("dag-runs", **params)
        assert response.status_code == 200, response.content
        return [d["id"] for d in response.json()["results"]]

    assert listed() == [second, first]  # newest first
    assert listed(since="2026-03-01T12:00:00Z") == [second, first]
    assert listed(since="2026-03-01T12:00:01Z") == [second]
    assert listed(since="2026-03-01T13:00:00Z") == [second]
    assert listed(since="2026-03-01T13:00:01Z") == []
    assert listed(until="2026-03-01T13:00:00Z") == [first]  # exclusive
    assert listed(until="2026-03-01T12:00:00Z") == []
    assert listed(since="2026-03-01T11:00:00Z", until="2026-03-01T12:30:00Z") == [first]
    assert listed(since="2026-03-01T14:00:00+01:00", until="2026-03-01T14:00:01+01:00") == [
        second
    ]  # an offset is honoured: 13:00 UTC
    assert listed(since="2026-03-01T12:30:00Z", job=jobs["d"]["id"]) == []  # no run of d yet
    bad = alpha_api.get("dag-runs", since="2026-03-01T12:00:00")
    assert bad.status_code == 400 and "since" in bad.json()["errors"]


def test_a_dag_run_detail_shows_its_timing_and_each_runs(alpha_api: Api, live):
    alpha = live["alpha"].tenant
    a = alpha_api.create_job(name="a", schedule=None)
    b = alpha_api.create_job(name="b", depends_on=[a["id"]])
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    dag_run_id = _dag_run_of_a_manual_run(alpha_api, alpha, a["id"], t0)
    with schema_context(alpha.schema_name):
        Run.objects.filter(dag_run=dag_run_id, job_id=a["id"]).update(
            status=states.SUCCEEDED,
            started_at=t0 + timedelta(seconds=1),
            finished_at=t0 + timedelta(seconds=2),
        )
        dag_settle(schema=alpha.schema_name, dag_run_id=dag_run_id, now=t0 + timedelta(seconds=2))
    running = alpha_api.get(f"dag-runs/{dag_run_id}").json()
    with schema_context(alpha.schema_name):
        Run.objects.filter(dag_run=dag_run_id, job_id=b["id"]).update(
            status=states.SUCCEEDED,
            started_at=t0 + timedelta(seconds=3),
            finished_at=t0 + timedelta(seconds=5),
        )
        dag_settle(schema=alpha.schema_name, dag_run_id=dag_run_id, now=t0 + timedelta(seconds=5))
    assert (running["status"], _instant(running["started_at"]), running["finished_at"]) == (
        states.DAG_RUNNING,
        t0,
        None,
    )
    detail = alpha_api.get(f"dag-runs/{dag_run_id}").json()
    assert detail["status"] == states.DAG_SUCCEEDED
    assert _instant(detail["started_at"]) == t0
    assert _instant(detail["finished_at"]) == t0 + timedelta(seconds=5)
    timing = {
        n["name"]: tuple(
            _instant(n["run"][key]) for key in ("scheduled_for", "started_at", "finished_at")
        )
        for n in detail["nodes"]
    }
    assert timing["a"][1:] == (t0 + timedelta(seconds=1), t0 + timedelta(seconds=2))
    seconds = tuple(t0 + timedelta(seconds=s) for s in (2, 3, 5))
    assert timing["b"] == seconds  # due when a's end was settled
    [listed] = alpha_api.get("dag-runs").json()["results"]
    assert {k: listed[k] for k in ("started_at", "finished_at")} == {
        k: detail[k] for k in ("started_at", "finished_at")
    }
