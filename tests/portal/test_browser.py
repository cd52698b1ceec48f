"""The portal and the operator console in a real browser: Playwright drives Debian's
chromium (headless) against real processes (gunicorn, runscheduler, a Celery worker) on the
test database. Screenshots of the main pages go to docs/screenshots/ (README shows them).

Run: make test ARGS="-m browser" (they are also `slow`)."""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from core.clock import SystemClock

from ..integration.helpers import make_job
from ..scenarios.procs import ROOT, free_port, scheduler, wait_for, web, worker

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SHOTS = ROOT / "docs" / "screenshots"
ENV = {"SCHEDULER_LEASE_SECONDS": "2", "SCHEDULER_LOOKAHEAD_SECONDS": "5"}
TIMEOUT_MS = 30_000


@pytest.fixture
def stack(live, tmp_path):
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    port = free_port()
    # the test settings: their password hasher verifies the test users' passwords
    site = web(
        tmp_path, port, workers=2, DJANGO_SETTINGS_MODULE="scheduler_site.settings_test", **ENV
    )
    procs = [
        site,
        scheduler(tmp_path, "sched", **ENV),
        worker(tmp_path, "w1", "--concurrency", "2"),
    ]
    try:
        wait_for(lambda: _answers(port), timeout=30)
        yield {"port": port, "world": live, "procs": procs}
    finally:
        for proc in procs:
            proc.stop()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture
def seeded(stack):
    """Jobs made through the service before the browser starts (Playwright's sync API runs
    an event loop in this thread, where Django refuses database calls)."""
    alpha = stack["world"]["alpha"].tenant
    clock = SystemClock()
    make_job(
        alpha,
        clock,
        name="always-fails",
        schedule=None,
        target={"type": "task", "task": "builtin.fail"},
        retry={"max_attempts": 1},
    )
    make_job(alpha, clock, name="dag-a", schedule=None)
    # b takes a few seconds, so that the DAG run is still running when its page opens
    make_job(
        alpha,
        clock,
        name="dag-b",
        schedule=None,
        target={"type": "task", "task": "builtin.sleep"},
        payload={"seconds": 4},
    )
    make_job(alpha, clock, name="dag-c", schedule=None)


@pytest.fixture
def operator_user(stack):
    connection.set_schema_to_public()
    users = get_user_model().objects
    users.filter(username="browser-ops").delete()
    users.create_superuser(username="browser-ops", password="ops-password-1", email="")
    yield "browser-ops", "ops-password-1"
    from tenants.services import tenant_resume

    beta = stack["world"]["beta"].tenant
    beta.refresh_from_db()
    tenant_resume(tenant=beta)
    connection.set_schema_to_public()
    users.filter(username="browser-ops").delete()


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield chromium
        chromium.close()


def _page(browser, viewport=(1280, 860)):
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    return page


