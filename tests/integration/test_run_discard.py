"""Discarding dead runs: one (`run_discard`) or many (`dlq_discard`); only dead runs."""

from __future__ import annotations

import pytest
from django_tenants.utils import schema_context

from core.clock import FakeClock
from jobs.models import AuditEvent
from runs import states
from runs.models import Run
from runs.selectors import dlq_list
from runs.services import RunStateError, dlq_discard, run_discard

from .helpers import ACTOR, make_job, utc

NOW = utc(2026, 6, 1, 12)


def _run(job, status: str, error: str = "") -> Run:
    return Run.objects.create(
        job=job, trigger="manual", scheduled_for=NOW, due_at=NOW, status=status, error=error
    )


def test_a_discarded_dead_run_leaves_the_dlq_as_cancelled_with_its_last_error(live):
    alpha = live["alpha"]
    clock = FakeClock(NOW)
    job = make_job(alpha.tenant, clock, schedule=None)
    with schema_context(alpha.schema):
        dead = _run(job, states.DEAD, "HTTP 500")
        done = _run(job, states.SUCCEEDED)
        run = run_discard(tenant=alpha.tenant, actor=ACTOR, run_id=dead.id, clock=clock)
        assert run.status == states.CANCELLED
        assert "discarded" in run.error and "HTTP 500" in run.error
        assert list(dlq_list()) == []
        assert AuditEvent.objects.filter(action="discard", run_id=dead.id).exists()
        with pytest.raises(RunStateError):
            run_discard(tenant=alpha.tenant, actor=ACTOR, run_id=done.id, clock=clock)


def test_bulk_discard_reports_each_run(live):
    alpha = live["alpha"]
    clock = FakeClock(NOW)
    job = make_job(alpha.tenant, clock, schedule=None)
    with schema_context(alpha.schema):
        dead = [_run(job, states.DEAD) for _ in range(2)]
        queued = _run(job, states.QUEUED)
        missing = "01a22689-11d9-754e-8aa1-48ddf05cae1b"
        result = dlq_discard(
            tenant=alpha.tenant,
            actor=ACTOR,
            run_ids=[dead[0].id, dead[1].id, queued.id, missing],
            clock=clock,
        )
        assert sorted(result.discarded) == sorted(str(r.id) for r in dead)
        assert result.not_found == [missing]
        assert result.not_discardable == {str(queued.id): "status is queued, not dead"}
        assert Run.objects.get(id=queued.id).status == states.QUEUED
