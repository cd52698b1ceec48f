"""Fair admission against real PostgreSQL and Redis (beat/admission_control.py): quotas
hold, a flooding tenant does not starve another, weights share admissions, priorities
hold within a tenant, a lost end report or an emptied Redis leaks no slot and admits
nothing twice. The leader is driven by hand; each published message is executed as a
worker would, which reports the end the way workers do."""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter

import pytest
from django.db import connection
from django_tenants.utils import schema_context

from beat.admission_control import AdmissionConfig
from beat.engine import EngineConfig
from beat.loop import SchedulerProcess
from core.clock import FakeClock
from core.keys import ended_key
from jobs.services import job_pause
from runs import states, worker_registry
from runs.execution import run_execute
from runs.models import Run
from runs.notify import ENDED_REPORTER
from runs.services import job_trigger
from tenants.models import Tenant

from .helpers import ACTOR, make_job, message_args, new_engine, queued_messages, runs_of, utc

START = utc(2026, 6, 1, 12, 0, 0)
NOOP = {"type": "task", "task": "builtin.noop"}


@pytest.fixture
def limits(live):
    """Set tenants' quota and weight for one test; put the defaults back after."""
    changed: list[int] = []

    def set_limits(tenant, *, max_concurrency=None, weight=None) -> None:
        fields = {}
        if max_concurrency is not None:
            fields["max_concurrency"] = max_concurrency
        if weight is not None:
            fields["weight"] = weight
        Tenant.objects.filter(id=tenant.id).update(**fields)
        changed.append(tenant.id)

    yield set_limits
    Tenant.objects.filter(id__in=changed).update(max_concurrency=100, weight=1)


def _engine(client, clock, **admission):
    admission.setdefault("backlog_min", 1000)
    return new_engine(client, clock, admission=AdmissionConfig(**admission))


def _trigger(tenant, clock, job, count: int = 1) -> list[Run]:
    runs = []
    with schema_context(tenant.schema_name):
        for _ in range(count):
            runs.append(job_trigger(tenant=tenant, actor=ACTOR, job_id=job.id, clock=clock)[0])
    return runs


def _take_messages(client) -> list[list]:
    messages = [message_args(m) for m in queued_messages(client)]
    for key in client.keys("runs.*"):
        client.delete(key)
    return messages


def _in_flight(tenant) -> int:
    with schema_context(tenant.schema_name):
        return Run.objects.filter(status__in=states.ACTIVE).count()


def _execute(messages, clock, claimed: Counter | None = None) -> None:
    for schema, run_id, attempt in messages:
        with schema_context(schema):
            outcome = run_execute(
                schema=schema, run_id=run_id, attempt=attempt, worker="w", clock=clock
            )
        if claimed is not None and outcome != "duplicate":
            claimed[(run_id, attempt)] += 1
    assert ENDED_REPORTER.flush(5)  # the workers' reports are in Redis, as after a task


def _cycle(engine, clock) -> None:
    engine.read_ended()
    engine.load_run_index()
    engine.fire()


def test_a_tenant_never_has_more_runs_in_flight_than_its_quota(live, redis_client, limits):
    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=2)
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, target=NOOP)
    _trigger(alpha, clock, job, 5)
    engine = _engine(redis_client, clock)
    _cycle(engine, clock)
    first = _take_messages(redis_client)
    assert len(first) == 2 and _in_flight(alpha) == 2
    _cycle(engine, clock)  # nothing ended: nothing more goes
    assert _take_messages(redis_client) == []
    _execute(first[:1], clock)  # one ends; the worker reports it
    _cycle(engine, clock)
    second = _take_messages(redis_client)
    assert len(second) == 1 and _in_flight(alpha) == 2
    done = 1
    pending = first[1:] + second
    while pending:
        _execute(pending, clock)
        done += len(pending)
        _cycle(engine, clock)
        pending = _take_messages(redis_client)
        assert _in_flight(alpha) <= 2
        assert len(pending) <= 2
    with schema_context(alpha.schema_name):
        assert Run.objects.filter(status=states.SUCCEEDED).count() == 5 == done


