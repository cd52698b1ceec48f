"""Small tenants share a materialise transaction (beat/materialise.py `_materialise_group`):
their jobs locked in one statement, their runs inserted and cursors advanced in another.
What held per tenant must hold per group: a broken tenant costs only itself, a job an edit
holds waits, a catch-up larger than the group's budget loses and doubles nothing."""

from __future__ import annotations

from django.db import connection

from beat import materialise as materialise_step
from beat import store
from core import index
from core.clock import FakeClock
from core.keys import index_key
from runs import states

from .helpers import (
    make_job,
    message_args,
    new_engine,
    other_connection,
    queued_messages,
    runs_of,
    utc,
)

START = utc(2026, 6, 1, 12, 0, 0)


def _statements(seen: list):
    def wrapper(execute, sql, params, many, context):
        seen.append(
            sql.as_string(context["cursor"].connection) if hasattr(sql, "as_string") else sql
        )
        return execute(sql, params, many, context)

    return wrapper


def _score(client, tenant, job) -> float | None:
    return client.zscore(index_key(), index.member(tenant.id, job.id))


def test_small_tenants_due_together_are_materialised_in_one_transaction(live, redis_client):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    jobs = {
        tenant.id: [
            make_job(tenant, clock, name=f"j{n}", schedule={"cron": "* * * * *"}) for n in (1, 2)
        ]
        for tenant in (alpha, beta)
    }
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    with connection.execute_wrapper(_statements(seen := [])):
        assert engine.materialise() == 4
    locks = [s for s in seen if "FOR UPDATE" in s]
    inserts = [s for s in seen if "INSERT INTO" in s]
    assert len(locks) == 1 and alpha.schema_name in locks[0] and beta.schema_name in locks[0]
    assert len(inserts) == 1 and alpha.schema_name in inserts[0] and beta.schema_name in inserts[0]
    for tenant in (alpha, beta):
        runs = runs_of(tenant)
        assert sorted(r.job_id for r in runs) == sorted(j.id for j in jobs[tenant.id])
        assert {(r.scheduled_for, r.status) for r in runs} == {
            (utc(2026, 6, 1, 12, 1), states.SCHEDULED)
        }
        for job in jobs[tenant.id]:
            assert _score(redis_client, tenant, job) == utc(2026, 6, 1, 12, 2).timestamp()
    assert len(engine.runs.known) == 4
    clock.set(utc(2026, 6, 1, 12, 1))
    assert engine.fire().published == 4


