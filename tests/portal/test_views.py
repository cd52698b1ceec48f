"""Every portal page and action: anonymous -> login; another tenant's objects -> 404; a
member -> 200 (or the action's redirect); CSRF enforced on every form."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django_tenants.utils import schema_context

from core.clock import SystemClock
from jobs.models import AuditEvent, Job
from runs import states
from runs.models import Run
from tenants.tokens import token_issue

from ..integration.helpers import make_job

CLOCK = SystemClock()


def login(world, *, enforce: bool = False, user=None, password=None) -> Client:
    client = Client(HTTP_HOST=world.domain, enforce_csrf_checks=enforce)
    client.get("/login/")
    response = client.post(
        "/login/",
        {
            "username": user or world.admin_user,
            "password": password or world.admin_password,
            "csrfmiddlewaretoken": client.cookies["csrftoken"].value,
        },
    )
    assert response.status_code == 302, response.content[:500]
    return client


def csrf(client: Client) -> str:
    return client.cookies["csrftoken"].value


def _dead_run(tenant_world, job) -> Run:
    with schema_context(tenant_world.schema):
        now = CLOCK.now()
        return Run.objects.create(
            job=job,
            trigger="manual",
            scheduled_for=now,
            due_at=now,
            status=states.DEAD,
            error="HTTP 500 from the target",
        )


@pytest.fixture
def portal(live):
    """alpha: an active job, a paused one, a dead run, a token; beta: more jobs than alpha,
    so that beta's last job id does not exist in alpha."""
    alpha, beta = live["alpha"], live["beta"]
    active = make_job(
        alpha.tenant,
        CLOCK,
        name="nightly-report",
        schedule={"cron": "30 2 * * *", "timezone": "Europe/Berlin"},
    )
    paused = make_job(alpha.tenant, CLOCK, name="paused-job", schedule={"cron": "* * * * *"})
    with schema_context(alpha.schema):
        from jobs.services import Actor, job_pause

        job_pause(
            tenant=alpha.tenant,
            actor=Actor("user:x"),
            job_id=paused.id,
            reason="maint",
            clock=CLOCK,
        )
    dead = _dead_run(alpha, active)
    beta_jobs = [
        make_job(beta.tenant, CLOCK, name=f"beta-secret-{n}", schedule=None) for n in range(4)
    ]
    beta_run = _dead_run(beta, beta_jobs[-1])
    token = token_issue(tenant=alpha.tenant, name="ci").token
    beta_token = token_issue(tenant=beta.tenant, name="beta-ci").token
    yield {
        "alpha": alpha,
        "beta": beta,
        "active": active,
        "paused": paused,
        "dead": dead,
        "beta_job": beta_jobs[-1],
        "beta_run": beta_run,
        "token": token,
        "beta_token": beta_token,
    }


def pages(p) -> list[str]:
    job, run = p["active"].id, p["dead"].id
    return [
        "/",
        "/jobs/",
        "/jobs/?q=night&state=active",
        "/jobs/new",
        "/jobs/preview?schedule_type=cron&cron=*/5+*+*+*+*&timezone=UTC",
        f"/jobs/{job}/",
        f"/jobs/{job}/edit",
        f"/jobs/{job}/dag",
        f"/runs/{run}/",
        "/dlq/",
        "/alerts/",
        "/tokens/",
        "/members/",
    ]


def actions(p) -> list[tuple[str, dict]]:
    job, run, token = p["active"].id, p["dead"].id, p["token"].id
    return [
        ("/jobs/bulk", {"action": "pause", "job": [job]}),
        ("/jobs/new", {"name": "x"}),
        (f"/jobs/{job}/edit", {"name": "x"}),
        (f"/jobs/{job}/pause", {"reason": "r"}),
        (f"/jobs/{job}/resume", {}),
        (f"/jobs/{job}/run", {}),
        (f"/jobs/{job}/backfill", {"start": "2026-01-01T00:00", "end": "2026-01-02T00:00"}),
        (f"/jobs/{job}/delete", {"confirm_name": "nightly-report"}),
        (f"/jobs/{job}/dag", {"add": "1"}),
        (f"/runs/{run}/cancel", {}),
        (f"/runs/{run}/replay", {}),
        (f"/runs/{run}/discard", {}),
        ("/dlq/bulk", {"action": "replay", "run": [str(run)]}),
        ("/tokens/", {"name": "n"}),
        (f"/tokens/{token}/revoke", {}),
        ("/members/", {"username": "newbie"}),
        ("/members/999999/remove", {}),
    ]


