"""Run endpoints against the real database: manual trigger (idempotency, throttling),
history with filters and keyset pages, cancel, replay, the DLQ and backfill."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from django.test import override_settings
from django.utils import timezone
from django_tenants.utils import schema_context

from runs.models import Attempt, Run

from .conftest import Api

RUN_FIELDS = {
    "id",
    "job",
    "job_name",
    "job_deleted",
    "trigger",
    "status",
    "scheduled_for",
    "queued_at",
    "started_at",
    "finished_at",
    "attempt",
    "attempts",
    "next_attempt_at",
    "error",
    "skip_reason",
    "dag_run",
}


def make_run(tenant, job_id: int, status: str = "succeeded", minutes_ago: int = 0, **fields):
    now = timezone.now()
    with schema_context(tenant.schema_name):
        return Run.objects.create(
            job_id=job_id,
            trigger=fields.pop("trigger", "manual"),
            status=status,
            due_at=now,
            scheduled_for=now - timedelta(minutes=minutes_ago),
            **fields,
        )


def test_trigger_answers_202_with_the_run(alpha_api: Api, live):
    job = alpha_api.create_job(payload={"from": "job"})
    response = alpha_api.post(f"jobs/{job['id']}/run", {"payload": {"from": "trigger"}})
    assert response.status_code == 202
    run = response.json()
    assert set(run) == RUN_FIELDS
    assert (run["job"], run["trigger"], run["status"], run["attempts"]) == (
        job["id"],
        "manual",
        "scheduled",
        [],
    )
    assert response["Location"].endswith(f"/api/v1/runs/{run['id']}")
    assert response["Idempotent-Replayed"] == "false"
    with schema_context(live["alpha"].schema):
        assert Run.objects.get(id=run["id"]).payload_override == {"from": "trigger"}


def test_the_same_idempotency_key_returns_the_same_run(alpha_api: Api):
    job = alpha_api.create_job()
    key = {"Idempotency-Key": "deploy-42"}
    first = alpha_api.post(f"jobs/{job['id']}/run", headers=key)
    again = alpha_api.post(f"jobs/{job['id']}/run", headers=key)
    other = alpha_api.post(f"jobs/{job['id']}/run", headers={"Idempotency-Key": "deploy-43"})
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json()["id"] == first.json()["id"] != other.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert len(alpha_api.get("runs", job=job["id"]).json()["results"]) == 2


def test_trigger_input_errors_are_400s(alpha_api: Api):
    job = alpha_api.create_job()
    path = f"jobs/{job['id']}/run"
    assert alpha_api.post(path, {"payload": [1]}).json()["errors"] == {
        "payload": ["must be a JSON object"]
    }
    assert list(alpha_api.post(path, {"payload": {"x": "y" * 70_000}}).json()["errors"]) == [
        "payload"
    ]
    assert list(alpha_api.post(path, headers={"Idempotency-Key": "k" * 201}).json()["errors"]) == [
        "Idempotency-Key"
    ]
    assert alpha_api.post(path, {"paylod": {}}).json()["errors"] == {"paylod": ["unknown field"]}
    assert alpha_api.post("jobs/999/run").status_code == 404


@override_settings(SCHEDULER_MANUAL_TRIGGERS_PER_MINUTE=2)
def test_manual_triggers_are_throttled_per_tenant(alpha_api: Api, beta_api: Api):
    job = alpha_api.create_job()
    statuses = [alpha_api.post(f"jobs/{job['id']}/run").status_code for _ in range(3)]
    assert statuses == [202, 202, 429]
    throttled = alpha_api.post(f"jobs/{job['id']}/run")
    assert throttled["Content-Type"] == "application/problem+json"
    assert 1 <= int(throttled["Retry-After"]) <= 60
    assert throttled.json()["status"] == 429
    beta_job = beta_api.create_job()
    assert beta_api.post(f"jobs/{beta_job['id']}/run").status_code == 202


def test_runs_filter_by_job_status_trigger_and_time(alpha_api: Api, live):
    tenant = live["alpha"].tenant
    one, two = alpha_api.create_job()["id"], alpha_api.create_job()["id"]
    old = make_run(tenant, one, "dead", minutes_ago=120)
    recent = make_run(tenant, one, "succeeded", minutes_ago=5, trigger="schedule")
    other = make_run(tenant, two, "succeeded", minutes_ago=1)

    def ids(**params) -> list[str]:
        response = alpha_api.get("runs", **params)
        assert response.status_code == 200, response.content
        return [run["id"] for run in response.json()["results"]]

    assert ids() == [str(other.id), str(recent.id), str(old.id)]  # newest scheduled first
    assert ids(job=one) == [str(recent.id), str(old.id)]
    assert ids(status="dead") == [str(old.id)]
    assert ids(trigger="schedule") == [str(recent.id)]
    hour_ago = (timezone.now() - timedelta(hours=1)).isoformat()
    assert ids(since=hour_ago, job=one) == [str(recent.id)]
    assert ids(until=hour_ago) == [str(old.id)]


def test_an_invalid_instant_is_a_400_naming_the_parameter(alpha_api: Api):
    for value in ("yesterday", "2026-01-01T00:00:00", "2026-13-01T00:00:00Z"):
        response = alpha_api.get("runs", since=value)
        assert response.status_code == 400
        assert list(response.json()["errors"]) == ["since"]
    # `+01:00` sent unencoded arrives as ` 01:00`: still understood.
    assert alpha_api.get("runs?until=2026-01-01T00:00:00+01:00").status_code == 200


def test_run_pages_do_not_skip_or_repeat_runs_sharing_an_instant(alpha_api: Api, live):
    tenant, now = live["alpha"].tenant, timezone.now()
    job = alpha_api.create_job()["id"]
    with schema_context(tenant.schema_name):
        created = Run.objects.bulk_create(
            [Run(job_id=job, trigger="manual", scheduled_for=now, due_at=now) for _ in range(7)]
        )
    seen, url = [], "/api/v1/runs?page_size=3"
    while url:
        page = alpha_api.get(url).json()
        seen += [run["id"] for run in page["results"]]
        url = page["next"] and page["next"].split("localhost", 1)[1]
    assert sorted(seen) == sorted(str(run.id) for run in created)
    assert len(seen) == 7


def test_a_run_shows_its_attempts_and_next_attempt(alpha_api: Api, live):
    job = alpha_api.create_job()["id"]
    run = make_run(live["alpha"].tenant, job, "retrying", attempt=2, error="boom")
    with schema_context(live["alpha"].schema):
        Attempt.objects.create(
            run=run,
            number=1,
            outcome="failed",
            worker="w1",
            started_at=timezone.now(),
            finished_at=timezone.now(),
            error="boom",
            output="HTTP 500",
        )
    body = alpha_api.get(f"runs/{run.id}").json()
    assert body["next_attempt_at"] is not None
    assert body["attempts"] == [
        {
            "number": 1,
            "outcome": "failed",
            "worker": "w1",
            "started_at": body["attempts"][0]["started_at"],
            "finished_at": body["attempts"][0]["finished_at"],
            "error": "boom",
            "output": "HTTP 500",
        }
    ]
    assert alpha_api.get(f"runs/{uuid4()}").status_code == 404
    assert alpha_api.get("runs/not-a-uuid").status_code == 404


def test_cancel_a_pending_run_and_409_for_a_finished_one(alpha_api: Api, live):
    job = alpha_api.create_job()["id"]
    pending = make_run(live["alpha"].tenant, job, "scheduled")
    done = make_run(live["alpha"].tenant, job, "succeeded")
    response = alpha_api.post(f"runs/{pending.id}/cancel")
    assert (response.status_code, response.json()["status"]) == (200, "cancelled")
    conflict = alpha_api.post(f"runs/{done.id}/cancel")
    assert conflict.status_code == 409
    assert conflict.json()["type"] == "urn:tickwork:problem:run-state-conflict"
    assert "succeeded" in conflict.json()["detail"]


def test_replay_a_dead_run_and_409_for_a_running_one(alpha_api: Api, live):
    job = alpha_api.create_job()["id"]
    dead = make_run(live["alpha"].tenant, job, "dead", attempt=3)
    running = make_run(live["alpha"].tenant, job, "running")
    response = alpha_api.post(f"runs/{dead.id}/replay")
    assert response.status_code == 202
    assert (response.json()["status"], response.json()["attempt"]) == ("retrying", 4)
    assert alpha_api.post(f"runs/{running.id}/replay").status_code == 409


def test_dlq_lists_dead_runs_newest_first_and_replays_in_bulk(alpha_api: Api, live):
    tenant = live["alpha"].tenant
    job = alpha_api.create_job()["id"]
    older = make_run(tenant, job, "dead", minutes_ago=10)
    newer = make_run(tenant, job, "dead", minutes_ago=1)
    alive = make_run(tenant, job, "succeeded")
    listed = alpha_api.get("dlq").json()["results"]
    assert [run["id"] for run in listed] == [str(newer.id), str(older.id)]
    missing = str(uuid4())
    response = alpha_api.post("dlq/replay", {"run_ids": [str(older.id), str(alive.id), missing]})
    assert response.status_code == 202
    assert response.json() == {
        "replayed": [str(older.id)],
        "not_found": [missing],
        "not_replayable": {str(alive.id): "status is succeeded, not dead"},
    }
    assert [run["id"] for run in alpha_api.get("dlq").json()["results"]] == [str(newer.id)]


def test_dlq_replay_validates_the_ids(alpha_api: Api):
    assert list(alpha_api.post("dlq/replay", {"run_ids": []}).json()["errors"]) == ["run_ids"]
    errors = alpha_api.post("dlq/replay", {"run_ids": ["nope"]}).json()["errors"]
    assert list(errors) == ["run_ids.0"]


def test_backfill_creates_one_run_per_slot_in_the_range(alpha_api: Api):
    job = alpha_api.create_job(schedule={"cron": "0 * * * *"})
    response = alpha_api.post(
        f"jobs/{job['id']}/backfill",
        {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T03:00:00Z"},
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["count"], len(body["runs"])) == (4, 4)  # 00:00, 01:00, 02:00, 03:00
    backfilled = alpha_api.get("runs", job=job["id"], trigger="backfill").json()["results"]
    assert [run["scheduled_for"] for run in backfilled][-1] == "2026-01-01T00:00:00Z"


@override_settings(SCHEDULER_MAX_BACKFILL_RUNS=5)
def test_backfill_errors_name_the_field_and_the_bound(alpha_api: Api):
    job = alpha_api.create_job(schedule={"cron": "0 * * * *"})
    path = f"jobs/{job['id']}/backfill"
    too_many = alpha_api.post(path, {"start": "2026-01-01T00:00Z", "end": "2026-01-02T00:00Z"})
    assert too_many.status_code == 400
    assert "more than 5 runs" in too_many.json()["errors"]["end"][0]
    reversed_ = alpha_api.post(path, {"start": "2026-01-02T00:00Z", "end": "2026-01-01T00:00Z"})
    assert list(reversed_.json()["errors"]) == ["end"]
    assert list(
        alpha_api.post(path, {"start": "soon", "end": "2026-01-01T00:00Z"}).json()["errors"]
    ) == ["start"]
    on_demand = alpha_api.create_job(schedule=None)
    no_schedule = alpha_api.post(
        f"jobs/{on_demand['id']}/backfill",
        {"start": "2026-01-01T00:00Z", "end": "2026-01-01T01:00Z"},
    )
    assert list(no_schedule.json()["errors"]) == ["job"]


def test_a_running_run_shows_its_attempt_in_progress(alpha_api: Api, live):
    job = alpha_api.create_job()["id"]
    run = make_run(live["alpha"].tenant, job, "running", attempt=1)
    with schema_context(live["alpha"].schema):
        from runs.models import Run

        Run.objects.filter(pk=run.pk).update(worker="w7", started_at=timezone.now())
    [attempt] = alpha_api.get(f"runs/{run.id}").json()["attempts"]
    assert (attempt["number"], attempt["outcome"], attempt["worker"]) == (1, "running", "w7")
    assert attempt["finished_at"] is None


def test_runs_of_a_deleted_job_show_its_name_marked_deleted(alpha_api: Api, live):
    job = alpha_api.create_job(name="retired-report")
    kept = alpha_api.create_job(name="still-here")
    run = make_run(live["alpha"].tenant, job["id"], minutes_ago=5)
    make_run(live["alpha"].tenant, kept["id"], minutes_ago=1)
    assert alpha_api.delete(f"jobs/{job['id']}").status_code == 204
    one = alpha_api.get(f"runs/{run.id}").json()
    assert (one["job"], one["job_name"], one["job_deleted"]) == (job["id"], "retired-report", True)
    for params in ({}, {"job": job["id"]}, {"status": "succeeded"}):
        listed = alpha_api.get("runs", **params).json()["results"]
        shown = {(r["job_name"], r["job_deleted"]) for r in listed}
        assert ("retired-report", True) in shown, params
        if not params.get("job"):
            assert ("still-here", False) in shown
