"""The cross-tenant matrix: every endpoint called with beta's token on alpha's objects is
refused (404 on the public host, where beta's token selects beta's schema; 401 on alpha's
own domain), and nothing of alpha changes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_tenants.utils import schema_context

from jobs.models import AuditEvent, Dependency, Job
from runs.models import Attempt, DagRun, Run

from .conftest import TASK, Api, rows

# (method, path template, body); {job}, {run}, {dead} and {dag} are alpha's objects.
OBJECT_CALLS = [
    ("GET", "jobs/{job}", None),
    ("GET", "jobs/{job}/graph", None),
    ("PATCH", "jobs/{job}", {"name": "stolen"}),
    ("DELETE", "jobs/{job}", None),
    ("POST", "jobs/{job}/pause", {"reason": "x"}),
    ("POST", "jobs/{job}/resume", None),
    ("POST", "jobs/{job}/run", {"payload": {}}),
    ("POST", "jobs/{job}/backfill", {"start": "2026-01-01T00:00Z", "end": "2026-01-01T02:00Z"}),
    ("GET", "runs/{run}", None),
    ("POST", "runs/{run}/cancel", None),
    ("POST", "runs/{run}/replay", None),
    ("GET", "dag-runs/{dag}", None),
]
LIST_CALLS = [
    ("GET", "jobs", None),
    ("GET", "runs?job={job}", None),
    ("GET", "dlq", None),
    ("GET", "dag-runs?job={job}", None),
    ("GET", "dag-runs", None),
    ("POST", "jobs", {"name": "dep", "target": TASK, "depends_on": ["{job}"]}),
    ("POST", "dlq/replay", {"run_ids": ["{run}", "{dead}"]}),
    ("GET", "schedule/preview?cron=*/5+*+*+*+*", None),
]
ALL_CALLS = OBJECT_CALLS + LIST_CALLS


@pytest.fixture
def alpha_objects(live, alpha_api: Api) -> dict[str, str]:
    upstream = alpha_api.create_job(name="upstream", schedule={"cron": "0 * * * *"})
    job = alpha_api.create_job(name="secret", depends_on=[upstream["id"]])
    now = timezone.now()
    with schema_context(live["alpha"].schema):
        run = Run.objects.create(
            job_id=job["id"], trigger="manual", status="scheduled", scheduled_for=now, due_at=now
        )
        dead = Run.objects.create(
            job_id=job["id"],
            trigger="manual",
            status="dead",
            due_at=now,
            scheduled_for=now - timedelta(minutes=1),
        )
        Attempt.objects.create(run=dead, number=1, outcome="failed", started_at=now)
        root = Run.objects.create(
            job_id=upstream["id"],
            trigger="manual",
            status="succeeded",
            due_at=now,
            scheduled_for=now - timedelta(minutes=2),
        )
        dag = DagRun.objects.create(
            root_job_id=upstream["id"],
            root_run=root.id,
            trigger="manual",
            nodes=[upstream["id"], job["id"]],
            edges=[[upstream["id"], job["id"]]],
            started_at=now,
        )
        Run.objects.filter(id__in=[root.id, run.id]).update(dag_run=dag.id)
    # What beta must not see is there for alpha's own token
    assert alpha_api.get(f"dag-runs/{dag.id}").status_code == 200
    assert [d["id"] for d in alpha_api.get("dag-runs", job=job["id"]).json()["results"]] == [
        str(dag.id)
    ]
    assert len(alpha_api.get(f"jobs/{job['id']}/graph").json()["nodes"]) == 2
    return {"job": str(job["id"]), "run": str(run.id), "dead": str(dead.id), "dag": str(dag.id)}


def _fill(value, objects: dict[str, str]):
    if isinstance(value, str):
        filled = value.format(**objects)
        return int(filled) if value == "{job}" else filled
    if isinstance(value, list):
        return [_fill(item, objects) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, objects) for key, item in value.items()}
    return value


def _snapshot(tenant) -> dict:
    return {
        model.__name__: rows(tenant, model)
        for model in (Job, Dependency, Run, Attempt, AuditEvent, DagRun)
    }


def _call(api: Api, call: tuple, objects: dict[str, str]):
    method, path, body = call
    return api.call(method, _fill(path, objects), _fill(body, objects))


def _leaked(response, objects: dict[str, str]) -> bool:
    text = response.content.decode()
    return any(objects[key] in text for key in ("run", "dead", "dag")) or '"secret"' in text


@pytest.mark.parametrize("call", OBJECT_CALLS, ids=lambda c: f"{c[0]} {c[1]}")
def test_betas_token_gets_404_for_alphas_objects_on_the_public_host(
    live, alpha_objects, beta_api: Api, call
):
    before = _snapshot(live["alpha"].tenant)
    response = _call(beta_api, call, alpha_objects)
    assert response.status_code == 404, response.content
    assert _snapshot(live["alpha"].tenant) == before


@pytest.mark.parametrize("call", LIST_CALLS, ids=lambda c: f"{c[0]} {c[1]}")
def test_betas_lists_and_bulk_actions_never_show_or_touch_alphas(
    live, alpha_objects, beta_api: Api, call
):
    before = _snapshot(live["alpha"].tenant)
    response = _call(beta_api, call, alpha_objects)
    assert response.status_code in (200, 202, 400), response.content
    if call[1] == "dlq/replay":  # the ids echo the request, and are all unknown
        assert response.json() == {
            "replayed": [],
            "not_replayable": {},
            "not_found": [alpha_objects["run"], alpha_objects["dead"]],
        }
    else:
        assert not _leaked(response, alpha_objects)
    if call[1] == "jobs" and call[0] == "POST":
        assert "no such job" in response.json()["errors"]["depends_on"][0]
    assert _snapshot(live["alpha"].tenant) == before


@pytest.mark.parametrize("call", ALL_CALLS, ids=lambda c: f"{c[0]} {c[1]}")
def test_betas_token_on_alphas_domain_is_a_401_for_everything(live, alpha_objects, call):
    before = _snapshot(live["alpha"].tenant)
    response = _call(Api(live["beta"].token, host=live["alpha"].domain), call, alpha_objects)
    assert response.status_code == 401, response.content
    assert _snapshot(live["alpha"].tenant) == before