def test_a_flooding_tenant_does_not_delay_another_tenants_run(live, redis_client):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    flood = make_job(alpha, clock, name="flood", schedule=None, target=NOOP)
    quiet = make_job(beta, clock, name="quiet", schedule=None, target=NOOP)
    _trigger(alpha, clock, flood, 60)
    clock.advance(1)
    _trigger(beta, clock, quiet)  # due after all of alpha's
    engine = _engine(redis_client, clock, backlog_min=4)  # the broker takes 4 at a time
    _cycle(engine, clock)
    schemas = Counter(schema for schema, _, _ in _take_messages(redis_client))
    assert schemas == {alpha.schema_name: 3, beta.schema_name: 1}


def test_backlogged_tenants_share_admissions_by_weight(live, redis_client, limits):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    limits(alpha, weight=3)
    clock = FakeClock(START)
    for tenant in (alpha, beta):
        job = make_job(tenant, clock, schedule=None, target=NOOP)
        _trigger(tenant, clock, job, 90)
    engine = _engine(redis_client, clock, backlog_min=8)
    counts: Counter = Counter()
    for _ in range(10):  # the broker drained between rounds, as busy workers would
        _cycle(engine, clock)
        messages = _take_messages(redis_client)
        counts.update(schema for schema, _, _ in messages)
        _execute(messages, clock)
    total = counts[alpha.schema_name] + counts[beta.schema_name]
    assert total == 80
    assert abs(counts[alpha.schema_name] / total - 0.75) <= 0.05


def test_within_a_tenant_high_priority_goes_before_older_low_priority(live, redis_client, limits):
    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1)
    clock = FakeClock(START)
    low = make_job(alpha, clock, name="low", schedule=None, target=NOOP, priority="low")
    high = make_job(alpha, clock, name="high", schedule=None, target=NOOP, priority="high")
    _trigger(alpha, clock, low, 3)
    clock.advance(5)
    [urgent] = _trigger(alpha, clock, high)
    engine = _engine(redis_client, clock)
    _cycle(engine, clock)
    [message] = queued_messages(redis_client)
    assert message_args(message)[1] == str(urgent.id)
    assert message["queue"].startswith("runs.high.")


def test_a_lost_end_report_holds_the_slot_only_until_the_recount(live, redis_client, limits):
    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1)
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, target=NOOP)
    _trigger(alpha, clock, job, 2)
    engine = _engine(redis_client, clock, recount_seconds=5)
    _cycle(engine, clock)
    _execute(_take_messages(redis_client), clock)
    redis_client.delete(ended_key())  # the worker died before its report reached Redis
    _cycle(engine, clock)
    assert _take_messages(redis_client) == []  # the leader still counts the run in flight
    clock.advance(5)
    _cycle(engine, clock)  # the recount finds it ended
    assert len(_take_messages(redis_client)) == 1


def test_the_watermark_follows_the_live_workers(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, target=NOOP)
    _trigger(alpha, clock, job, 30)
    engine = _engine(redis_client, clock, backlog_min=2, backlog_per_slot=2)
    _cycle(engine, clock)
    assert len(queued_messages(redis_client)) == 2  # no worker registered: the minimum
    worker_registry.register(5, client=redis_client)
    _cycle(engine, clock)
    assert len(queued_messages(redis_client)) == 10  # 5 slots, 2 messages each


