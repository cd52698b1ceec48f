"""The alerts API: channels CRUD (header values write-only, URLs SSRF-checked at save),
the incidents and notifications logs, tenant isolation and problem+json 400s naming the
field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.test import override_settings
from django_tenants.utils import schema_context

from alerts import states
from alerts.models import AlertChannel, DeliveryAttempt, Incident, Notification

from .conftest import Api

WEBHOOK = {"name": "on-call", "kind": "webhook", "url": "https://hooks.example.com/tw"}


def _create(api: Api, **data) -> dict:
    response = api.post("alerts/channels", {**WEBHOOK, **data})
    assert response.status_code == 201, response.content
    return response.json()


def _problem(response, status: int = 400) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    return response.json()


def test_channels_need_a_token(live):
    assert _problem(Api(None).get("alerts/channels"), 401)["status"] == 401
    assert Api(None).post("alerts/channels", WEBHOOK).status_code == 401


def test_a_channel_is_created_read_listed_changed_and_deleted(alpha_api):
    job = alpha_api.create_job(name="nightly")
    created = _create(
        alpha_api,
        headers={"Authorization": "Bearer top-secret-value"},
        job=job["id"],
        failure_threshold=3,
        missed_grace_seconds=120,
    )
    assert created["header_names"] == ["Authorization"]
    assert created["job"] == job["id"] and created["failure_threshold"] == 3
    assert "top-secret-value" not in str(created)
    url = f"alerts/channels/{created['id']}"
    read = alpha_api.get(url)
    assert read.status_code == 200 and read.json() == created
    listed = alpha_api.get("alerts/channels").json()
    assert listed == {"next": None, "results": [created]}
    changed = alpha_api.patch(url, {"enabled": False, "failure_threshold": None})
    assert changed.status_code == 200
    assert (changed.json()["enabled"], changed.json()["failure_threshold"]) == (False, None)
    assert "top-secret-value" not in alpha_api.get(url).content.decode()
    assert alpha_api.delete(url).status_code == 204
    assert _problem(alpha_api.get(url), 404)["detail"] == "No such alert channel in this tenant."


def test_header_values_are_stored_sealed(alpha_api, live):
    created = _create(alpha_api, headers={"X-Token": "plain-text-never-stored"})
    with schema_context(live["alpha"].schema):
        stored = AlertChannel.objects.get(pk=created["id"]).headers
    assert "plain-text-never-stored" not in str(stored)


def test_an_email_channel(alpha_api):
    body = {"name": "mail", "kind": "email", "emails": ["ops@example.com"]}
    response = alpha_api.post("alerts/channels", body)
    assert response.status_code == 201, response.content
    created = response.json()
    assert (created["url"], created["emails"]) == (None, ["ops@example.com"])


def test_another_tenants_channel_is_a_404(alpha_api, beta_api):
    created = _create(alpha_api)
    for call in (
        lambda: beta_api.get(f"alerts/channels/{created['id']}"),
        lambda: beta_api.patch(f"alerts/channels/{created['id']}", {"enabled": False}),
        lambda: beta_api.delete(f"alerts/channels/{created['id']}"),
    ):
        assert _problem(call(), 404)["status"] == 404
    assert beta_api.get("alerts/channels").json()["results"] == []
    assert alpha_api.get(f"alerts/channels/{created['id']}").json()["enabled"] is True


def test_a_refused_address_literal_is_a_400_on_url_at_save(alpha_api):
    for url in ("http://127.0.0.1/hook", "http://169.254.169.254/latest", "http://localhost/x"):
        problem = _problem(alpha_api.post("alerts/channels", {**WEBHOOK, "url": url}))
        assert list(problem["errors"]) == ["url"], url


@override_settings(SCHEDULER_HTTP_ALLOW_NETWORKS=["127.0.0.0/8"])
def test_the_operator_allow_list_admits_a_local_receiver(alpha_api):
    assert _create(alpha_api, url="http://127.0.0.1:9/hook")["url"] == "http://127.0.0.1:9/hook"


def test_invalid_input_is_a_400_naming_each_field(alpha_api):
    cases = [
        ({**WEBHOOK, "kind": "pager"}, "kind"),
        ({**WEBHOOK, "url": "ftp://example.com/x"}, "url"),
        ({**WEBHOOK, "emails": ["a@example.com"]}, "emails"),
        ({**WEBHOOK, "headers": {"bad name": "x"}}, "headers"),
        ({**WEBHOOK, "headers": {"webhook-signature": "x"}}, "headers"),
        ({**WEBHOOK, "job": 999999}, "job"),
        ({**WEBHOOK, "failure_threshold": 0}, "failure_threshold"),
        ({**WEBHOOK, "missed_grace_seconds": "5"}, "missed_grace_seconds"),
        ({**WEBHOOK, "on_dead_letter": False}, "on_dead_letter"),  # no condition left
        ({**WEBHOOK, "colour": "red"}, "colour"),
        ({"name": "mail", "kind": "email", "emails": ["not-an-address"]}, "emails"),
        ({"name": "mail", "kind": "email"}, "emails"),
        ({**WEBHOOK, "name": ""}, "name"),
    ]
    for body, field in cases:
        problem = _problem(alpha_api.post("alerts/channels", body))
        assert field in problem["errors"], (body, problem)
    _create(alpha_api)
    assert "name" in _problem(alpha_api.post("alerts/channels", WEBHOOK))["errors"]
    assert "cursor" in _problem(alpha_api.get("alerts/channels", cursor="x"))["errors"]
    assert "state" in _problem(alpha_api.get("alerts/incidents", state="x"))["errors"]


def _incidents(schema: str, job_id: int, channel_id: int, count: int) -> None:
    start = datetime(2026, 11, 29, 1, 0, tzinfo=UTC)
    with schema_context(schema):
        for i in range(count):
            at = start + timedelta(minutes=i)
            incident = Incident.objects.create(
                channel_id=channel_id,
                job_id=job_id,
                kind=states.DEAD_LETTER,
                trigger_at=at,
                opened_at=at,
                resolved_at=at + timedelta(seconds=30),
                detail=f"incident {i}",
            )
            notification = Notification.objects.create(
                incident=incident,
                channel_id=channel_id,
                event=states.OPENED,
                payload={"type": "alert.opened"},
                state=states.SENT,
                attempts=1,
                next_attempt_at=at,
                created_at=at,
                sent_at=at,
            )
            DeliveryAttempt.objects.create(
                notification=notification,
                number=1,
                started_at=at,
                finished_at=at,
                ok=True,
                status_code=200,
            )


def test_incidents_and_notifications_are_listed_newest_first_in_pages(alpha_api, beta_api, live):
    job = alpha_api.create_job(name="nightly")
    created = _create(alpha_api)
    _incidents(live["alpha"].schema, job["id"], created["id"], 5)
    first = alpha_api.get("alerts/incidents", page_size=3).json()
    assert [i["detail"] for i in first["results"]] == ["incident 4", "incident 3", "incident 2"]
    assert first["results"][0]["state"] == "resolved"
    second = alpha_api.get(first["next"].split("/api/v1/", 1)[1].split("?")[0], **_params(first))
    assert [i["detail"] for i in second.json()["results"]] == ["incident 1", "incident 0"]
    assert alpha_api.get("alerts/incidents", state="open").json()["results"] == []
    notes = alpha_api.get("alerts/notifications", page_size=2).json()
    assert len(notes["results"]) == 2 and notes["next"]
    assert notes["results"][0]["deliveries"][0]["status_code"] == 200
    assert notes["results"][0]["state"] == states.SENT
    assert beta_api.get("alerts/incidents").json()["results"] == []
    assert beta_api.get("alerts/notifications").json()["results"] == []


def _params(page: dict) -> dict:
    from urllib.parse import parse_qsl, urlsplit

    return dict(parse_qsl(urlsplit(page["next"]).query))
