"""A suspended tenant: the leader materialises none of its jobs (while another tenant's
are), its API answers 403 with a problem; resumed, its due jobs come back."""

from __future__ import annotations

import json

from django.test import Client
from django_tenants.utils import schema_context

from core.clock import FakeClock
from jobs.models import AuditEvent
from jobs.services import job_pause
from tenants.services import tenant_resume, tenant_suspend

from .helpers import ACTOR, make_job, new_engine, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)


def test_a_suspended_tenants_due_job_is_not_materialised_while_another_tenants_is(
    live, redis_client
):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, name="alpha-every-minute", schedule={"cron": "* * * * *"})
    make_job(beta, clock, name="beta-every-minute", schedule={"cron": "* * * * *"})
    assert tenant_suspend(tenant=alpha, reason="unpaid", now=clock.now())
    try:
        engine = new_engine(redis_client, clock, lookahead_seconds=30)
        clock.advance(31)  # the 12:01 slots are inside the lookahead window
        engine.materialise()
        assert runs_of(alpha) == []
        assert [r.scheduled_for for r in runs_of(beta)] == [utc(2026, 6, 1, 12, 1)]
        assert not tenant_suspend(tenant=alpha, now=clock.now())  # already suspended
    finally:
        assert tenant_resume(tenant=alpha)
    assert not tenant_resume(tenant=alpha)
    # Resumed: its jobs are back in the index (below), and the due one fires again.
    engine = new_engine(redis_client, clock, lookahead_seconds=30)
    clock.advance(60)
    engine.materialise()
    assert runs_of(alpha), "the resumed tenant's job is materialised again"


def test_a_suspended_tenants_api_answers_403_with_a_problem(live):
    alpha = live["alpha"]
    tenant_suspend(tenant=alpha.tenant, reason="incident", now=utc(2026, 6, 1))
    try:
        for host in ("localhost", alpha.domain):
            response = Client().get(
                "/api/v1/jobs", HTTP_HOST=host, HTTP_AUTHORIZATION=f"Bearer {alpha.token}"
            )
            assert response.status_code == 403
            assert response["Content-Type"] == "application/problem+json"
            body = json.loads(response.content)
            assert body["type"] == "urn:tickwork:problem:tenant-suspended"
            assert "suspended" in body["detail"] and "alpha" in body["detail"]
        other = Client().get(
            "/api/v1/jobs", HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {live['beta'].token}"
        )
        assert other.status_code == 200
    finally:
        tenant_resume(tenant=alpha.tenant)
    with schema_context(alpha.schema):
        assert not AuditEvent.objects.filter(action="create").exists()


def test_resuming_a_tenant_puts_all_its_jobs_back_into_the_index_at_once(live, redis_client):
    """The leader drops a suspended tenant's index entries (to it, the tenant is gone);
    the reconcile sweep alone would take 1,000 jobs per pass: resume writes them all."""
    from django.db import transaction

    from core import index
    from core.keys import index_key

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = [
        make_job(alpha, clock, name=f"hourly-{i}", schedule={"cron": "0 * * * *"}) for i in range(3)
    ]
    paused = make_job(alpha, clock, name="paused", schedule={"cron": "0 * * * *"})
    with schema_context(alpha.schema_name):
        job_pause(tenant=alpha, actor=ACTOR, job_id=paused.id, clock=clock)
    tenant_suspend(tenant=alpha, reason="unpaid", now=clock.now())
    members = [index.member(alpha.id, j.id) for j in [*jobs, paused]]
    redis_client.zrem(index_key(), *members)  # what the leader does for a gone tenant
    with transaction.atomic():
        assert tenant_resume(tenant=alpha)
        assert redis_client.zmscore(index_key(), members) == [None] * 4  # after the commit
    scores = redis_client.zmscore(index_key(), members)
    assert scores[:3] == [utc(2026, 6, 1, 13, 0).timestamp()] * 3
    assert scores[3] is None  # a paused job stays out