def test_redis_emptied_during_a_flood_rebuilds_the_counts_and_admits_nothing_twice(
    live, redis_client, limits
):
    """A real leader loop; Redis loses everything (lease, indexes, broker lists, end
    reports) while a quota-bound flood is in flight. The leader steps down, leads again,
    counts the tenant's runs in flight from PostgreSQL, and the flood drains: never more
    than the quota in flight, no attempt executed twice, nobody stuck."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    limits(alpha, max_concurrency=3)
    clock = FakeClock(START)
    flood = make_job(alpha, clock, name="flood", schedule=None, target=NOOP)
    quiet = make_job(beta, clock, name="quiet", schedule=None, target=NOOP)
    _trigger(alpha, clock, flood, 20)
    _trigger(beta, clock, quiet, 2)
    config = EngineConfig(admission=AdmissionConfig(backlog_min=50, recount_seconds=1))
    process = SchedulerProcess(client=redis_client, clock=clock, config=config, holder="a:1")
    stop = threading.Event()
    stop.set()
    claimed: Counter = Counter()  # attempts a worker executed (a duplicate message claims none)
    flushed = False
    for _ in range(60):
        process.run_once(stop)
        messages = _take_messages(redis_client)
        assert _in_flight(alpha) <= 3
        if not flushed and messages:
            _execute(messages[:1], clock, claimed)  # one ends, the others stay queued...
            redis_client.flushdb()  # ...and Redis forgets everything, their messages too
            flushed = True
            continue
        _execute(messages, clock, claimed)
        clock.advance(1)
        with schema_context(alpha.schema_name):
            if Run.objects.exclude(status__in=states.TERMINAL).count() == 0:
                break
    connection.set_schema_to_public()
    assert flushed
    assert set(claimed.values()) == {1}, claimed.most_common(3)
    assert len(claimed) == 22
    for tenant, count in ((alpha, 20), (beta, 2)):
        with schema_context(tenant.schema_name):
            assert Run.objects.filter(status=states.SUCCEEDED).count() == count


def test_a_quota_raised_in_admin_takes_effect_without_a_restart(live, redis_client, limits):
    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1)
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, target=NOOP)
    _trigger(alpha, clock, job, 5)
    engine = _engine(redis_client, clock)
    _cycle(engine, clock)
    assert len(_take_messages(redis_client)) == 1
    limits(alpha, max_concurrency=4)  # an operator's edit (admin, provision_tenant --update)
    _cycle(engine, clock)
    assert _take_messages(redis_client) == []  # read again every few seconds, not per fire
    clock.advance(5)
    _cycle(engine, clock)
    assert len(_take_messages(redis_client)) == 3


def test_a_suspended_tenants_waiting_runs_are_not_admitted(live, redis_client, limits):
    """Found by a review: runs already waiting in the fair queue went on after a suspend."""
    from tenants.services import tenant_resume, tenant_suspend

    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1)
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, target=NOOP)
    _trigger(alpha, clock, job, 6)
    engine = _engine(redis_client, clock)
    _cycle(engine, clock)
    first = _take_messages(redis_client)
    assert len(first) == 1
    tenant_suspend(tenant=alpha, reason="abuse", now=clock.now())
    try:
        _execute(first, clock)
        clock.advance(5)  # the leader reads tenants' state again within its refresh
        for _ in range(3):
            _cycle(engine, clock)
            assert _take_messages(redis_client) == []
        assert engine.runs_waiting_for_admission() == 0
    finally:
        tenant_resume(tenant=Tenant.objects.get(id=alpha.id))
    engine.relay(force=True)  # resumed: the relay finds its waiting runs again
    clock.advance(5)
    _cycle(engine, clock)
    assert len(_take_messages(redis_client)) == 1


def test_a_run_claimed_from_a_stale_message_is_counted_at_the_next_recount(
    live, redis_client, limits
):
    """A worker claims a `scheduled` run from a stale message (a fire whose commit was
    lost after its push): the leader did not count it. The recount of a waiting tenant
    puts that right, so the tenant does not stay over its quota."""
    from runs.execution import claim_run

    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1)
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, target=NOOP)
    runs = _trigger(alpha, clock, job, 4)
    engine = _engine(redis_client, clock, recount_seconds=5)
    _cycle(engine, clock)
    admitted = _take_messages(redis_client)
    [(_, admitted_id, _)] = admitted
    stale = next(r for r in runs if str(r.id) != admitted_id)
    assert claim_run(
        schema=alpha.schema_name, run_id=str(stale.id), attempt=1, worker="w2", now=clock.now()
    )
    _execute(admitted, clock)  # the admitted one ends: the leader counts 0, the truth is 1
    clock.advance(5)
    for _ in range(3):
        _cycle(engine, clock)
        _execute(_take_messages(redis_client), clock)
        assert _in_flight(alpha) <= 1


def _statuses(tenant) -> list[tuple[str, str, str]]:
    return [(r.scheduled_for.strftime("%H:%M"), r.status, r.skip_reason) for r in runs_of(tenant)]


def _set_status(tenant, run, status) -> None:
    with schema_context(tenant.schema_name):
        Run.objects.filter(pk=run.pk).update(status=status)


def test_replace_replaces_the_running_run_even_when_the_tenant_is_at_its_quota(
    live, redis_client, limits
):
    """Found by a review: with the tenant at its quota (because of that very run), the
    newer slot waited in the fair queue behind the run it should replace."""
    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1)
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"}, concurrency_policy="replace")
    engine = _engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 1))
    engine.materialise()
    engine.fire()
    [first] = runs_of(alpha)
    _set_status(alpha, first, states.RUNNING)  # claimed; its task hangs
    for minute in (2, 3, 4):
        clock.set(utc(2026, 6, 1, 12, minute))
        engine.materialise()
        _cycle(engine, clock)
    assert _statuses(alpha)[:4] == [
        ("12:01", states.CANCELLED, ""),
        ("12:02", states.CANCELLED, ""),
        ("12:03", states.CANCELLED, ""),
        ("12:04", states.QUEUED, ""),
    ]


def test_forbid_skips_overlapping_slots_even_when_the_tenant_is_at_its_quota(
    live, redis_client, limits
):
    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1)
    clock = FakeClock(START)
    make_job(alpha, clock, schedule={"cron": "* * * * *"}, concurrency_policy="forbid")
    engine = _engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 1))
    engine.materialise()
    engine.fire()
    _take_messages(redis_client)
    [first] = runs_of(alpha)
    _set_status(alpha, first, states.RUNNING)
    for minute in (2, 3, 4):
        clock.set(utc(2026, 6, 1, 12, minute))
        engine.materialise()
        _cycle(engine, clock)
    assert engine.runs_waiting_for_admission() == 0  # skipped, not waiting for a slot
    assert [s for s in _statuses(alpha) if s[2] == states.SKIP_OVERLAP] == [
        ("12:02", states.SKIPPED, states.SKIP_OVERLAP),
        ("12:03", states.SKIPPED, states.SKIP_OVERLAP),
        ("12:04", states.SKIPPED, states.SKIP_OVERLAP),
    ]


# --- runs passed for a policy decision take no slot (an audit's probes) ----------------


def test_a_paused_jobs_manual_runs_wait_for_the_quota_like_any_other(live, redis_client, limits):
    """Found by an audit: at the quota, a paused job's waiting runs went to the fire as
    'decided by the pause', and the fire queued its manual runs (a pause skips schedule
    slots only): quota 1, four runs in flight."""
    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1)
    clock = FakeClock(START)
    busy = make_job(alpha, clock, name="busy", schedule=None, target=NOOP)
    paused = make_job(alpha, clock, name="paused", schedule=None, target=NOOP)
    _trigger(alpha, clock, busy, 2)
    engine = _engine(redis_client, clock)
    _cycle(engine, clock)
    first = _take_messages(redis_client)
    assert len(first) == 1
    with schema_context(alpha.schema_name):
        job_pause(tenant=alpha, actor=ACTOR, job_id=paused.id, clock=clock)
    manual = _trigger(alpha, clock, paused, 3)
    _cycle(engine, clock)
    assert _take_messages(redis_client) == []
    assert _in_flight(alpha) == 1
    assert engine.runs_waiting_for_admission() == 4  # busy's second and the three manual
    assert {r.status for r in runs_of(alpha, job_id=paused.id)} == {states.SCHEDULED}
    sent = first
    for _ in range(4):  # one at a time as each ends, the manual runs of the paused job too
        _execute(sent, clock)
        _cycle(engine, clock)
        sent = _take_messages(redis_client)
        assert len(sent) == 1 and _in_flight(alpha) == 1
    _execute(sent, clock)
    assert {r.status for r in runs_of(alpha, id__in=[r.id for r in manual])} == {states.SUCCEEDED}


def test_a_paused_jobs_schedule_slots_are_still_skipped_at_the_quota(live, redis_client, limits):
    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1)
    clock = FakeClock(START)
    busy = make_job(alpha, clock, name="busy", schedule=None, target=NOOP)
    cron = make_job(alpha, clock, name="cron", schedule={"cron": "* * * * *"})
    _trigger(alpha, clock, busy, 1)
    engine = _engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 30))
    engine.materialise()  # cron's 12:01 run is in memory, prepared
    _cycle(engine, clock)
    assert len(_take_messages(redis_client)) == 1  # busy's: the tenant is at its quota
    with schema_context(alpha.schema_name):
        job_pause(tenant=alpha, actor=ACTOR, job_id=cron.id, clock=clock)
    clock.set(utc(2026, 6, 1, 12, 1))
    _cycle(engine, clock)
    assert _take_messages(redis_client) == []
    assert _statuses(alpha)[-1:] == [("12:01", states.SKIPPED, states.SKIP_PAUSED)]
    assert engine.runs_waiting_for_admission() == 0


def test_replace_at_the_quota_queues_no_more_runs_than_it_cancels(live, redis_client, limits):
    """Found by an audit: a `replace` job with max_concurrent_runs=3 of a tenant at quota 1
    cancelled its one run and queued three."""
    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1)
    clock = FakeClock(START)
    job = make_job(
        alpha,
        clock,
        name="rep",
        schedule=None,
        target=NOOP,
        concurrency_policy="replace",
        max_concurrent_runs=3,
    )
    [old] = _trigger(alpha, clock, job, 1)
    engine = _engine(redis_client, clock)
    _cycle(engine, clock)
    assert len(_take_messages(redis_client)) == 1
    clock.advance(1)
    newer = []
    for _ in range(3):
        newer += _trigger(alpha, clock, job, 1)
        clock.advance(1)
    _cycle(engine, clock)
    [sent] = _take_messages(redis_client)
    assert _in_flight(alpha) == 1
    assert sent[1] == str(newer[-1].id)  # the newest takes the cancelled run's place
    with schema_context(alpha.schema_name):
        status = dict(Run.objects.values_list("id", "status"))
        errors = dict(Run.objects.values_list("id", "error"))
    assert status[old.id] == states.CANCELLED and errors[old.id] == "replaced by a newer run"
    for run in newer[:2]:  # admitted later, they would replace the newer run
        assert status[run.id] == states.CANCELLED
        assert errors[run.id] == "superseded by a newer run"
    assert engine.runs_waiting_for_admission() == 0
    # The leader let the cancelled attempt go at once: its count is the truth.
    assert engine.admission.stats(clock.now().timestamp())[alpha.id]["in_flight"] == 1


def test_a_policy_decision_made_stale_by_an_end_takes_no_uncounted_slot(
    live, redis_client, limits, monkeypatch
):
    """A `forbid` job's running run ends between the leader's read of the job (full: its
    waiting run is to be skipped) and the fire's own read (free: the run is to be
    queued). The leader has not read the end report yet, so that run would go on a slot
    it counts as taken: it waits for the report and goes through the fair queue."""
    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1)
    clock = FakeClock(START)
    job = make_job(alpha, clock, name="f", schedule=None, target=NOOP, concurrency_policy="forbid")
    _trigger(alpha, clock, job, 1)
    engine = _engine(redis_client, clock)
    _cycle(engine, clock)
    [first] = _take_messages(redis_client)
    [waiting] = _trigger(alpha, clock, job, 1)
    read = engine.admission.decided_by_policy

    def read_then_end():
        decided = read()
        _execute([first], clock)  # ends now; its report waits in Redis
        return decided

    monkeypatch.setattr(engine.admission, "decided_by_policy", read_then_end)
    engine.load_run_index()
    engine.fire()
    monkeypatch.undo()
    assert _take_messages(redis_client) == []
    assert engine.admission.stats(clock.now().timestamp())[alpha.id]["in_flight"] <= 1
    assert engine.runs_waiting_for_admission() == 1
    _cycle(engine, clock)  # the report read: the slot is free, and the run goes
    [sent] = _take_messages(redis_client)
    assert sent[1] == str(waiting.id) and _in_flight(alpha) == 1


# --- the recount of tenants with nothing waiting ----------------------------------------


def _leader_counts(engine, clock, tenant) -> int:
    stats = engine.admission.stats(clock.now().timestamp())
    return stats.get(tenant.id, {"in_flight": 0})["in_flight"]


def _admit_and_lose_the_reports(engine, redis_client, clock, tenant, count: int) -> None:
    job = make_job(tenant, clock, name=f"lost-{tenant.slug}", schedule=None, target=NOOP)
    _trigger(tenant, clock, job, count)
    _cycle(engine, clock)
    _execute(_take_messages(redis_client), clock)
    redis_client.delete(ended_key())  # the workers died before their reports reached Redis
    assert _in_flight(tenant) == 0


def test_a_tenant_with_nothing_waiting_is_recounted_too(live, redis_client):
    """Found by an audit: only tenants with runs waiting were recounted, so after a lost
    end report an idle tenant's count (scheduler_status's `admission`, the
    tickwork_admission_in_flight_runs metric) stayed wrong for good."""
    from io import StringIO

    from django.core.management import call_command

    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    engine = _engine(redis_client, clock, recount_seconds=5)
    _admit_and_lose_the_reports(engine, redis_client, clock, alpha, 2)
    _cycle(engine, clock)
    assert _leader_counts(engine, clock, alpha) == 2  # not yet: counted under 5 s ago
    clock.advance(5)
    _cycle(engine, clock)  # nothing is due or waiting: the fire still recounts
    assert _leader_counts(engine, clock, alpha) == 0
    engine.admission.publish(clock.now().timestamp())
    out = StringIO()
    call_command("scheduler_status", "--json", stdout=out)
    status = json.loads(out.getvalue())
    assert str(alpha.id) not in status["admission"]["tenants"]  # nothing in flight or waiting
    [row] = [r for r in status["tenants"] if r["tenant"] == alpha.slug]
    assert (row["in_flight"], row["waiting"]) == (0, 0)


def test_the_recount_of_tenants_with_nothing_waiting_is_bounded(live, redis_client, monkeypatch):
    from beat import admission_control

    monkeypatch.setattr(admission_control, "IDLE_RECOUNT_TENANTS", 1)
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    engine = _engine(redis_client, clock, recount_seconds=5)
    _admit_and_lose_the_reports(engine, redis_client, clock, alpha, 2)
    clock.advance(1)
    _admit_and_lose_the_reports(engine, redis_client, clock, beta, 3)
    clock.advance(5)  # both counts are stale now
    _cycle(engine, clock)
    assert (_leader_counts(engine, clock, alpha), _leader_counts(engine, clock, beta)) == (0, 3)
    _cycle(engine, clock)  # at most one pass a second
    assert _leader_counts(engine, clock, beta) == 3
    clock.advance(1)
    _cycle(engine, clock)
    assert _leader_counts(engine, clock, beta) == 0


def _hold_a_slot_each(engine, redis_client, clock, tenants) -> None:
    """Each tenant (quota 1) runs one of two runs and loses its end report, so its count
    holds the slot and its second run waits; each count a second younger than the last."""
    for tenant in tenants:
        job = make_job(tenant, clock, name=f"held-{tenant.slug}", schedule=None, target=NOOP)
        _trigger(tenant, clock, job, 2)
        _cycle(engine, clock)
        _execute(_take_messages(redis_client), clock)
        redis_client.delete(ended_key())  # the worker died before its report reached Redis
        clock.advance(1)


def test_the_recount_of_waiting_tenants_is_bounded_oldest_first(
    live, redis_client, limits, monkeypatch
):
    """With 10,000 tenants due together, recounting each before every fire held the fire
    7.8 s: at most STALE_RECOUNT_TENANTS stale counts are redone a call, the oldest first,
    and the rest wait for the next call."""
    from beat import admission_control

    monkeypatch.setattr(admission_control, "STALE_RECOUNT_TENANTS", 1)
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    for tenant in (alpha, beta):
        limits(tenant, max_concurrency=1)
    engine = _engine(redis_client, clock, recount_seconds=5)
    _hold_a_slot_each(engine, redis_client, clock, (alpha, beta))  # alpha's count older
    clock.advance(5)  # both counts are stale; each tenant still counts its ended run
    _cycle(engine, clock)
    assert [message_args(m)[0] for m in queued_messages(redis_client)] == [alpha.schema_name]
    _take_messages(redis_client)
    _cycle(engine, clock)
    assert [message_args(m)[0] for m in queued_messages(redis_client)] == [beta.schema_name]


def test_a_tenant_that_cannot_be_recounted_does_not_take_the_healthy_ones_turn(
    live, redis_client, limits, monkeypatch
):
    """A tenant whose recount fails keeps its old count, so it stays the oldest: had it
    kept its place among the STALE_RECOUNT_TENANTS, a hundred such tenants would starve
    every healthy tenant's recount (found by a review). While it backs off it is left out."""
    from beat import admission_control

    monkeypatch.setattr(admission_control, "STALE_RECOUNT_TENANTS", 1)
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    for tenant in (alpha, beta):
        limits(tenant, max_concurrency=1)
    engine = _engine(redis_client, clock, recount_seconds=5)
    ticks = [0.0]
    engine.faults._now = lambda: ticks[0]  # the back-off's clock, controlled here
    _hold_a_slot_each(engine, redis_client, clock, (alpha, beta))
    clock.advance(5)
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{alpha.schema_name}".runs_run RENAME TO runs_run_gone')
    try:
        _cycle(engine, clock)  # alpha's recount fails: it backs off
        assert not engine.faults.allowed(alpha.id)
        _cycle(engine, clock)
        assert [message_args(m)[0] for m in queued_messages(redis_client)] == [beta.schema_name]
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{alpha.schema_name}".runs_run_gone RENAME TO runs_run')


