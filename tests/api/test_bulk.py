"""POST /jobs/bulk: up to 1,000 jobs created, paused, resumed or deleted in one request, all
or nothing, through the single actions' rules; every refusal names its item and field."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django_tenants.utils import schema_context

from core import index
from core.keys import index_key
from jobs.models import AuditEvent, Dependency, Job

from .conftest import TASK, Api, rows

PROBLEM = "application/problem+json"


def _job(n: int, **extra) -> dict:
    return {"name": f"bulk-{n}", "schedule": {"cron": "*/5 * * * *"}, "target": TASK, **extra}


def _create(api: Api, jobs: list) -> object:
    return api.post("jobs/bulk", {"action": "create", "jobs": jobs})


def test_bulk_create_makes_every_job_as_post_jobs_would_and_indexes_them(
    alpha_api: Api, live, redis_client
):
    response = _create(alpha_api, [_job(0), _job(1, priority="high"), _job(2, schedule=None)])
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["action"], body["count"]) == ("create", 3)
    assert [j["name"] for j in body["jobs"]] == ["bulk-0", "bulk-1", "bulk-2"]
    assert body["ids"] == [j["id"] for j in body["jobs"]]
    assert body["jobs"][1]["priority"] == "high" and body["jobs"][2]["next_run_at"] is None
    single = alpha_api.create_job(**_job(9))
    shown = alpha_api.get(f"jobs/{body['ids'][0]}").json()
    assert body["jobs"][0] == shown
    for key in ("schedule", "retry", "state", "target", "payload", "misfire_policy"):
        assert shown[key] == single[key], key
    tenant = live["alpha"].tenant
    indexed = {int(index.parse_member(m)[1]) for m in redis_client.zrange(index_key(), 0, -1)}
    assert set(body["ids"][:2]) <= indexed and body["ids"][2] not in indexed  # on demand
    assert rows(tenant, Job, "id", "index_dirty") == sorted(
        [(i, False) for i in [*body["ids"], single["id"]]], key=repr
    )
    with schema_context(tenant.schema_name):
        audit = AuditEvent.objects.filter(job_id__in=body["ids"]).values_list("action", "actor")
        assert sorted(audit) == [("create", f"token:{live['alpha'].token[3:11]}")] * 3


def test_one_bad_item_among_1000_creates_nothing_and_names_item_517(
    alpha_api: Api, live, redis_client
):
    jobs = [_job(n) for n in range(1000)]
    jobs[517]["schedule"] = {"cron": "61 * * * *"}
    response = _create(alpha_api, jobs)
    assert (response.status_code, response["Content-Type"]) == (400, PROBLEM)
    errors = response.json()["errors"]
    assert list(errors) == ["jobs.517.schedule.cron"]
    assert "minute" in errors["jobs.517.schedule.cron"][0]
    assert response.json()["detail"].startswith("jobs.517.schedule.cron: ")
    assert rows(live["alpha"].tenant, Job) == []
    assert redis_client.zcard(index_key()) == 0


def test_every_bad_item_is_named_with_its_field(alpha_api: Api, live):
    upstream = alpha_api.create_job(name="up")
    jobs = [_job(n) for n in range(8)]
    jobs[1]["name"] = ""
    jobs[2]["target"] = {"type": "task", "task": "no.such.task"}
    jobs[3] = "not an object"
    jobs[4]["paylod"] = {}
    jobs[5]["retry"] = {"max_attempts": 0}
    jobs[6] = {**_job(6, schedule=None), "target": {"type": "http", "url": "http://10.0.0.1/"}}
    response = _create(alpha_api, jobs)
    assert response.status_code == 400
    assert sorted(response.json()["errors"]) == [
        "jobs.1.name",
        "jobs.2.target.task",
        "jobs.3",
        "jobs.4.paylod",
        "jobs.5.retry.max_attempts",
        "jobs.6.target.url",
    ]
    # Checked with the tenant's rows: a calendar and an upstream that do not exist.
    jobs = [_job(0), _job(1), _job(2), _job(3)]
    jobs[1]["schedule"] = {"cron": "0 9 * * *", "calendars": ["no-such-calendar"]}
    jobs[3] = {**_job(3, schedule=None), "depends_on": [upstream["id"], 999_999]}
    response = _create(alpha_api, jobs)
    assert response.status_code == 400
    assert sorted(response.json()["errors"]) == ["jobs.1.schedule.calendars", "jobs.3.depends_on"]
    assert [j["id"] for j in alpha_api.get("jobs").json()["results"]] == [upstream["id"]]


def test_dependencies_on_existing_jobs_follow_the_dag_rules(alpha_api: Api, live):
    upstream = alpha_api.create_job(name="up")
    response = _create(alpha_api, [_job(0, schedule=None, depends_on=[upstream["id"]])])
    assert response.status_code == 201
    assert response.json()["jobs"][0]["depends_on"] == [upstream["id"]]
    scheduled = _create(alpha_api, [_job(1, depends_on=[upstream["id"]])])  # has a schedule
    assert list(scheduled.json()["errors"]) == ["jobs.0.depends_on"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "create", "jobs": [_job(n) for n in range(1001)]}, "jobs"),
        ({"action": "create", "jobs": []}, "jobs"),
        ({"action": "pause", "ids": list(range(1, 1002))}, "ids"),
        ({"action": "pause", "ids": []}, "ids"),
        ({"action": "pause", "ids": ["1"]}, "ids.0"),
        ({"action": "pause", "ids": [True]}, "ids.0"),
        ({"action": "resume", "ids": [1], "reason": "x"}, "reason"),
        ({"action": "create", "ids": [1]}, "ids"),
        ({"action": "archive", "ids": [1]}, "action"),
        ({"ids": [1]}, "action"),
    ],
)
def test_the_request_shape_and_the_1000_limit_are_400s_naming_the_field(
    alpha_api: Api, body, field
):
    response = alpha_api.post("jobs/bulk", body)
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]


def test_the_quota_counts_the_whole_batch(alpha_api: Api, live):
    alpha_api.create_job()
    with override_settings(SCHEDULER_MAX_JOBS_PER_TENANT=3):
        response = _create(alpha_api, [_job(n) for n in range(3)])
        assert response.status_code == 400
        assert response.json()["type"] == "urn:tickwork:problem:quota-exceeded"
        assert "3 more would pass its limit of 3" in response.json()["detail"]
        assert _create(alpha_api, [_job(n) for n in range(2)]).status_code == 201
    assert len(rows(live["alpha"].tenant, Job, "id")) == 3


def test_bulk_pause_and_resume(alpha_api: Api, live):
    ids = _create(alpha_api, [_job(n) for n in range(3)]).json()["ids"]
    paused = alpha_api.post("jobs/bulk", {"action": "pause", "ids": ids, "reason": "migration"})
    assert paused.status_code == 200, paused.content
    assert [
        (j["id"], j["state"], j["paused_reason"], j["next_run_at"]) for j in paused.json()["jobs"]
    ] == [(i, "paused", "migration", None) for i in ids]
    resumed = alpha_api.post("jobs/bulk", {"action": "resume", "ids": list(reversed(ids))})
    assert resumed.status_code == 200
    assert [j["id"] for j in resumed.json()["jobs"]] == list(reversed(ids))
    assert {j["state"] for j in resumed.json()["jobs"]} == {"active"}
    with schema_context(live["alpha"].schema):
        actions = sorted(AuditEvent.objects.filter(job_id__in=ids).values_list("action", flat=True))
    assert actions == ["create"] * 3 + ["pause"] * 3 + ["resume"] * 3


def test_bulk_pause_with_an_unknown_or_repeated_id_pauses_nothing(alpha_api: Api, live):
    ids = _create(alpha_api, [_job(n) for n in range(3)]).json()["ids"]
    response = alpha_api.post("jobs/bulk", {"action": "pause", "ids": [*ids, 999_999, ids[0]]})
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "ids.3": ["no such job in this tenant (or it was deleted)"],
        "ids.4": ["the same job as ids.0"],
    }
    assert {j["state"] for j in alpha_api.get("jobs").json()["results"]} == {"active"}


def test_bulk_delete_takes_a_whole_dag_and_refuses_to_orphan_others(alpha_api: Api, live):
    top = alpha_api.create_job(name="top")
    middle = alpha_api.create_job(name="middle", depends_on=[top["id"]])
    bottom = alpha_api.create_job(name="bottom", depends_on=[middle["id"]])
    alpha_api.create_job(name="outside", depends_on=[top["id"]])
    dag = [top["id"], middle["id"], bottom["id"]]
    refused = alpha_api.post("jobs/bulk", {"action": "delete", "ids": dag})
    assert refused.status_code == 400
    assert list(refused.json()["errors"]) == ["ids.0"]
    assert "outside" in refused.json()["errors"]["ids.0"][0]
    assert len(alpha_api.get("jobs").json()["results"]) == 4
    deleted = alpha_api.post("jobs/bulk", {"action": "delete", "ids": dag, "cascade": "edges"})
    assert deleted.status_code == 200
    assert deleted.json() == {"action": "delete", "count": 3, "ids": dag}
    assert [j["name"] for j in alpha_api.get("jobs").json()["results"]] == ["outside"]
    assert rows(live["alpha"].tenant, Dependency, "upstream_id", "downstream_id") == []
    # A whole DAG alone needs no cascade: downstreams go first.
    a = alpha_api.create_job(name="a")
    b = alpha_api.create_job(name="b", depends_on=[a["id"]])
    alone = alpha_api.post("jobs/bulk", {"action": "delete", "ids": [a["id"], b["id"]]})
    assert alone.status_code == 200, alone.content


def test_one_tenant_cannot_touch_anothers_jobs_in_bulk(alpha_api: Api, beta_api: Api, live):
    # Ids are numbered per tenant: beta's last ones do not exist in alpha.
    beta_ids = _create(beta_api, [_job(n) for n in range(4)]).json()["ids"]
    alpha_ids = _create(alpha_api, [_job(n) for n in range(2)]).json()["ids"]
    assert not set(beta_ids[2:]) & set(alpha_ids)
    for action in ("pause", "resume", "delete"):
        response = alpha_api.post("jobs/bulk", {"action": action, "ids": beta_ids[2:]})
        assert response.status_code == 400
        assert set(response.json()["errors"]) == {"ids.0", "ids.1"}
    # Alpha's own jobs with the ids of beta's first two: paused in alpha only.
    own = alpha_api.post("jobs/bulk", {"action": "pause", "ids": alpha_ids})
    assert own.status_code == 200
    assert {j["state"] for j in beta_api.get("jobs").json()["results"]} == {"active"}
    assert [j["id"] for j in beta_api.get("jobs").json()["results"]] == beta_ids
    assert [j["id"] for j in alpha_api.get("jobs").json()["results"]] == alpha_ids
    assert len(rows(live["beta"].tenant, Job, "id")) == 4
