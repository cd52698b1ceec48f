"""What a new user meets first: the public host's root and unknown paths answer a helpful
page, with DEBUG on too (as under `make run`), never Django's debug 404; paths under /api
answer problem+json; a tenant domain's /admin/ says admin lives on the public host."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

DEBUG_PAGE = b"Page not found at"


@pytest.fixture(params=[False, True], ids=["debug-off", "debug-on"])
def debug(request, settings) -> bool:
    settings.DEBUG = request.param
    return request.param


def _member(world) -> Client:
    client = Client(HTTP_HOST=world.domain)
    client.post("/login/", {"username": world.admin_user, "password": world.admin_password})
    return client


def _operator() -> Client:
    user, _ = get_user_model().objects.get_or_create(
        username="first-run-operator", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    return client


def test_public_root_links_to_the_portal_the_api_docs_and_admin(live, debug):
    page = Client(HTTP_HOST="localhost").get("/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"http://{live['alpha'].domain}/login/" in html
    assert 'href="/api/v1/docs"' in html and 'href="/admin/"' in html


@pytest.mark.parametrize("path", ["/no/such/page", "/jobs/", "/favicon.ico"])
def test_unknown_public_paths_answer_the_helpful_page(live, debug, path):
    page = Client(HTTP_HOST="localhost").get(path)
    assert page.status_code == 404
    assert DEBUG_PAGE not in page.content
    assert b'href="/api/v1/docs"' in page.content and b'href="/admin/"' in page.content


def test_an_operators_unknown_admin_page_is_the_helpful_page_not_the_debug_one(live, debug):
    page = _operator().get("/admin/no-such-app/")
    assert page.status_code == 404
    assert DEBUG_PAGE not in page.content and b'href="/api/v1/docs"' in page.content


@pytest.mark.parametrize(
    "path", ["/jobs/999999/", "/runs/00000000-0000-0000-0000-000000000000/", "/no/such/page"]
)
def test_a_tenant_domains_unknown_objects_and_paths_answer_the_portals_page(live, debug, path):
    page = _member(live["alpha"]).get(path)
    assert page.status_code == 404
    assert DEBUG_PAGE not in page.content
    assert b"Not found" in page.content and b'href="/jobs/"' in page.content


@pytest.mark.parametrize("path", ["/admin/", "/admin/login/", "/admin/tenants/tenant/"])
def test_a_tenant_domains_admin_points_to_the_public_host(live, debug, path):
    page = Client(HTTP_HOST=live["alpha"].domain).get(path)
    assert page.status_code == 404
    assert b"public host" in page.content and b"http://localhost/admin/" in page.content


@pytest.mark.parametrize("host", ["localhost", "alpha.localhost"])
@pytest.mark.parametrize("path", ["/api", "/api/", "/api/v1", "/api/v2/jobs", "/api/v1/nope"])
def test_paths_under_api_answer_problem_json(live, debug, host, path):
    response = Client(HTTP_HOST=host).get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert "/api/v1/docs" in response.json()["detail"]
