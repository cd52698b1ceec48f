"""Every step of an iteration is bounded, and the lease is renewed between its units of
work (defect: relay, reap and materialise did queries per tenant in one go, and at a few
thousand tenants one iteration outlasted the lease). The figures at 2,000 tenants come
from `make bench ARGS="many-tenants"`."""

from __future__ import annotations

from django_tenants.utils import schema_context

from beat import sweeps
from core.clock import FakeClock
from jobs.models import Job
from runs import states
from runs.models import Run

from .helpers import make_job, new_engine, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)


def test_a_sweep_goes_on_in_the_next_iteration_where_its_budget_stopped_it(
    live, redis_client, monkeypatch
):
    monkeypatch.setattr(sweeps, "CHUNK_TENANTS", 1)
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    for tenant in (alpha, beta):
        make_job(tenant, clock, schedule=None)
    engine = new_engine(redis_client, clock, sweep_budget_seconds=0.0, relay_interval_seconds=10)
    checkpoints = []
    engine.checkpoint = lambda: checkpoints.append(1)
    for tenant in (alpha, beta):  # runs waiting in PostgreSQL, in no index
        with schema_context(tenant.schema_name):
            Run.objects.create(
                job=Job.objects.get(),
                trigger="manual",
                scheduled_for=START,
                due_at=START,
                status=states.SCHEDULED,
            )
    clock.advance(5)
    assert engine.relay(force=True) == 1  # one tenant per slice: alpha
    assert engine.takeover_sweep.running
    assert engine.finish_takeover_relay() == 1  # next iteration: beta
    assert not engine.takeover_sweep.running
    assert len(checkpoints) >= 2  # the lease is renewed between the two
    assert engine.fire().published == 2


def test_a_sweep_stops_as_soon_as_a_run_is_due(live, redis_client, monkeypatch):
    monkeypatch.setattr(sweeps, "CHUNK_TENANTS", 1)
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock, sweep_budget_seconds=60.0)
    clock.set(utc(2026, 6, 1, 12, 0, 40))
    engine.materialise()
    clock.set(utc(2026, 6, 1, 12, 1))  # the run is due now
    engine.reconcile()
    assert engine.reconcile_sweep.running  # stopped after one chunk, to fire first
    assert engine.fire().published == 1
    assert [r.status for r in runs_of(alpha)] == [states.QUEUED]