def test_counting_many_tenants_for_the_first_time_renews_the_lease_between_statements(
    live, redis_client, monkeypatch
):
    """At a takeover every waiting tenant is counted before it admits: thousands of
    statements, so the lease is renewed between them (it was lost after 7.8 s)."""
    from beat import admission_control

    monkeypatch.setattr(admission_control, "RECOUNT_CHUNK", 1)
    clock = FakeClock(START)
    for world in live.values():
        job = make_job(world.tenant, clock, schedule=None, target=NOOP)
        _trigger(world.tenant, clock, job, 1)
    engine = _engine(redis_client, clock)
    calls: list[str] = []
    original = admission_control.recount

    def counted(chunk):
        calls.append("recount")
        return original(chunk)

    monkeypatch.setattr(admission_control, "recount", counted)
    engine.checkpoint = lambda: calls.append("checkpoint")
    _cycle(engine, clock)
    recounts = [n for n, c in enumerate(calls) if c == "recount"]
    assert len(recounts) == len(live) >= 2
    assert all("checkpoint" in calls[a:b] for a, b in itertools.pairwise(recounts))
    assert len(queued_messages(redis_client)) == len(live)


# --- what operators see and set ----------------------------------------------------------


def _status() -> dict:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("scheduler_status", "--json", stdout=out)
    return json.loads(out.getvalue())