def test_a_tenant_whose_tables_vanished_costs_only_itself_in_a_group(live, redis_client):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    good = make_job(alpha, clock, schedule={"cron": "* * * * *"})
    broken = make_job(beta, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{beta.schema_name}".runs_run RENAME TO runs_run_gone')
    try:
        engine.materialise()
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{beta.schema_name}".runs_run_gone RENAME TO runs_run')
    assert [r.job_id for r in runs_of(alpha)] == [good.id]
    assert runs_of(beta) == []
    assert not engine.faults.allowed(beta.id) and engine.faults.allowed(alpha.id)
    # Its due entry moved out of the way (past the lookahead), not lost.
    assert _score(redis_client, beta, broken) > utc(2026, 6, 1, 12, 1, 15).timestamp()
    assert _score(redis_client, alpha, good) == utc(2026, 6, 1, 12, 2).timestamp()


def test_the_tenants_of_a_failed_group_join_no_group_until_they_succeed_alone(live, redis_client):
    """A broken tenant would fail its group every time its back-off ended: after a
    failure each tenant goes alone until it has succeeded alone once."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    good = make_job(alpha, clock, schedule={"cron": "* * * * *"})
    broken = make_job(beta, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    ticks = [0.0]
    engine.faults._now = lambda: ticks[0]  # the back-off's clock, controlled here

    def both_due() -> None:  # (beta's entry was moved out of the way; alpha's moved on)
        redis_client.zadd(
            index_key(),
            {index.member(alpha.id, good.id): 0, index.member(beta.id, broken.id): 0},
            xx=True,
        )

    clock.set(utc(2026, 6, 1, 12, 0, 45))
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{beta.schema_name}".runs_run RENAME TO runs_run_gone')
    try:
        engine.materialise()
        assert engine.materialise_alone == {beta.id}  # alpha succeeded alone since
        ticks[0] += 3600  # beta's back-off is over; its table is still gone
        both_due()
        with connection.execute_wrapper(_statements(seen := [])):
            engine.materialise()
        locks = [s for s in seen if "FOR UPDATE" in s]
        assert locks and all(not (alpha.schema_name in s and beta.schema_name in s) for s in locks)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{beta.schema_name}".runs_run_gone RENAME TO runs_run')
    ticks[0] += 3600
    both_due()
    engine.materialise()
    assert engine.materialise_alone == set()
    assert [r.scheduled_for for r in runs_of(beta)] == [utc(2026, 6, 1, 12, 1)]
    assert [r.scheduled_for for r in runs_of(alpha)] == [utc(2026, 6, 1, 12, 1)]


def test_a_grouped_re_read_that_fails_for_one_tenant_still_puts_back_the_others(live, redis_client):
    """After a group's compare-and-set, one read checks every moved job against its row
    (ADR 0008). If that read fails because one tenant's table is gone, each tenant is read
    on its own (the lease renewed between them): alpha's job, whose row says earlier than
    its new score, is still put back."""
    from beat.rebuild import put_back_schedulable_many

    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    edited = make_job(alpha, clock, schedule={"cron": "* * * * *"})  # row: 12:01
    other = make_job(beta, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    later = utc(2026, 6, 1, 12, 5).timestamp()  # the move, later than alpha's row
    redis_client.zadd(index_key(), {index.member(alpha.id, edited.id): later})
    renewals: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{beta.schema_name}".jobs_job RENAME TO jobs_job_gone')
    try:
        put_back_schedulable_many(
            engine.writes,
            [
                (alpha.id, alpha.schema_name, {edited.id: later}),
                (beta.id, beta.schema_name, {other.id: later}),
            ],
            checkpoint=lambda: renewals.append("renewed"),
        )
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{beta.schema_name}".jobs_job_gone RENAME TO jobs_job')
    assert _score(redis_client, alpha, edited) == utc(2026, 6, 1, 12, 1).timestamp()
    assert renewals == ["renewed", "renewed"]


def test_a_job_an_edit_holds_waits_while_the_rest_of_its_group_is_materialised(live, redis_client):
    """A second PostgreSQL session holds beta's job row locked (as an edit in progress):
    the grouped lock skips it, and once it is released the next pass plans it."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    free = make_job(alpha, clock, schedule={"cron": "* * * * *"})
    held = make_job(beta, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    before = _score(redis_client, beta, held)
    other = other_connection()
    try:
        other.execute(
            f'SELECT 1 FROM "{beta.schema_name}".jobs_job WHERE id = %s FOR UPDATE', [held.id]
        )
        engine.materialise()
        assert [r.job_id for r in runs_of(alpha)] == [free.id]
        assert runs_of(beta) == []
        assert _score(redis_client, beta, held) == before  # still due: the next pass
    finally:
        other.rollback()
        other.close()
    engine.materialise()
    assert [(r.job_id, r.scheduled_for) for r in runs_of(beta)] == [
        (held.id, utc(2026, 6, 1, 12, 1))
    ]


def test_a_catch_up_past_the_group_budget_plans_every_slot_once(live, redis_client, monkeypatch):
    """Jobs 5 slots behind with `run_all`, 2 per tenant, a budget of 3 runs per
    transaction: the group plans what fits, the rest go in transactions of their own, and
    every missed slot has exactly one run."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    jobs = [
        (
            tenant,
            make_job(
                tenant,
                clock,
                name=f"j{n}",
                schedule={"cron": "* * * * *"},
                misfire_policy="run_all",
                misfire_grace_seconds=3600,
            ),
        )
        for tenant in (alpha, beta)
        for n in (1, 2)
    ]
    engine = new_engine(redis_client, clock, materialise_chunk=3)
    clock.set(utc(2026, 6, 1, 12, 5, 10))  # slots 12:01 to 12:05 passed, none materialised
    written: list[int] = []  # runs per grouped write
    original = store.write_materialised

    def counted(cursor, parts):
        written.append(sum(len(p.runs) for p in parts))
        return original(cursor, parts)

    monkeypatch.setattr(store, "write_materialised", counted)
    with connection.execute_wrapper(_statements(seen := [])):
        while engine.materialise():
            pass
    # The budget (3) is exceeded by one job's plan (5 runs) at most, as alone.
    assert written and max(written) <= 3 - 1 + 5, written
    assert (
        len(
            [
                s
                for s in seen
                if "FOR UPDATE" in s and beta.schema_name in s and alpha.schema_name in s
            ]
        )
        >= 1
    )
    for tenant, job in jobs:
        slots = [r.scheduled_for for r in runs_of(tenant, job_id=job.id)]
        assert slots == [utc(2026, 6, 1, 12, m) for m in range(1, 6)], (tenant.slug, job.name)
        assert _score(redis_client, tenant, job) == utc(2026, 6, 1, 12, 6).timestamp()


def test_grouping_stops_at_group_schemas_tenants(live, redis_client, monkeypatch):
    """With GROUP_SCHEMAS = 1 every tenant has its own transaction: the bound holds."""
    monkeypatch.setattr(materialise_step, "GROUP_SCHEMAS", 1)
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    for tenant in (alpha, beta):
        make_job(tenant, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    with connection.execute_wrapper(_statements(seen := [])):
        assert engine.materialise() == 2
    locks = [s for s in seen if "FOR UPDATE" in s]
    assert len(locks) == 2 and all(
        not (alpha.schema_name in s and beta.schema_name in s) for s in locks
    )


# --- the fire ------------------------------------------------------------------------------


def _one_run_each_due(redis_client, clock, tenants):
    """A job a minute for each tenant, its 12:01 run materialised; the clock at 12:01."""
    for tenant in tenants:
        make_job(tenant, clock, schedule={"cron": "* * * * *"})
    engine = new_engine(redis_client, clock)
    clock.set(utc(2026, 6, 1, 12, 0, 45))
    engine.materialise()
    clock.set(utc(2026, 6, 1, 12, 1))
    return engine


def test_small_tenants_runs_are_read_and_marked_queued_in_one_statement_each(live, redis_client):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    engine = _one_run_each_due(redis_client, clock, (alpha, beta))
    with connection.execute_wrapper(_statements(seen := [])):
        assert engine.fire().published == 2
    both = [s for s in seen if alpha.schema_name in s and beta.schema_name in s]
    assert len([s for s in both if "unnest" in s and "WITH ORDINALITY" in s]) == 1  # the read
    assert len([s for s in both if "q0 AS" in s and "queued_at = now()" in s]) == 1  # the write
    alone = [
        s for s in seen if "runs_run" in s and (alpha.schema_name in s) != (beta.schema_name in s)
    ]
    assert alone == []  # no statement for one tenant's runs alone
    for tenant in (alpha, beta):
        assert [r.status for r in runs_of(tenant)] == [states.QUEUED]
    assert {message_args(m)[0] for m in queued_messages(redis_client)} == {
        alpha.schema_name,
        beta.schema_name,
    }


def test_a_failed_grouped_read_reads_each_tenant_alone_renewing_the_lease_between(
    live, redis_client, monkeypatch
):
    """Beta's jobs table is gone (the read joins it; the recount does not): the grouped
    read fails, and each tenant's read goes on its own, each of which may wait out the
    lock timeout, so the lease is renewed between them."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    engine = _one_run_each_due(redis_client, clock, (alpha, beta))
    calls: list[str] = []
    original = store.publishable_runs

    def read(cursor, schema, run_ids):
        calls.append(schema)
        return original(cursor, schema, run_ids)

    monkeypatch.setattr(store, "publishable_runs", read)
    engine.checkpoint = lambda: calls.append("renewed")
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{beta.schema_name}".jobs_job RENAME TO jobs_job_gone')
    try:
        stats = engine.fire()
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{beta.schema_name}".jobs_job_gone RENAME TO jobs_job')
    reads = [n for n, c in enumerate(calls) if c != "renewed"]
    assert [calls[n] for n in reads[:2]] == [alpha.schema_name, beta.schema_name]
    assert "renewed" in calls[reads[0] : reads[1]]
    assert stats.published == 1 and not engine.faults.allowed(beta.id)


def test_a_run_row_locked_elsewhere_costs_only_its_tenant_in_a_grouped_write(live, redis_client):
    """A second session holds beta's run row locked past the fire's lock timeout (as a
    stuck worker's claim): the grouped write fails, and the chunk again, each tenant on
    its own, marks alpha's run queued; beta backs off, its message already out."""
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    clock = FakeClock(START)
    engine = _one_run_each_due(redis_client, clock, (alpha, beta))
    [locked] = runs_of(beta)
    other = other_connection()
    try:
        other.execute(
            f'SELECT 1 FROM "{beta.schema_name}".runs_run WHERE id = %s FOR UPDATE', [locked.id]
        )
        stats = engine.fire()
    finally:
        other.rollback()
        other.close()
    assert stats.published == 2  # both messages went out before the writes
    assert [r.status for r in runs_of(alpha)] == [states.QUEUED]
    assert [r.status for r in runs_of(beta)] == [states.SCHEDULED]  # the relay's, later
    assert [f["schema"] for f in engine.faults.report()] == [beta.schema_name]
    assert {message_args(m)[0] for m in queued_messages(redis_client)} == {
        alpha.schema_name,
        beta.schema_name,
    }
