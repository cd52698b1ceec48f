"""Job endpoints against the real database: create, list, read, update, delete, pause,
resume; their validation errors and limits."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_tenants.utils import schema_context

from jobs.models import Job
from runs.models import Run

from .conftest import TASK, Api

JOB_FIELDS = {
    "id",
    "name",
    "description",
    "schedule",
    "target",
    "payload",
    "retry",
    "timeout_seconds",
    "priority",
    "concurrency_policy",
    "max_concurrent_runs",
    "misfire_policy",
    "misfire_grace_seconds",
    "jitter_seconds",
    "dst_gap",
    "dst_repeat",
    "depends_on",
    "state",
    "paused_reason",
    "paused_at",
    "fault",
    "next_run_at",
    "last_run",
    "created_at",
    "updated_at",
}
PROBLEM = "application/problem+json"


def test_create_answers_201_with_the_job_and_its_location(alpha_api: Api):
    response = alpha_api.post(
        "jobs",
        {
            "name": "nightly",
            "target": TASK,
            "schedule": {"cron": "30 2 * * *", "timezone": "Europe/Berlin"},
        },
    )
    assert response.status_code == 201
    job = response.json()
    assert set(job) == JOB_FIELDS
    assert response["Location"].endswith(f"/api/v1/jobs/{job['id']}")
    assert job["schedule"] == {
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "description": "At 02:30 (Europe/Berlin)",
    }
    assert job["retry"] == {
        "max_attempts": 3,
        "backoff_seconds": 10.0,
        "backoff_multiplier": 2.0,
        "backoff_max_seconds": 3600.0,
        "jitter": True,
    }
    assert (job["state"], job["priority"], job["last_run"], job["depends_on"]) == (
        "active",
        "normal",
        None,
        [],
    )
    assert job["next_run_at"] is not None


def test_interval_and_on_demand_schedules_render_as_the_contract_says(alpha_api: Api):
    interval = alpha_api.create_job(schedule={"interval_seconds": 300})
    assert interval["schedule"] == {
        "interval_seconds": 300,
        "start_at": interval["schedule"]["start_at"],  # the anchor: creation time by default
        "description": "Every 5 minutes",
    }
    on_demand = alpha_api.create_job(schedule=None)
    assert (on_demand["schedule"], on_demand["next_run_at"]) == (None, None)


def test_http_target_shows_url_method_and_headers_only(alpha_api: Api):
    target = {"type": "http", "url": "https://example.com/hook", "headers": {"X-A": "1"}}
    job = alpha_api.create_job(target=target)
    assert job["target"] == {
        "type": "http",
        "url": "https://example.com/hook",
        "method": "POST",
        "headers": {"X-A": "1"},
    }


def test_a_partial_retry_keeps_the_defaults_it_leaves_out(alpha_api: Api):
    job = alpha_api.create_job(retry={"max_attempts": 5})
    assert job["retry"]["max_attempts"] == 5
    assert job["retry"]["backoff_seconds"] == 10.0


def test_invalid_job_is_a_400_problem_naming_every_field(alpha_api: Api):
    response = alpha_api.post(
        "jobs",
        {
            "name": "x" * 201,
            "schedule": {"cron": "0 25 * * *", "timezone": "Mars/Base"},
            "target": TASK,
            "payload": [],
            "retry": {"max_attempts": 0},
            "colour": "red",
        },
    )
    assert response.status_code == 400
    assert response["Content-Type"] == PROBLEM
    problem = response.json()
    assert problem["type"] == "urn:tickwork:problem:validation-error"
    assert (problem["status"], problem["title"]) == (400, "Bad Request")
    errors = problem["errors"]
    assert {"name", "payload", "retry.max_attempts", "colour"} <= set(errors)
    assert "hour" in " ".join(errors["schedule.cron"])  # says which cron field is wrong


def test_create_requires_name_target_and_a_schedule_decision(alpha_api: Api):
    problem = alpha_api.post("jobs", {}).json()
    assert {"name", "target", "schedule"} <= set(problem["errors"])


def test_a_body_that_is_not_an_object_is_a_400(alpha_api: Api):
    response = alpha_api.post("jobs", [1, 2])
    assert response.status_code == 400
    assert "non_field_errors" in response.json()["errors"]


def test_depends_on_a_cycle_is_a_400_that_names_it(alpha_api: Api):
    first = alpha_api.create_job(name="first")
    second = alpha_api.create_job(name="second", depends_on=[first["id"]])
    assert second["depends_on"] == [first["id"]]
    response = alpha_api.patch(f"jobs/{first['id']}", {"depends_on": [second["id"]]})
    assert response.status_code == 400
    assert "cycle" in response.json()["errors"]["depends_on"][0]
    assert "second" in response.json()["errors"]["depends_on"][0]


@override_settings(SCHEDULER_MAX_JOBS_PER_TENANT=1)
def test_the_job_quota_is_a_400_quota_problem(alpha_api: Api):
    alpha_api.create_job()
    response = alpha_api.post("jobs", {"name": "two", "target": TASK, "schedule": None})
    assert response.status_code == 400
    assert response.json()["type"] == "urn:tickwork:problem:quota-exceeded"


def test_list_filters_by_state_priority_and_name(alpha_api: Api):
    alpha_api.create_job(name="Daily report", priority="high")
    paused = alpha_api.create_job(name="weekly REPORT")
    alpha_api.post(f"jobs/{paused['id']}/pause")
    alpha_api.create_job(name="cleanup", priority="low")

    def names(**params) -> list[str]:
        response = alpha_api.get("jobs", **params)
        assert response.status_code == 200, response.content
        return [job["name"] for job in response.json()["results"]]

    assert names(q="report") == ["Daily report", "weekly REPORT"]
    assert names(state="paused") == ["weekly REPORT"]
    assert names(state="active", priority="low") == ["cleanup"]


def test_an_invalid_filter_is_a_400_naming_the_parameter(alpha_api: Api):
    response = alpha_api.get("jobs", state="sleeping")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["state"]


def test_list_pages_follow_next_without_repeats(alpha_api: Api):
    ids = [alpha_api.create_job(name=f"j{i}", schedule=None)["id"] for i in range(5)]
    seen, url = [], "jobs?page_size=2"
    while url:
        page = alpha_api.get(url if url.startswith("jobs") else url.split("localhost", 1)[1])
        seen += [job["id"] for job in page.json()["results"]]
        url = page.json()["next"]
    assert seen == ids
    assert alpha_api.get("jobs", cursor="garbage").json()["errors"] == {
        "cursor": ["is not a cursor this list returned"]
    }
    assert list(alpha_api.get("jobs", page_size="0").json()["errors"]) == ["page_size"]


def _add_runs(tenant, job_id: int, count: int) -> None:
    now = timezone.now()
    with schema_context(tenant.schema_name):
        Run.objects.bulk_create(
            [
                Run(
                    job_id=job_id,
                    trigger="manual",
                    scheduled_for=now - timedelta(minutes=i),
                    due_at=now,
                    status="succeeded",
                    finished_at=now,
                )
                for i in range(count)
            ]
        )


def _list_queries(api: Api) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert api.get("jobs", page_size="100").status_code == 200
    return len(queries)


def test_listing_costs_the_same_queries_for_3_or_30_jobs(alpha_api: Api, live):
    upstream = alpha_api.create_job(name="up")
    for _ in range(2):
        job = alpha_api.create_job(depends_on=[upstream["id"]])
        _add_runs(live["alpha"].tenant, job["id"], 3)
    few = _list_queries(alpha_api)
    for _ in range(27):
        job = alpha_api.create_job(depends_on=[upstream["id"]])
        _add_runs(live["alpha"].tenant, job["id"], 2)
    assert _list_queries(alpha_api) == few


def test_last_run_is_the_latest_run_due_by_now(alpha_api: Api, live):
    job = alpha_api.create_job()
    now = timezone.now()
    with schema_context(live["alpha"].schema):
        Run.objects.create(
            job_id=job["id"],
            trigger="schedule",
            status="succeeded",
            scheduled_for=now - timedelta(minutes=10),
            due_at=now,
            finished_at=now,
        )
        latest = Run.objects.create(
            job_id=job["id"],
            trigger="schedule",
            status="running",
            scheduled_for=now - timedelta(minutes=5),
            due_at=now,
        )
        Run.objects.create(
            job_id=job["id"],
            trigger="schedule",  # materialised ahead of time
            scheduled_for=now + timedelta(seconds=20),
            due_at=now,
        )
    last_run = alpha_api.get(f"jobs/{job['id']}").json()["last_run"]
    assert last_run == {"id": str(latest.id), "status": "running", "finished_at": None}


def test_unknown_job_is_a_404_problem(alpha_api: Api):
    response = alpha_api.get("jobs/4242")
    assert (response.status_code, response["Content-Type"]) == (404, PROBLEM)
    assert alpha_api.get(f"jobs/{2**63}").status_code == 404  # beyond bigint: no route


def test_patch_changes_only_the_given_fields_and_recomputes_next_run_at(alpha_api: Api):
    job = alpha_api.create_job(name="old", schedule={"cron": "0 3 * * *"})
    response = alpha_api.patch(
        f"jobs/{job['id']}", {"schedule": {"cron": "0 4 * * *"}, "priority": "high"}
    )
    assert response.status_code == 200
    changed = response.json()
    assert (changed["name"], changed["priority"]) == ("old", "high")
    assert changed["next_run_at"].endswith("04:00:00Z")
    assert changed["updated_at"] > job["updated_at"]


def test_an_invalid_patch_changes_nothing(alpha_api: Api, live):
    job = alpha_api.create_job(name="keep")
    response = alpha_api.patch(f"jobs/{job['id']}", {"name": "new", "timeout_seconds": 0})
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["timeout_seconds"]
    assert alpha_api.get(f"jobs/{job['id']}").json()["name"] == "keep"


def test_delete_is_soft_and_keeps_the_history(alpha_api: Api, live):
    job = alpha_api.create_job()
    _add_runs(live["alpha"].tenant, job["id"], 2)
    assert alpha_api.delete(f"jobs/{job['id']}").status_code == 204
    assert alpha_api.get(f"jobs/{job['id']}").status_code == 404
    assert alpha_api.delete(f"jobs/{job['id']}").status_code == 404
    assert alpha_api.get("jobs").json()["results"] == []
    assert len(alpha_api.get("runs", job=job["id"]).json()["results"]) == 2
    with schema_context(live["alpha"].schema):
        assert Job.objects.get(id=job["id"]).deleted_at is not None


def test_a_paused_job_shows_no_next_run_but_since_when_it_is_paused(alpha_api: Api):
    job = alpha_api.create_job(schedule={"cron": "*/5 * * * *"})
    assert job["next_run_at"] is not None and job["paused_at"] is None
    paused = alpha_api.post(f"jobs/{job['id']}/pause").json()
    assert (paused["state"], paused["next_run_at"]) == ("paused", None)
    assert paused["paused_at"] is not None
    listed = alpha_api.get("jobs", state="paused").json()["results"]
    assert [(j["id"], j["next_run_at"]) for j in listed] == [(job["id"], None)]
    resumed = alpha_api.post(f"jobs/{job['id']}/resume").json()
    assert resumed["state"] == "active" and resumed["paused_at"] is None
    assert resumed["next_run_at"] is not None


def test_pause_shows_the_reason_and_resume_clears_it(alpha_api: Api):
    job = alpha_api.create_job()
    paused = alpha_api.post(f"jobs/{job['id']}/pause", {"reason": "maintenance"})
    assert paused.status_code == 200
    assert (paused.json()["state"], paused.json()["paused_reason"]) == ("paused", "maintenance")
    resumed = alpha_api.post(f"jobs/{job['id']}/resume")
    assert (resumed.json()["state"], resumed.json()["paused_reason"]) == ("active", "")


def test_a_text_longer_than_its_limit_is_refused_even_if_white_space_would_trim_it(
    alpha_api: Api,
):
    """Found by the schema fuzzer: DRF counts after stripping white space, the schema's
    maxLength before."""
    job = alpha_api.create_job()
    response = alpha_api.post(f"jobs/{job['id']}/pause", {"reason": "\r" + "*" * 500})
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "reason": ["Ensure this field has no more than 500 characters."]
    }
    assert alpha_api.post(f"jobs/{job['id']}/pause", {"reason": "*" * 500}).status_code == 200


def test_pause_refuses_unknown_body_fields(alpha_api: Api):
    job = alpha_api.create_job()
    response = alpha_api.post(f"jobs/{job['id']}/pause", {"reasn": "typo"})
    assert response.status_code == 400
    assert response.json()["errors"] == {"reasn": ["unknown field"]}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://[::1]/",
        "http://10.1.2.3/",
        "http://169.254.169.254/latest/meta-data/",
        "http://169.254.10.10/",
        "http://localhost:9000/",
    ],
)
def test_an_http_target_on_a_refused_address_literal_is_refused_when_saved(alpha_api: Api, url):
    target = {"type": "http", "url": url}
    created = alpha_api.post("jobs", {"name": "internal", "schedule": None, "target": target})
    assert created.status_code == 400
    assert "which the scheduler does not call" in created.json()["errors"]["target.url"][0]
    job = alpha_api.create_job(name="fine")
    edited = alpha_api.patch(f"jobs/{job['id']}", {"target": target})
    assert edited.status_code == 400 and "target.url" in edited.json()["errors"]
    assert alpha_api.get(f"jobs/{job['id']}").json()["target"] == job["target"]


def test_an_allowed_network_may_be_saved_and_a_name_is_left_to_send_time(alpha_api: Api):
    with override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"]):
        local = {"type": "http", "url": "http://127.0.0.1:8080/hook"}
        assert (
            alpha_api.post("jobs", {"name": "l", "schedule": None, "target": local}).status_code
            == 201
        )
    named = {"type": "http", "url": "https://hooks.example.com/x"}
    assert (
        alpha_api.post("jobs", {"name": "n", "schedule": None, "target": named}).status_code == 201
    )


def test_the_fast_job_json_equals_the_declared_serializer_for_every_kind_of_job(
    alpha_api: Api, live
):
    """JobSerializer renders through `job_json` (fast); its declared fields (the schema)
    must render exactly the same for every shape a job can take."""
    from jobs.selectors import with_relation_ids
    from runs.selectors import with_last_run
    from scheduler_site.api.jobs.serializers import JobSerializer, job_json

    # Calendars outlive the tests' truncation of jobs and runs: names of this run's own.
    holidays, freeze = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("holidays", "freeze"))
    for name in (holidays, freeze):
        created = alpha_api.post("calendars", {"name": name, "dates": ["2026-12-25"]})
        assert created.status_code == 201, created.content
    http = {"type": "http", "url": "https://example.com/h", "headers": {"X-A": "1"}}
    jobs = [
        alpha_api.create_job(schedule={"cron": "H 9 * * 1-5", "timezone": "Europe/Berlin"}),
        alpha_api.create_job(
            schedule={
                "specs": [{"cron": "0 9 * * *"}, {"cron": "0 12 * * 6"}],
                "calendars": [holidays, freeze],
            },
            target=http,
            payload={"b": 1, "a": [1, 2]},
        ),
        alpha_api.create_job(
            schedule={"interval_seconds": 600, "end": "2099-01-01T00:00:00Z"},
            retry={"max_attempts": 5, "backoff_seconds": 2},
        ),
        alpha_api.create_job(schedule={"at": "2099-12-24T18:00", "timezone": "Europe/Berlin"}),
    ]
    jobs.append(alpha_api.create_job(name="downstream", depends_on=[jobs[0]["id"], jobs[2]["id"]]))
    alpha_api.post(f"jobs/{jobs[1]['id']}/pause", {"reason": "maintenance"})
    from .test_runs import make_run

    make_run(live["alpha"].tenant, jobs[0]["id"], minutes_ago=3)
    make_run(live["alpha"].tenant, jobs[2]["id"], status="running", minutes_ago=1)
    with schema_context(live["alpha"].schema):
        Job.objects.filter(id=jobs[3]["id"]).update(
            fault_code="invalid_timezone", fault_detail="gone", faulted_at=timezone.now()
        )
        rows = with_last_run(with_relation_ids(Job.objects.all()), timezone.now()).order_by("id")
        for job in rows:
            assert job_json(job) == JobSerializer().declared_representation(job), job.name
    shown = {j["id"]: j for j in alpha_api.get("jobs").json()["results"]}
    assert shown[jobs[1]["id"]]["schedule"]["calendars"] == [freeze, holidays]
    assert shown[jobs[4]["id"]]["depends_on"] == sorted([jobs[0]["id"], jobs[2]["id"]])
    assert shown[jobs[0]["id"]]["last_run"]["status"] == "succeeded"


def test_create_shows_the_job_as_a_read_would(alpha_api: Api):
    """POST /jobs renders the job it wrote without reading it back: the same as GET."""
    calendar = f"holidays-{uuid.uuid4().hex[:8]}"
    assert (
        alpha_api.post("calendars", {"name": calendar, "dates": ["2026-12-25"]}).status_code == 201
    )
    upstream = alpha_api.create_job(name="up")
    for body in (
        {
            "schedule": {"cron": "*/5 * * * *", "calendars": [calendar]},
            "payload": {"z": 1, "a": 2},
        },
        {"schedule": None, "depends_on": [upstream["id"]]},
        {"schedule": {"interval_seconds": 3600, "start_at": "2026-01-01T00:00:00+01:00"}},
    ):
        created = alpha_api.create_job(name="shown", **body)
        assert created == alpha_api.get(f"jobs/{created['id']}").json()