def test_scheduler_status_shows_each_tenants_quota_in_flight_and_waiting(
    live, redis_client, limits
):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    limits(alpha, max_concurrency=2, weight=3)
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, target=NOOP)
    _trigger(alpha, clock, job, 5)
    engine = _engine(redis_client, clock)
    _cycle(engine, clock)
    assert len(_take_messages(redis_client)) == 2
    clock.advance(4)
    engine.admission.publish(clock.now().timestamp())
    status = _status()
    rows = {row["tenant"]: row for row in status["tenants"]}  # PostgreSQL's figures
    assert {k: rows["alpha"][k] for k in ("max_concurrency", "weight", "in_flight", "waiting")} == {
        "max_concurrency": 2,
        "weight": 3,
        "in_flight": 2,
        "waiting": 3,
    }
    assert rows["alpha"]["suspended"] is False and rows["alpha"]["oldest_wait_seconds"] > 0
    assert (rows["beta"]["in_flight"], rows["beta"]["waiting"]) == (0, 0)
    assert rows["beta"]["oldest_wait_seconds"] is None
    leader = status["admission"]["tenants"]  # the leader's own view, by tenant id
    assert leader[str(alpha.id)] == {
        "in_flight": 2,
        "max_concurrency": 2,
        "weight": 3,
        "waiting": 3,
        "oldest_wait_seconds": 4.0,
    }
    assert str(beta.id) not in leader