def test_anonymous_is_sent_to_login_everywhere(portal):
    client = Client(HTTP_HOST=portal["alpha"].domain)
    for url in pages(portal):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    for url, data in actions(portal):
        response = client.post(url, data)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    with schema_context(portal["alpha"].schema):
        assert Job.objects.get(id=portal["active"].id).state == "active"


def test_a_member_sees_every_page(portal):
    client = login(portal["alpha"])
    for url in pages(portal):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        assert b"beta-secret" not in response.content, url


def test_another_tenants_objects_are_404s_and_its_session_is_no_login(portal):
    client = login(portal["alpha"])
    beta_job, beta_run = portal["beta_job"].id, portal["beta_run"].id
    with schema_context(portal["alpha"].schema):
        assert not Job.objects.filter(id=beta_job).exists()
    for url in (
        f"/jobs/{beta_job}/",
        f"/jobs/{beta_job}/edit",
        f"/jobs/{beta_job}/dag",
        f"/runs/{beta_run}/",
    ):
        assert client.get(url).status_code == 404, url
    for url in (
        f"/jobs/{beta_job}/pause",
        f"/jobs/{beta_job}/resume",
        f"/jobs/{beta_job}/run",
        f"/jobs/{beta_job}/delete",
        f"/runs/{beta_run}/cancel",
        f"/runs/{beta_run}/replay",
        f"/runs/{beta_run}/discard",
        f"/tokens/{portal['beta_token'].id}/revoke",
    ):
        assert client.post(url, {}).status_code == 404, url
    backfill = {"start": "2030-01-01T00:00", "end": "2030-01-02T00:00"}
    assert client.post(f"/jobs/{beta_job}/backfill", backfill).status_code == 404
    # bulk forms with another tenant's ids act on nothing
    bulk = client.post(
        "/jobs/bulk", {"action": "pause", "job": [beta_job], "confirm": "yes"}, follow=True
    )
    assert "0 jobs paused." in bulk.content.decode() and "1 not paused" in bulk.content.decode()
    dlq = client.post("/dlq/bulk", {"action": "discard", "run": [str(beta_run)]}, follow=True)
    assert "0 runs discarded." in dlq.content.decode()
    with schema_context(portal["beta"].schema):
        assert Run.objects.get(id=beta_run).status == states.DEAD
        assert not Job.objects.get(id=beta_job).paused
    # alpha's session cookie on beta's domain is no login there
    stolen = Client(HTTP_HOST=portal["beta"].domain)
    stolen.cookies = client.cookies
    response = stolen.get("/jobs/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_csrf_is_enforced_on_every_form(portal):
    client = login(portal["alpha"], enforce=True)
    for url, data in actions(portal):
        assert client.post(url, data).status_code == 403, url
    logout = client.post("/logout/")
    assert logout.status_code == 403
    with schema_context(portal["alpha"].schema):
        assert Job.objects.get(id=portal["active"].id).state == "active"
        assert Run.objects.get(id=portal["dead"].id).status == states.DEAD
    # the same request with the token goes through
    response = client.post(
        f"/jobs/{portal['active'].id}/pause", {"reason": "r", "csrfmiddlewaretoken": csrf(client)}
    )
    assert response.status_code == 302
    anonymous = Client(HTTP_HOST=portal["alpha"].domain, enforce_csrf_checks=True)
    assert anonymous.post("/login/", {"username": "a", "password": "b"}).status_code == 403


def test_jobs_list_shows_words_next_run_strip_and_paused_since(portal):
    client = login(portal["alpha"])
    page = client.get("/jobs/").content.decode()
    assert "At 02:30 (Europe/Berlin)" in page
    assert "paused since" in page
    assert 'class="cell dead"' in page
    paused_only = client.get("/jobs/?state=paused").content.decode()
    assert "paused-job" in paused_only and "nightly-report" not in paused_only
    dead_only = client.get("/jobs/?last=dead").content.decode()
    assert "nightly-report" in dead_only and "paused-job" not in dead_only


def test_jobs_list_pages_by_keyset(live):
    alpha = live["alpha"]
    for n in range(55):
        make_job(alpha.tenant, CLOCK, name=f"many-{n:02d}", schedule=None)
    client = login(alpha)
    first = client.get("/jobs/").content.decode()
    assert "many-49" in first and "many-50" not in first
    assert "after=50" in first
    second = client.get("/jobs/?after=50").content.decode()
    assert "many-50" in second and "many-54" in second and "many-49" not in second
    back = client.get("/jobs/?before=51").content.decode()
    assert "many-49" in back and "many-00" in back and "many-50" not in back


def _form(**over) -> dict:
    data = {
        "name": "hourly-sync",
        "description": "",
        "schedule_type": "cron",
        "cron": "0 * * * *",
        "timezone": "Europe/Berlin",
        "interval_seconds": "",
        "dst_gap": "shift",
        "dst_repeat": "first",
        "target_type": "task",
        "task": "builtin.noop",
        "url": "",
        "method": "POST",
        "headers": "",
        "payload": '{"a": 1}',
        "max_attempts": "3",
        "backoff_seconds": "10",
        "backoff_multiplier": "2",
        "backoff_max_seconds": "3600",
        "retry_jitter": "on",
        "timeout_seconds": "300",
        "priority": "normal",
        "concurrency_policy": "allow",
        "max_concurrent_runs": "1",
        "misfire_policy": "run_once",
        "misfire_grace_seconds": "60",
        "jitter_seconds": "0",
        "upstream_add": "",
    }
    data.update(over)
    return data


def test_create_edit_and_errors_next_to_their_fields(portal):
    alpha = portal["alpha"]
    client = login(alpha)
    bad = client.post("/jobs/new", _form(cron="0 9 * * MON-FRY", payload='{"a": 1}'))
    assert bad.status_code == 400
    html = bad.content.decode()
    assert "day_of_week: &#x27;FRY&#x27; is not a valid value" in html
    assert 'value="0 9 * * MON-FRY"' in html  # nothing typed is lost
    assert "Europe/Berlin" in html
    # A job with upstreams runs when they succeed: the form says so next to the field.
    scheduled = client.post("/jobs/new", _form(name="after-report", upstream_add="nightly-report"))
    assert scheduled.status_code == 400
    assert "a job with upstreams runs when they succeed" in scheduled.content.decode()
    downstream = client.post(
        "/jobs/new", _form(name="after-report", schedule_type="none", upstream_add="nightly-report")
    )
    assert downstream.status_code == 302
    with schema_context(alpha.schema):
        after = Job.objects.get(name="after-report")
        assert list(after.upstream_links.values_list("upstream_id", flat=True)) == [
            portal["active"].id
        ]
    created = client.post("/jobs/new", _form())
    assert created.status_code == 302
    with schema_context(alpha.schema):
        job = Job.objects.get(name="hourly-sync")
        assert job.payload == {"a": 1} and job.created_by == f"user:{alpha.admin_user}"
    edited = client.post(
        f"/jobs/{job.id}/edit",
        _form(
            cron="*/30 * * * *",
            target_type="http",
            url="https://example.com/hook",
            headers="X-Secret: s3cret",
        ),
    )
    assert edited.status_code == 302
    detail = client.get(f"/jobs/{job.id}/").content.decode()
    assert "0 * * * *" in detail and "*/30 * * * *" in detail  # the audit diff
    assert "s3cret" not in detail
    form = client.get(f"/jobs/{job.id}/edit").content.decode()
    assert "s3cret" not in form and "X-Secret: (unchanged)" in form
    kept = client.post(
        f"/jobs/{job.id}/edit",
        _form(
            cron="*/30 * * * *",
            target_type="http",
            url="https://example.com/hook",
            headers="X-Secret: (unchanged)",
            name="renamed",
        ),
    )
    assert kept.status_code == 302
    with schema_context(alpha.schema):
        assert Job.objects.get(id=job.id).target["headers"] == {"X-Secret": "s3cret"}


def test_preview_partial_words_times_and_errors(portal):
    client = login(portal["alpha"])
    ok = client.get(
        "/jobs/preview",
        {"schedule_type": "cron", "cron": "30 2 * * *", "timezone": "Europe/Berlin"},
        HTTP_HX_REQUEST="true",
    ).content.decode()
    assert "At 02:30 (Europe/Berlin)" in ok and ok.count("<li>") == 6
    bad = client.get("/jobs/preview", {"schedule_type": "cron", "cron": "99 * * * *"})
    assert "minute: 99 is out of range 0-59" in bad.content.decode()
    zone = client.get(
        "/jobs/preview", {"schedule_type": "cron", "cron": "* * * * *", "timezone": "Mars/Olympus"}
    )
    assert "unknown time zone" in zone.content.decode()
    interval = client.get("/jobs/preview", {"schedule_type": "interval", "interval_seconds": "600"})
    assert "Every 10 minutes" in interval.content.decode()


def test_dst_notes_flag_the_days_clocks_change():
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from jobs.preview import dst_note

    berlin = ZoneInfo("Europe/Berlin")
    assert dst_note(berlin, datetime(2026, 3, 29, 3, 0, tzinfo=berlin)).startswith(
        "DST: clocks go forward 60 min"
    )
    assert "back" in dst_note(berlin, datetime(2026, 10, 25, 2, 30, tzinfo=berlin))
    assert dst_note(berlin, datetime(2026, 3, 30, 2, 30, tzinfo=berlin)) == ""


def test_actions_go_through_the_services_and_are_audited(portal):
    alpha = portal["alpha"]
    client = login(alpha)
    job = portal["active"].id
    client.post(f"/jobs/{job}/pause", {"reason": "maintenance"})
    page = client.get(f"/jobs/{job}/").content.decode()
    assert "paused since" in page and "maintenance" in page
    client.post(f"/jobs/{job}/resume")
    run = client.post(f"/jobs/{job}/run", {"payload": '{"v": 2}'})
    assert run.status_code == 302 and run["Location"].startswith("/runs/")
    bad_payload = client.post(f"/jobs/{job}/run", {"payload": "[1"}, follow=True)
    assert "not valid JSON" in bad_payload.content.decode()
    backfill = client.post(
        f"/jobs/{job}/backfill",
        {"start": "2026-01-01T00:00", "end": "2026-01-03T00:00"},
        follow=True,
    )
    assert "Backfill: 2 runs created." in backfill.content.decode()
    with schema_context(alpha.schema):
        actions = list(
            AuditEvent.objects.filter(job_id=job)
            .order_by("at", "id")
            .values_list("actor", "action")
        )
        assert (f"user:{alpha.admin_user}", "pause") in actions
        assert (f"user:{alpha.admin_user}", "trigger") in actions
        triggered = Run.objects.filter(job_id=job, trigger="manual", payload_override={"v": 2})
        assert triggered.exists()
    wrong = client.post(f"/jobs/{job}/delete", {"confirm_name": "nope"})
    assert wrong.status_code == 302
    deleted = client.post(f"/jobs/{job}/delete", {"confirm_name": "nightly-report"})
    assert deleted["Location"] == "/jobs/"
    run_page = client.get(f"/runs/{portal['dead'].id}/").content.decode()
    assert "nightly-report" in run_page and "deleted" in run_page


def test_bulk_pause_asks_first(portal):
    client = login(portal["alpha"])
    job = portal["active"].id
    confirm = client.post("/jobs/bulk", {"action": "pause", "job": [job], "scope": "selected"})
    assert confirm.status_code == 200 and "Pause 1 job?" in confirm.content.decode()
    with schema_context(portal["alpha"].schema):
        assert not Job.objects.get(id=job).paused
    done = client.post(
        "/jobs/bulk",
        {"action": "pause", "job": [job], "scope": "selected", "confirm": "yes"},
        follow=True,
    )
    assert "1 job paused." in done.content.decode()
    everything = client.post(
        "/jobs/bulk",
        {"action": "resume", "scope": "filtered", "state": "paused", "confirm": "yes"},
        follow=True,
    )
    assert "2 jobs resumed." in everything.content.decode()


def test_run_page_polls_until_terminal(portal):
    alpha = portal["alpha"]
    client = login(alpha)
    with schema_context(alpha.schema):
        now = CLOCK.now()
        running = Run.objects.create(
            job=portal["active"],
            trigger="manual",
            scheduled_for=now,
            due_at=now,
            status=states.RUNNING,
            started_at=now,
            worker="w1",
        )
    live = client.get(f"/runs/{running.id}/").content.decode()
    assert 'hx-trigger="every 1s"' in live
    partial = client.get(f"/runs/{running.id}/", HTTP_HX_REQUEST="true").content.decode()
    assert partial.lstrip().startswith('<div id="run-live"') and "<html" not in partial
    done = client.get(f"/runs/{portal['dead'].id}/").content.decode()
    assert "hx-trigger" not in done
    assert "HTTP 500 from the target" in done


def test_dlq_replay_and_discard(portal):
    alpha = portal["alpha"]
    client = login(alpha)
    assert "HTTP 500 from the target" in client.get("/dlq/").content.decode()
    other = _dead_run(alpha, portal["active"])
    replayed = client.post(
        "/dlq/bulk", {"action": "replay", "run": [str(portal["dead"].id)]}, follow=True
    )
    assert "1 run replayed." in replayed.content.decode()
    discarded = client.post(f"/runs/{other.id}/discard", follow=True)
    assert "discarded" in discarded.content.decode()
    with schema_context(alpha.schema):
        assert Run.objects.get(id=portal["dead"].id).status == states.RETRYING
        assert Run.objects.get(id=other.id).status == states.CANCELLED
    again = client.post(f"/runs/{other.id}/discard", follow=True)
    assert "Only dead runs can be discarded" in again.content.decode()


def test_tokens_shown_once_listed_by_prefix_and_revoked(portal):
    alpha = portal["alpha"]
    client = login(alpha)
    created = client.post("/tokens/", {"name": "deploy"}).content.decode()
    plain = created.split('id="new-token" class="mono" readonly value="')[1].split('"')[0]
    assert plain.startswith("tw_")
    listing = client.get("/tokens/").content.decode()
    assert plain not in listing and f"tw_{plain[3:11]}" in listing
    api = Client().get("/api/v1/jobs", HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert api.status_code == 200
    from tenants.models import ApiToken

    token = ApiToken.objects.get(prefix=plain[3:11])
    client.post(f"/tokens/{token.id}/revoke")
    api = Client().get("/api/v1/jobs", HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert api.status_code == 401


def test_members_invite_remove_and_only_admins_manage(portal):
    alpha = portal["alpha"]
    from django.contrib.auth import get_user_model

    client = login(alpha)
    page = client.post("/members/", {"username": "erin", "email": ""}).content.decode()
    password = page.split('id="new-password" class="mono" readonly value="')[1].split('"')[0]
    try:
        erin = login(alpha, user="erin", password=password)
        assert erin.get("/jobs/").status_code == 200
        assert erin.post("/members/", {"username": "mallory"}).status_code == 403
        with schema_context(alpha.schema):
            erin_id = get_user_model().objects.get(username="erin").pk
            admin_id = get_user_model().objects.get(username=alpha.admin_user).pk
        assert erin.post(f"/members/{admin_id}/remove").status_code == 403
        assert erin.post("/tokens/", {"name": "x"}).status_code == 403
        duplicate = client.post("/members/", {"username": "erin"})
        assert duplicate.status_code == 400 and "already a member" in duplicate.content.decode()
        client.post(f"/members/{erin_id}/remove")
        assert erin.get("/jobs/").status_code == 302  # the removed member's session is gone
    finally:
        with schema_context(alpha.schema):
            get_user_model().objects.filter(username__in=["erin", "mallory"]).delete()


def test_suspended_tenant_portal_says_so(portal):
    from tenants.services import tenant_resume, tenant_suspend

    alpha = portal["alpha"]
    client = login(alpha)
    tenant_suspend(tenant=alpha.tenant, reason="billing", now=CLOCK.now())
    try:
        response = client.get("/jobs/")
        assert response.status_code == 403
        assert (
            "is suspended" in response.content.decode() and "billing" in response.content.decode()
        )
        assert Client(HTTP_HOST=alpha.domain).get("/healthz").status_code == 200
    finally:
        tenant_resume(tenant=alpha.tenant)


def test_public_root_unknown_paths_and_tenant_admin(portal):
    public = Client(HTTP_HOST="localhost")
    root = public.get("/")
    assert (
        root.status_code == 200 and b"/api/v1/docs" in root.content and b"/admin/" in root.content
    )
    missing = public.get("/no/such/page")
    assert missing.status_code == 404 and b"/api/v1/docs" in missing.content
    assert b"Page not found at" not in missing.content  # not Django's debug page
    tenant_admin = Client(HTTP_HOST=portal["alpha"].domain).get("/admin/")
    assert tenant_admin.status_code == 404
    assert b"public host" in tenant_admin.content and b"localhost/admin/" in tenant_admin.content
    assert Client(HTTP_HOST=portal["alpha"].domain).get("/nope").status_code in (302, 404)


def test_overview_counts_and_quota(portal):
    client = login(portal["alpha"])
    page = client.get("/").content.decode()
    assert "Runs in the last 24 h" in page and "/ 100" in page
    assert "Waiting for a slot" in page and "Fair-share weight" in page
    assert "Run history kept" in page and f"{settings.RUN_RETENTION_DAYS} days" in page
    assert json.dumps("dead")[1:-1] in page
    assert str(uuid.UUID(str(portal["dead"].id))) in page


@pytest.fixture
def calendars(portal):
    """Two exclusion calendars in alpha (calendars outlive the `live` truncation: removed
    here)."""
    from jobs.models import ExclusionCalendar

    with schema_context(portal["alpha"].schema):
        ExclusionCalendar.objects.create(name="portal-holidays", dates=["2030-12-25"])
        ExclusionCalendar.objects.create(
            name="portal-all-2030", ranges=[["2030-01-01", "2030-12-31"]]
        )
    yield
    with schema_context(portal["alpha"].schema):
        ExclusionCalendar.objects.filter(name__startswith="portal-").delete()


def test_richer_schedules_round_trip_through_the_form(portal, calendars):
    """Several cron expressions, a one-off, bounds and calendars: what the API can say the
    form can say, and editing another field keeps them all."""
    alpha = portal["alpha"]
    client = login(alpha)
    assert "Skip the dates of these calendars" in client.get("/jobs/new").content.decode()
    data = _form(
        name="union",
        cron="0 9 * * 1-5",
        more_crons="0 12 * * 6 | Asia/Tokyo\n30 18 * * 0",
        start="2030-01-01T00:00",
        end="2031-01-01T00:00",
        calendars=["portal-holidays"],
    )
    assert client.post("/jobs/new", data).status_code == 302
    with schema_context(alpha.schema):
        job = Job.objects.get(name="union")
        assert [(s["cron"], s["timezone"]) for s in job.extra_specs] == [
            ("0 12 * * 6", "Asia/Tokyo"),
            ("30 18 * * 0", "Europe/Berlin"),
        ]
        assert job.start_at.isoformat() == "2030-01-01T00:00:00+00:00"
        assert list(job.calendars.values_list("name", flat=True)) == ["portal-holidays"]
    form = client.get(f"/jobs/{job.id}/edit").content.decode()
    assert "0 12 * * 6 | Asia/Tokyo\n30 18 * * 0" in form
    assert 'value="2030-01-01T00:00:00"' in form
    assert re.search(r'value="portal-holidays"[^>]* checked', form)
    renamed = {**data, "name": "union-renamed"}
    assert client.post(f"/jobs/{job.id}/edit", renamed).status_code == 302
    with schema_context(alpha.schema):
        kept = Job.objects.get(id=job.id)
        assert kept.name == "union-renamed" and kept.extra_specs == job.extra_specs
        assert (kept.start_at, kept.end_at) == (job.start_at, job.end_at)
        assert kept.calendars.count() == 1
    # errors land by their fields, everything kept
    bad = client.post(
        "/jobs/new",
        _form(
            name="bad",
            more_crons="0 12 * * 6\n61 * * * *",
            end="2029-01-01T00:00",
            start="2030-01-01T00:00",
        ),
    )
    html = bad.content.decode()
    assert bad.status_code == 400
    assert "line 2: minute: 61 is out of range 0-59" in html and "must be after start" in html
    assert "61 * * * *" in html and 'value="2029-01-01T00:00"' in html
    # a one-off
    once = client.post(
        "/jobs/new", _form(name="once", schedule_type="at", run_at="2030-12-24T18:00", cron="")
    )
    assert once.status_code == 302
    with schema_context(alpha.schema):
        job = Job.objects.get(name="once")
        assert (job.schedule_kind, job.run_at_wall) == ("at", "2030-12-24T18:00:00")
    edit = client.get(f"/jobs/{job.id}/edit").content.decode()
    assert re.search(r'name="schedule_type" value="at"[^>]* checked', edit)
    assert 'value="2030-12-24T18:00:00"' in edit


def test_the_preview_shows_the_whole_schedule(portal, calendars):
    client = login(portal["alpha"])
    base = {"schedule_type": "cron", "cron": "0 9 * * *", "timezone": "UTC"}
    union = client.get("/jobs/preview", {**base, "more_crons": "0 21 * * *"}).content.decode()
    assert union.count("<li>") == 6 and "09:00:00" in union and "21:00:00" in union
    bounded = client.get(
        "/jobs/preview", {**base, "start": "2030-01-01T00:00", "calendars": ["portal-all-2030"]}
    ).content.decode()
    assert "Tue 2030-01-01 09:00:00" in bounded and "skipped: excluded" in bounded
    once = client.get(
        "/jobs/preview",
        {"schedule_type": "at", "run_at": "2030-12-24T18:00", "timezone": "Europe/Berlin"},
    ).content.decode()
    assert once.count("<li>") == 1 and "2030-12-24 18:00:00" in once
    bad = client.get("/jobs/preview", {**base, "more_crons": "0 21 * * *\nnope"}).content.decode()
    assert "more cron expressions, line 2:" in bad and "Invalid schedule" in bad
    assert (
        "No schedule"
        in client.get(
            "/jobs/preview", {"schedule_type": "none", "start": "2030-01-01T00:00"}
        ).content.decode()
    )


def test_a_completed_job_says_so(portal):
    alpha = portal["alpha"]
    with schema_context(alpha.schema):
        Job.objects.filter(id=portal["active"].id).update(
            completed_at=CLOCK.now(), next_run_at=None
        )
    client = login(alpha)
    listed = client.get("/jobs/?state=completed").content.decode()
    assert "nightly-report" in listed and "paused-job" not in listed
    assert '<span class="badge completed"' in listed and "none: completed" in listed
    detail = client.get(f"/jobs/{portal['active'].id}/").content.decode()
    assert "its schedule has no slot left" in detail
    assert "1 completed" in client.get("/").content.decode()


def _next_runs_section(page: str) -> str:
    return page.split('id="h-next"', 1)[1].split("</section>", 1)[0]


def test_a_schedule_that_ends_lists_what_remains(portal):
    """A one-off, and a bounded job with fewer than 10 slots left: the detail page lists
    the slots that remain (it used to answer 500, the schedule ending mid-list)."""
    alpha = portal["alpha"]
    once = make_job(
        alpha.tenant,
        CLOCK,
        name="once",
        schedule={"at": "2030-12-24T18:00", "timezone": "Europe/Berlin"},
    )
    bounded = make_job(
        alpha.tenant,
        CLOCK,
        name="three-days",
        schedule={
            "cron": "0 9 * * *",
            "start": "2030-01-01T00:00:00Z",
            "end": "2030-01-04T00:00:00Z",
        },
    )
    client = login(alpha)
    response = client.get(f"/jobs/{once.id}/")
    assert response.status_code == 200
    listed = _next_runs_section(response.content.decode())
    assert listed.count("<li>") == 1 and "Tue 2030-12-24 18:00" in listed
    response = client.get(f"/jobs/{bounded.id}/")
    assert response.status_code == 200
    listed = _next_runs_section(response.content.decode())
    assert listed.count("<li>") == 3
    assert [f"2030-01-0{d} 09:00" in listed for d in (1, 2, 3, 4)] == [True, True, True, False]


def test_next_runs_and_words_honour_the_jobs_calendars(portal, calendars):
    """An excluded date is not shown as a next run, the page says why, and the words (on the
    page and in the jobs list) name the calendar."""
    alpha = portal["alpha"]
    job = make_job(
        alpha.tenant,
        CLOCK,
        name="christmas-off",
        schedule={
            "cron": "0 9 * * *",
            "start": "2030-12-24T00:00:00Z",
            "calendars": ["portal-holidays"],
        },
    )
    client = login(alpha)
    page = client.get(f"/jobs/{job.id}/").content.decode()
    listed = _next_runs_section(page)
    assert listed.count("<li>") == 10
    assert "2030-12-24 09:00" in listed and "2030-12-26 09:00" in listed
    assert "2030-12-25" not in listed and "2031-01-03 09:00" in listed
    assert "“portal-holidays” are left out" in listed
    words = "except on the dates of &#x27;portal-holidays&#x27;"
    assert words in page
    assert words in client.get("/jobs/?q=christmas").content.decode()


def test_next_run_is_the_next_slot_that_fires_not_the_cursor(portal, calendars):
    """The job's cursor (`next_run_at`) is on an excluded date: the jobs list and the job
    page show the next run that fires, the day after."""
    alpha = portal["alpha"]
    job = make_job(
        alpha.tenant,
        CLOCK,
        name="starts-on-christmas",
        schedule={
            "cron": "0 9 * * *",
            "start": "2030-12-25T00:00:00Z",
            "calendars": ["portal-holidays"],
        },
    )
    assert job.next_run_at.isoformat() == "2030-12-25T09:00:00+00:00"
    client = login(alpha)
    shown = '<time datetime="2030-12-26T09:00:00+00:00">2030-12-26 09:00:00</time>'
    listed = client.get("/jobs/?q=starts-on").content.decode()
    assert shown in listed and "2030-12-25 09:00:00" not in listed
    detail = client.get(f"/jobs/{job.id}/").content.decode()
    assert shown in detail and "2030-12-25 09:00:00" not in detail


def test_the_simple_preview_takes_six_fields_when_the_minimum_allows(portal):
    client = login(portal["alpha"])
    query = {"schedule_type": "cron", "cron": "*/20 * * * * *", "timezone": "UTC"}
    page = client.get("/jobs/preview", query).content.decode()
    assert "Invalid schedule" not in page and page.count("<li>") == 6
    assert re.search(r" \d\d:\d\d:20 \(UTC", page)


def test_next_runs_include_the_runs_already_prepared(portal):
    """The list starts after now, not at the cursor: slots whose runs the leader has
    already prepared (the cursor is past them) still fire, and are listed."""
    alpha = portal["alpha"]
    job = make_job(alpha.tenant, CLOCK, name="hourly", schedule={"cron": "0 * * * *"})
    with schema_context(alpha.schema):
        job.refresh_from_db()
        first = job.next_run_at
        # As after the leader prepared the next two slots' runs.
        Job.objects.filter(id=job.id).update(next_run_at=first + timedelta(hours=2))
    listed = _next_runs_section(login(alpha).get(f"/jobs/{job.id}/").content.decode())
    assert listed.count("<li>") == 10
    assert f'datetime="{first.isoformat()}"' in listed
