"""Whole runscheduler processes: started together, and the leader killed with SIGKILL.

Invariants 1 and 2 at process level: every (job, slot) in the window gets exactly one
run, and every run whose instant passed was published.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime

import pytest

from core.clock import SystemClock
from core.keys import leader_info_key

from ..integration.helpers import make_job, message_args, queued_messages, runs_of
from .procs import scheduler, wait_for

pytestmark = pytest.mark.slow
ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_LOOKAHEAD_SECONDS": "3",
    "SCHEDULER_RELAY_INTERVAL_SECONDS": "2",
    # No worker drains the broker here: every fire must be there to be counted. Fair
    # admission runs, with room for all (and the tenant's quota raised below).
    "SCHEDULER_ADMISSION_BACKLOG_MIN": str(10**9),
}


@pytest.fixture(autouse=True)
def _quota_out_of_the_way(live):
    from tenants.models import Tenant

    Tenant.objects.filter(slug="alpha").update(max_concurrency=1_000_000)
    yield
    Tenant.objects.filter(slug="alpha").update(max_concurrency=100)


def _leader(client) -> str | None:
    raw = client.get(leader_info_key())
    return raw.decode() if raw else None


def _assert_each_executed_once(tenant, runs) -> None:
    """Every run of `runs` (the tenant's) has exactly one attempt."""
    from django_tenants.utils import schema_context

    from runs.models import Attempt

    with schema_context(tenant.schema_name):
        attempts = Counter(
            Attempt.objects.filter(run__in=[r.id for r in runs]).values_list("run_id", flat=True)
        )
    assert set(attempts.values()) == {1}, tenant.slug  # each executed once
    assert len(attempts) == len(runs), tenant.slug


def _wait_succeeded(tenants, until: datetime, timeout: float) -> None:
    """Until every run of `tenants` due by `until` has succeeded."""
    wait_for(
        lambda: all(
            r.status == "succeeded" for t in tenants for r in runs_of(t, due_at__lte=until)
        ),
        timeout=timeout,
        interval=0.5,
    )


def _assert_every_slot_once(runs, jobs, until: datetime, interval: float = 1.0) -> None:
    """Every job of `jobs` has one run per slot (`interval` seconds apart) up to `until`."""
    by_job = defaultdict(list)
    for run in runs:
        by_job[run.job_id].append(run.scheduled_for)
    for job in jobs:
        slots = sorted(by_job[job.id])
        assert len(slots) == len(set(slots)), f"job {job.id}: a slot has two runs"
        due = [s for s in slots if s <= until]
        steps = {(b - a).total_seconds() for a, b in itertools.pairwise(due)}
        assert steps == {float(interval)}, f"job {job.id}: slots missing in {due[0]}..{due[-1]}"


def test_leader_killed_mid_run_loses_no_fire_and_doubles_none(live, redis_client, tmp_path):
    alpha = live["alpha"].tenant
    jobs = [
        make_job(alpha, SystemClock(), name=f"every-second-{i}", schedule={"interval_seconds": 1})
        for i in range(10)
    ]
    procs = [scheduler(tmp_path, "s1", **ENV), scheduler(tmp_path, "s2", **ENV)]
    try:
        first = wait_for(lambda: _leader(redis_client), timeout=30)
        time.sleep(4)
        leader = next(p for p in procs if first.endswith(f":{p.pid}"))
        standby = next(p for p in procs if p is not leader)
        killed_at = time.monotonic()
        leader.kill9()
        second = wait_for(
            lambda: (_leader(redis_client) or "").endswith(f":{standby.pid}"), timeout=15
        )
        takeover = time.monotonic() - killed_at
        time.sleep(4)
        stopped_at = datetime.now(UTC)
    finally:
        for proc in procs:
            proc.stop()
    assert second
    print(f"takeover after SIGKILL: {takeover:.2f}s")
    runs = runs_of(alpha)
    _assert_every_slot_once(runs, jobs, stopped_at)
    published = {message_args(m)[1] for m in queued_messages(redis_client)}
    overdue = [r for r in runs if r.due_at.timestamp() < stopped_at.timestamp() - 1.5]
    assert overdue
    assert [r for r in overdue if str(r.id) not in published] == []
    assert all(r.status == "queued" for r in overdue)
    assert "took the lease" in standby.log()


def test_two_schedulers_started_at_once_fire_each_slot_once(live, redis_client, tmp_path):
    alpha = live["alpha"].tenant
    jobs = [
        make_job(alpha, SystemClock(), name=f"j{i}", schedule={"interval_seconds": 1})
        for i in range(5)
    ]
    procs = [scheduler(tmp_path, f"s{i}", **ENV) for i in range(2)]
    try:
        wait_for(lambda: _leader(redis_client), timeout=30)
        time.sleep(5)
        stopped_at = datetime.now(UTC)
        # Read before stopping: a stopped leader hands the lease to the other at once.
        leaders = [p for p in procs if "took the lease" in p.log()]
    finally:
        for proc in procs:
            proc.stop()
    assert len(leaders) == 1
    _assert_every_slot_once(runs_of(alpha), jobs, stopped_at)