def test_provision_tenant_update_max_concurrency_takes_effect_without_a_restart(
    live, redis_client, limits
):
    from io import StringIO

    from django.core.management import CommandError, call_command

    alpha = live["alpha"].tenant
    limits(alpha, max_concurrency=1, weight=2)
    clock = FakeClock(START)
    job = make_job(alpha, clock, schedule=None, target=NOOP)
    _trigger(alpha, clock, job, 5)
    engine = _engine(redis_client, clock)
    _cycle(engine, clock)
    assert len(_take_messages(redis_client)) == 1
    out = StringIO()
    call_command("provision_tenant", "alpha", "--update", "--max-concurrency", "3", stdout=out)
    assert "weight 2, max concurrency 3" in out.getvalue()  # the weight is left as it was
    alpha.refresh_from_db()
    assert (alpha.max_concurrency, alpha.weight) == (3, 2)
    with pytest.raises(CommandError, match="at least 1"):
        call_command("provision_tenant", "alpha", "--update", "--max-concurrency", "0")
    alpha.refresh_from_db()
    assert alpha.max_concurrency == 3
    clock.advance(5)  # the leader reads the limits again within its refresh
    _cycle(engine, clock)
    assert len(_take_messages(redis_client)) == 2 and _in_flight(alpha) == 3
