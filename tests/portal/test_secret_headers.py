"""Secret headers in the portal's job form: written, kept, converted; never shown."""

from __future__ import annotations

from django_tenants.utils import schema_context

from core.encryption import keyring
from jobs.headers import is_secret, open_headers
from jobs.models import Job

from .test_views import _form, login

SECRET = "Bearer portal-s3cret"


def _http(**over) -> dict:
    return _form(target_type="http", url="https://example.com/hook", **over)


def _headers(world, name: str) -> dict:
    with schema_context(world.schema):
        return Job.objects.get(name=name).target["headers"]


def test_a_secret_header_is_written_kept_and_never_shown(live):
    alpha = live["alpha"]
    client = login(alpha)
    created = client.post(
        "/jobs/new",
        _http(name="hook", headers="X-Team: blue", secret_headers=f"Authorization: {SECRET}"),
    )
    assert created.status_code == 302, created.content.decode()[:2000]
    stored = _headers(alpha, "hook")
    assert stored["X-Team"] == "blue" and is_secret(stored["Authorization"])
    assert open_headers(stored, keyring()).values["Authorization"] == SECRET
    with schema_context(alpha.schema):
        job_id = Job.objects.get(name="hook").id
    pages = [client.get(f"/jobs/{job_id}/").content.decode()]
    pages.append(form := client.get(f"/jobs/{job_id}/edit").content.decode())
    assert all(SECRET not in page and "portal-s3cret" not in page for page in pages)
    assert "Authorization: (unchanged)" in form and "X-Team: (unchanged)" in form
    kept = client.post(
        f"/jobs/{job_id}/edit",
        _http(
            name="hook",
            headers="X-Team: (unchanged)",
            secret_headers="Authorization: (unchanged)",
        ),
    )
    assert kept.status_code == 302
    assert _headers(alpha, "hook") == stored  # the same sealed value: nothing re-encrypted


def test_a_plain_header_moved_to_secret_headers_becomes_secret(live):
    alpha = live["alpha"]
    client = login(alpha)
    client.post("/jobs/new", _http(name="hook", headers="X-Api-Key: k3y"))
    with schema_context(alpha.schema):
        job_id = Job.objects.get(name="hook").id
    moved = client.post(
        f"/jobs/{job_id}/edit", _http(name="hook", secret_headers="X-Api-Key: (unchanged)")
    )
    assert moved.status_code == 302
    stored = _headers(alpha, "hook")
    assert is_secret(stored["X-Api-Key"])
    assert open_headers(stored, keyring()).values == {"X-Api-Key": "k3y"}


def test_a_form_returned_with_an_error_does_not_print_a_typed_secret(live):
    client = login(live["alpha"])
    bad = client.post(
        "/jobs/new",
        _http(name="hook", cron="not a cron", secret_headers=f"Authorization: {SECRET}"),
    )
    assert bad.status_code == 400
    html = bad.content.decode()
    assert SECRET not in html and "portal-s3cret" not in html
    assert "Authorization: " in html  # the name stays: only the value is to be typed again


def test_a_secret_cannot_be_kept_as_plain_nor_be_in_both_fields(live):
    alpha = live["alpha"]
    client = login(alpha)
    client.post("/jobs/new", _http(name="hook", secret_headers=f"Authorization: {SECRET}"))
    with schema_context(alpha.schema):
        job_id = Job.objects.get(name="hook").id
    as_plain = client.post(
        f"/jobs/{job_id}/edit", _http(name="hook", headers="Authorization: (unchanged)")
    )
    assert as_plain.status_code == 400
    assert "Authorization is secret" in as_plain.content.decode()
    both = client.post(
        f"/jobs/{job_id}/edit",
        _http(name="hook", headers="Authorization: x", secret_headers="Authorization: y"),
    )
    assert both.status_code == 400 and "also under Headers: Authorization" in both.content.decode()
