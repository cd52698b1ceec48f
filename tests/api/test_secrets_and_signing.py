"""The API side of outbound deliveries: secret header values (write-only) and the signing
secret endpoints."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django_tenants.utils import schema_context

from jobs.headers import is_secret
from jobs.models import AuditEvent, Job
from tenants.models import Tenant
from tenants.signing import signing_keys_load

from .conftest import Api

SECRET = "Bearer api-s3cret-value"


def _http(headers: dict) -> dict:
    return {"type": "http", "url": "https://example.com/hook", "headers": headers}


def _stored(tenant, job_id: int) -> dict:
    with schema_context(tenant.schema_name):
        return Job.objects.get(id=job_id).target["headers"]


def test_a_secret_header_is_stored_sealed_and_shown_only_as_secret(alpha_api: Api, live):
    job = alpha_api.create_job(
        target=_http({"Authorization": {"value": SECRET, "secret": True}, "X-A": "1"})
    )
    shown = {"Authorization": {"secret": True}, "X-A": "1"}
    assert job["target"]["headers"] == shown
    assert alpha_api.get(f"jobs/{job['id']}").json()["target"]["headers"] == shown
    listed = alpha_api.get("jobs").content.decode()
    assert SECRET not in listed and SECRET not in str(_stored(live["alpha"].tenant, job["id"]))
    assert is_secret(_stored(live["alpha"].tenant, job["id"])["Authorization"])


def test_an_update_that_omits_a_secret_value_keeps_it(alpha_api: Api, live):
    tenant = live["alpha"].tenant
    job = alpha_api.create_job(target=_http({"Authorization": {"value": SECRET, "secret": True}}))
    sealed = _stored(tenant, job["id"])["Authorization"]
    # What a client read, sent back with another change: the secret stays as it was.
    read = alpha_api.get(f"jobs/{job['id']}").json()["target"]
    read["headers"]["X-New"] = "2"
    changed = alpha_api.patch(f"jobs/{job['id']}", {"target": read})
    assert changed.status_code == 200, changed.content
    assert _stored(tenant, job["id"]) == {"Authorization": sealed, "X-New": "2"}
    # A plain string makes it plain again; leaving the header out removes it.
    plain = alpha_api.patch(f"jobs/{job['id']}", {"target": _http({"Authorization": "open"})})
    assert plain.json()["target"]["headers"] == {"Authorization": "open"}
    gone = alpha_api.patch(f"jobs/{job['id']}", {"target": _http({})})
    assert gone.json()["target"]["headers"] == {}


def test_the_audit_log_never_holds_a_header_value(alpha_api: Api, live):
    job = alpha_api.create_job(target=_http({"Authorization": {"value": SECRET, "secret": True}}))
    alpha_api.patch(f"jobs/{job['id']}", {"target": _http({"Authorization": "plain-too"})})
    with schema_context(live["alpha"].schema):
        changes = str(list(AuditEvent.objects.values_list("changes", flat=True)))
    assert "Authorization" in changes
    assert SECRET not in changes and "plain-too" not in changes


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"Authorization": {"secret": True}}, "has no stored secret value to keep"),
        ({"Authorization": {"value": SECRET, "secret": "yes"}}, 'give a string or {"value"'),
        ({"Webhook-Signature": "v1,x"}, "set by the scheduler"),
        ({"X-A": 1}, "the value must be a string"),
    ],
)
def test_a_bad_header_is_a_400_naming_target_headers(alpha_api: Api, headers, message):
    body = {"name": "j", "schedule": None, "target": _http(headers)}
    response = alpha_api.post("jobs", body)
    assert response.status_code == 400
    [text] = response.json()["errors"]["target.headers"]
    assert message in text


def test_the_schema_documents_both_header_shapes(alpha_api: Api):
    schema = alpha_api.get("openapi.json").json()["components"]["schemas"]
    shown = schema["HttpTarget"]["properties"]["headers"]["additionalProperties"]["oneOf"]
    given = schema["HttpTargetInput"]["properties"]["headers"]["additionalProperties"]["oneOf"]
    assert shown[0] == {"type": "string"} and shown[1]["required"] == ["secret"]
    assert set(given[1]["properties"]) == {"value", "secret"}


# --- signing secret ------------------------------------------------------------------------


def test_rotating_returns_the_new_secret_once_and_reading_shows_only_metadata(alpha_api: Api, live):
    tenant = live["alpha"].tenant
    before = alpha_api.get("signing-secret").json()
    rotated = alpha_api.post("signing-secret/rotate", {"overlap_seconds": 3600})
    assert rotated.status_code == 200 and rotated["Cache-Control"] == "no-store"
    body = rotated.json()
    assert body["secret"].startswith("whsec_") and body["version"] == before["version"] + 1
    assert body["scheme"] == "standard-webhooks-v1"
    keys = signing_keys_load(schema=tenant.schema_name, now=tenant.created_at)
    assert keys.current == body["secret"]  # what the workers will sign with
    read = alpha_api.get("signing-secret").json()
    assert "secret" not in read and body["secret"] not in str(read)
    assert read["version"] == body["version"] and read["previous_expires_at"] is not None
    stored = Tenant.objects.get(pk=tenant.pk)
    assert body["secret"] not in stored.signing_secret  # sealed at rest
    with schema_context(tenant.schema_name):
        event = AuditEvent.objects.filter(action="signing_secret_rotate").latest("id")
    assert event.changes == {"version": body["version"], "overlap_seconds": 3600}
    assert body["secret"] not in str(event.changes)


def test_the_overlap_is_the_default_setting_or_zero_for_a_leaked_secret(
    alpha_api: Api, live, settings
):
    settings.SCHEDULER_SIGNING_SECRET_OVERLAP_SECONDS = 120
    alpha_api.post("signing-secret/rotate")
    stored = Tenant.objects.get(pk=live["alpha"].tenant.pk)
    overlap = stored.signing_secret_previous_expires_at - stored.signing_secret_created_at
    assert overlap == timedelta(seconds=120)
    cut = alpha_api.post("signing-secret/rotate", {"overlap_seconds": 0}).json()
    assert cut["previous_expires_at"] is None
    assert Tenant.objects.get(pk=live["alpha"].tenant.pk).signing_secret_previous == ""


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"overlap_seconds": -1}, "overlap_seconds"),
        ({"overlap_seconds": 7 * 86400 + 1}, "overlap_seconds"),
        ({"overlap_seconds": "soon"}, "overlap_seconds"),
        ({"overlap": 10}, "overlap"),
    ],
)
def test_a_bad_rotation_is_a_400_naming_the_field(alpha_api: Api, body, field):
    response = alpha_api.post("signing-secret/rotate", body)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]


def test_one_tenant_rotating_leaves_the_other_alone(alpha_api: Api, beta_api: Api):
    beta_before = beta_api.get("signing-secret").json()
    alpha_api.post("signing-secret/rotate")
    assert beta_api.get("signing-secret").json() == beta_before


def test_the_signing_secret_needs_a_token(live):
    assert Api(None).get("signing-secret").status_code == 401
    assert Api(None).post("signing-secret/rotate").status_code == 401