def _login(page, base: str, user: str, password: str) -> None:
    page.goto(f"{base}/login/")
    page.get_by_label("User name").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()
    assert page.url == f"{base}/", page.content()[-3000:]


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_a_tenant_manages_its_jobs_in_the_browser(stack, seeded, browser):
    from playwright.sync_api import expect

    alpha, beta = stack["world"]["alpha"], stack["world"]["beta"]
    base = f"http://{alpha.domain}:{stack['port']}"
    page = _page(browser)
    _login(page, base, alpha.admin_user, alpha.admin_password)

    # Create a job through the form, watching the live preview as we type.
    page.goto(f"{base}/jobs/new")
    page.get_by_label("Name", exact=True).fill("browser-report")
    page.get_by_role("textbox", name="Cron expression", exact=True).fill("30 2 * * *")
    page.get_by_label("Time zone").fill("Europe/Berlin")
    expect(page.locator("#preview")).to_contain_text("At 02:30 (Europe/Berlin)")
    expect(page.locator("#preview li")).to_have_count(6)
    page.get_by_role("textbox", name="Cron expression", exact=True).fill("30 2 * * MON-FRY")
    expect(page.locator("#preview")).to_contain_text("'FRY' is not a valid value")
    page.get_by_role("textbox", name="Cron expression", exact=True).fill("30 2 * * *")
    expect(page.locator("#preview")).to_contain_text("At 02:30")
    _shot(page, "job-form")
    page.get_by_role("button", name="Create job").click()
    expect(page.locator("h1")).to_contain_text("browser-report")
    job_url = page.url

    # It is in the list with its next run.
    page.goto(f"{base}/jobs/")
    row = page.locator("tr", has_text="browser-report")
    expect(row).to_contain_text("At 02:30 (Europe/Berlin)")
    expect(row.locator("time")).to_have_count(1)

    # Run it now and watch the run reach `succeeded` without reloading.
    page.goto(job_url)
    page.get_by_role("button", name="Run now").click()
    page.wait_for_url("**/runs/**")
    run_url = page.url
    expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=40_000)
    assert page.url == run_url
    expect(page.locator("#run-live")).not_to_have_attribute("hx-trigger", "every 1s")
    _shot(page, "run")

    # Pause with a reason, then resume.
    page.goto(job_url)
    page.get_by_label("Pause, with a reason").fill("maintenance window")
    page.get_by_role("button", name="Pause", exact=True).click()
    expect(page.locator("h1 .badge")).to_have_text("paused")
    expect(page.locator("main")).to_contain_text("paused since")
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("h1 .badge")).to_have_text("active")

    # A failing job's run lands in the DLQ; replay it from there.
    page.goto(f"{base}/jobs/?q=always-fails")
    page.get_by_role("button", name="Run always-fails now").click()
    expect(page.locator("#run-status")).to_contain_text("dead", timeout=40_000)
    page.goto(f"{base}/dlq/")
    expect(page.locator("main")).to_contain_text("builtin.fail: attempt 1 fails as asked")
    _shot(page, "dlq")
    page.locator("input[name=run]").first.check()
    page.get_by_role("button", name="Replay selected").click()
    expect(page.locator(".messages")).to_contain_text("1 run replayed.")

    # Draw a diamond DAG through the UI: b's upstream picked from the search on b's page,
    # c's typed on its DAG page, d created through the form with both picked.
    page.goto(f"{base}/jobs/?q=dag-b")
    page.get_by_role("link", name="dag-b", exact=True).click()
    page.wait_for_load_state()  # htmx (deferred) listens from here on
    page.get_by_label("Add an upstream job").fill("dag-")
    page.get_by_role("button", name=re.compile(r"^Add dag-a \(#\d+\) as an upstream$")).click()
    expect(page.locator("#dag-panel")).to_contain_text("Added “dag-a” upstream of “dag-b”.")
    expect(page.locator("#dag-panel svg.dag path.edge")).to_have_count(1)
    page.goto(f"{base}/jobs/?q=dag-c")
    page.get_by_role("link", name="dag-c", exact=True).click()
    page.get_by_role("link", name="DAG", exact=True).click()
    page.wait_for_load_state()
    page.get_by_label("Add an upstream job").fill("dag-zz")
    page.get_by_role("button", name="Add edge").click()
    expect(page.locator("#edge-add-error")).to_contain_text("no job is named “dag-zz”")
    expect(page.get_by_label("Add an upstream job")).to_have_value("dag-zz")
    page.get_by_label("Add an upstream job").fill("dag-a")
    page.get_by_role("button", name="Add edge").click()
    expect(page.locator("#dag-panel")).to_contain_text("Added “dag-a” upstream of “dag-c”.")
    page.goto(f"{base}/jobs/new")
    page.get_by_label("Name", exact=True).fill("dag-d")
    page.get_by_label("None: runs after its upstreams (or on demand)").check()
    for upstream in ("dag-b", "dag-c"):
        page.get_by_label("Add upstream jobs").fill(upstream)
        page.get_by_role(
            "button", name=re.compile(rf"^Add {upstream} \(#\d+\) to the upstream jobs$")
        ).click()
        expect(page.get_by_role("checkbox", name=re.compile(rf"^{upstream} #\d+$"))).to_be_checked()
    expect(page.get_by_label("Add upstream jobs")).to_have_value("")
    page.get_by_role("button", name="Create job").click()
    expect(page.locator("h1")).to_contain_text("dag-d")
    expect(page.locator("#dag-panel svg.dag path.edge")).to_have_count(4)

    # Run a now: its run page links to the DAG run it started, whose page colours the
    # nodes as their runs end, without reloading.
    page.goto(f"{base}/jobs/?q=dag-a")
    page.get_by_role("button", name="Run dag-a now").click()
    page.locator("#run-dag-run").click()
    page.wait_for_url("**/dag-runs/**")
    dag_run_url = page.url
    page.evaluate("window.loadedOnce = true")
    live = page.locator("#dag-run-live")
    assert live.get_attribute("data-status") == "running"  # b sleeps 4 s
    expect(page.locator('svg.dag g.node[data-status="running"]')).to_have_count(1)
    _shot(page, "dag-run")  # b running, d waiting for it
    expect(live).to_have_attribute("data-status", "succeeded", timeout=40_000)
    expect(page.locator('svg.dag g.node[data-status="succeeded"]')).to_have_count(4)
    expect(page.locator("table.dag-run-jobs")).not_to_contain_text("not reached yet")
    assert page.url == dag_run_url and page.evaluate("window.loadedOnce") is True
    expect(live).not_to_have_attribute("hx-trigger", "every 1s")
    page.goto(f"{base}/jobs/?q=dag-d")
    page.get_by_role("link", name="dag-d", exact=True).click()
    page.get_by_role("link", name="DAG", exact=True).click()
    expect(page.locator('svg.dag g.node[data-status="succeeded"]')).to_have_count(4)
    dag_run_path = dag_run_url.split(str(stack["port"]), 1)[1]
    expect(page.locator(f'a[href="{dag_run_path}"]')).to_have_count(2)  # latest, and the list
    dag_url = page.url
    _shot(page, "dag")

    # The main pages, for the README.
    page.goto(f"{base}/jobs/")
    _shot(page, "jobs")
    page.goto(job_url)
    _shot(page, "job-detail")
    page.goto(f"{base}/")
    _shot(page, "overview")
    phone = _page(browser, viewport=(390, 844))
    _login(phone, base, alpha.admin_user, alpha.admin_password)
    phone.goto(f"{base}/jobs/")
    _shot(phone, "jobs-phone")

    # A second tenant sees none of it.
    other = _page(browser)
    beta_base = f"http://{beta.domain}:{stack['port']}"
    _login(other, beta_base, beta.admin_user, beta.admin_password)
    other.goto(f"{beta_base}/jobs/")
    for name in ("browser-report", "always-fails", "dag-a"):
        expect(other.locator("main")).not_to_contain_text(name)
    for url in (job_url, dag_url, dag_run_url):
        path = url.split(str(stack["port"]), 1)[1]
        response = other.goto(f"{beta_base}{path}")
        assert response.status == 404, path
    other.goto(f"{beta_base}/jobs/new")
    other.get_by_label("Add upstream jobs").fill("dag-")
    expect(other.locator("#upstream-pick")).to_contain_text("No other live job matches")


def test_an_operator_suspends_a_tenant_in_admin(stack, operator_user, browser):
    from playwright.sync_api import expect

    beta = stack["world"]["beta"]
    public = f"http://localhost:{stack['port']}"
    page = _page(browser)
    page.goto(f"{public}/admin/")
    page.get_by_label("Username").fill(operator_user[0])
    page.get_by_label("Password").fill(operator_user[1])
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("link", name="Fleet health").first.click()
    expect(page.locator("#content")).to_contain_text("Queue depth")
    _shot(page, "admin-fleet")
    page.goto(f"{public}/admin/tenants/tenant/")
    page.locator("tr", has_text="beta").locator("input.action-select").check()
    page.locator("select[name=action]").select_option("suspend_tenants")
    page.get_by_role("button", name="Go").click()
    expect(page.locator(".messagelist")).to_contain_text("1 tenant(s) suspended.")
    expect(page.locator("tr", has_text="beta")).to_contain_text("suspended")
    _shot(page, "admin-tenants")
    portal = _page(browser)
    response = portal.goto(f"http://{beta.domain}:{stack['port']}/login/")
    assert response.status == 403
    expect(portal.locator("h1")).to_contain_text("is suspended")
