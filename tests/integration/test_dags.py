"""DAG runs end to end, in-process against real PostgreSQL and Redis: the leader driven by
hand, each published message executed as a worker would. The race of two upstreams
finishing at once is driven with two connections (threads) holding the DAG run's settle
in each order; tests/scenarios/test_dag_workers.py does it with two worker processes."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django_tenants.utils import schema_context

from core.clock import FakeClock
from jobs import services as job_services
from jobs.models import Dependency, Job
from jobs.services import HasDownstreams, job_delete, job_pause, job_resume, job_update
from jobs.validation import JobValidationError
from runs import dag_progress, dags, states
from runs.execution import Claimed, claim_run, finish_run, run_execute
from runs.models import DagRun, Run
from runs.outcomes import Outcome
from runs.services import job_backfill, job_trigger, run_replay

from .helpers import (
    ACTOR,
    make_job,
    message_args,
    new_engine,
    other_connection,
    queued_messages,
    runs_of,
    utc,
)

START = utc(2026, 6, 1, 12, 0, 0)
NOOP = {"type": "task", "task": "builtin.noop"}
FAIL_ONCE = {"type": "task", "task": "builtin.fail"}


def _job(tenant, clock, name: str, upstreams=(), **data):
    data.setdefault("target", NOOP)
    return make_job(
        tenant,
        clock,
        name=name,
        schedule=None,
        depends_on=[u.id for u in upstreams],
        **data,
    )


def _diamond(tenant, clock, *, b_target=NOOP, below_d: bool = False):
    a = _job(tenant, clock, "a")
    b = _job(tenant, clock, "b", [a], target=b_target, payload={"times": 1})
    c = _job(tenant, clock, "c", [a])
    d = _job(tenant, clock, "d", [b, c])
    jobs = {"a": a, "b": b, "c": c, "d": d}
    if below_d:
        jobs["e"] = _job(tenant, clock, "e", [d])
    return jobs


def _trigger(tenant, clock, job) -> Run:
    with schema_context(tenant.schema_name):
        run, _ = job_trigger(tenant=tenant, actor=ACTOR, job_id=job.id, clock=clock)
    return run


def _take_messages(client) -> list[list]:
    messages = [message_args(m) for m in queued_messages(client)]
    for key in client.keys("runs.*"):
        client.delete(key)
    return messages


def _drive(engine, client, clock, tenant, *, rounds: int = 20, tick_each: bool = False) -> int:
    """Leader and worker in turn until nothing is left to do; returns executions. With
    `tick_each`, the clock moves on a second after each execution too (so that two runs
    of one round end at different instants)."""
    executed = 0
    for _ in range(rounds):
        engine.load_run_index()
        engine.fire()
        messages = _take_messages(client)
        if not messages:
            break
        for schema, run_id, attempt in messages:
            with schema_context(schema):
                run_execute(schema=schema, run_id=run_id, attempt=attempt, worker="w", clock=clock)
            executed += 1
            if tick_each:
                clock.advance(1)
        clock.advance(1)
    return executed


def _by_job(tenant, dag_run_id) -> dict[str, Run]:
    with schema_context(tenant.schema_name):
        runs = Run.objects.filter(dag_run=dag_run_id).select_related("job")
        return {r.job.name: r for r in runs}


def _dag_run(tenant, dag_run_id) -> DagRun:
    with schema_context(tenant.schema_name):
        return DagRun.objects.get(id=dag_run_id)


def test_diamond_runs_d_once_after_both_b_and_c(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = _diamond(alpha, clock)
    engine = new_engine(redis_client, clock)
    root = _trigger(alpha, clock, jobs["a"])
    assert _drive(engine, redis_client, clock, alpha, tick_each=True) == 4
    [dag_run] = runs_of(alpha, id=root.id)
    runs = _by_job(alpha, dag_run.dag_run)
    assert sorted(runs) == ["a", "b", "c", "d"]
    assert {r.status for r in runs.values()} == {states.SUCCEEDED}
    assert [runs[n].trigger for n in "bcd"] == ["dependency"] * 3
    # B and C ended at two instants (of the injected clock); D was due (created by the
    # settle, at its clock's now) no sooner than the later one, so not after B or C alone
    b_end, c_end = runs["b"].finished_at, runs["c"].finished_at
    assert b_end != c_end
    assert runs["d"].scheduled_for == runs["d"].due_at >= max(b_end, c_end)
    assert runs["d"].started_at >= runs["d"].scheduled_for
    summary = _dag_run(alpha, dag_run.dag_run)
    assert (summary.status, summary.root_job_id, summary.root_run) == (
        states.DAG_SUCCEEDED,
        jobs["a"].id,
        root.id,
    )
    assert summary.started_at <= summary.finished_at
    assert summary.nodes[0] == jobs["a"].id and len(summary.nodes) == 4


def test_a_run_of_a_job_without_downstreams_starts_no_dag_run(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    alone = _job(alpha, clock, "alone")
    engine = new_engine(redis_client, clock)
    run = _trigger(alpha, clock, alone)
    _drive(engine, redis_client, clock, alpha)
    [done] = runs_of(alpha, id=run.id)
    assert (done.status, done.dag_run) == (states.SUCCEEDED, None)
    with schema_context(alpha.schema_name):
        assert not DagRun.objects.exists()


def test_a_root_whose_dag_run_cannot_start_fails_its_attempt_and_retries(live, redis_client):
    """Another session holds the DAG-run table (a migration, a stuck psql): the root's
    attempt must not run alone, leaving its downstreams silently behind; it fails, and
    its retry starts the DAG run once the table is free."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = _diamond(alpha, clock)
    engine = new_engine(redis_client, clock)
    _trigger(alpha, clock, jobs["a"])
    engine.load_run_index()
    engine.fire()
    [(schema, run_id, attempt)] = _take_messages(redis_client)
    holder = other_connection()
    holder.execute(f'LOCK TABLE "{schema}".runs_dagrun IN ACCESS EXCLUSIVE MODE')
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        with schema_context(schema):
            outcome = run_execute(
                schema=schema, run_id=run_id, attempt=attempt, worker="w", clock=clock
            )
    finally:
        holder.close()
    assert outcome == states.RETRYING  # the retry policy takes it again
    with schema_context(alpha.schema_name):
        root = Run.objects.get(id=run_id)
        [first] = root.attempts.all()
    assert root.dag_run is None
    assert "its DAG run could not be started" in first.error
    clock.advance(3600)
    _drive(engine, redis_client, clock, alpha)
    root = runs_of(alpha, job_id=jobs["a"].id)[0]
    runs = _by_job(alpha, root.dag_run)
    assert {n: r.status for n, r in runs.items()} == dict.fromkeys("abcd", states.SUCCEEDED)


def test_a_failure_skips_everything_below_it_and_a_replay_continues_the_dag_run(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = _diamond(alpha, clock, b_target=FAIL_ONCE, below_d=True)
    with schema_context(alpha.schema_name):
        Job.objects.filter(id=jobs["b"].id).update(max_attempts=1)
    engine = new_engine(redis_client, clock)
    _trigger(alpha, clock, jobs["a"])
    _drive(engine, redis_client, clock, alpha)
    [root] = runs_of(alpha, job_id=jobs["a"].id)
    runs = _by_job(alpha, root.dag_run)
    assert runs["b"].status == states.DEAD
    assert runs["c"].status == states.SUCCEEDED  # C is not below B: it still runs
    for name in ("d", "e"):
        assert (runs[name].status, runs[name].skip_reason) == (
            states.SKIPPED,
            states.SKIP_UPSTREAM_FAILED,
        )
    assert _dag_run(alpha, root.dag_run).status == states.DAG_FAILED
    with schema_context(alpha.schema_name):
        run_replay(tenant=alpha, actor=ACTOR, run_id=runs["b"].id, clock=clock)
    assert _dag_run(alpha, root.dag_run).status == states.DAG_RUNNING
    assert "d" not in _by_job(alpha, root.dag_run)  # its skip is withdrawn: it waits again
    _drive(engine, redis_client, clock, alpha)
    runs = _by_job(alpha, root.dag_run)
    assert {n: r.status for n, r in runs.items()} == dict.fromkeys("abcde", states.SUCCEEDED)
    assert runs["b"].attempt == 2
    assert _dag_run(alpha, root.dag_run).status == states.DAG_SUCCEEDED


def _claimed_run(tenant, dag_run_id, name: str, clock) -> Claimed:
    """Claim the queued run of job `name` in the DAG run (as a worker would)."""
    run = _by_job(tenant, dag_run_id)[name]
    with schema_context(tenant.schema_name):
        Run.objects.filter(id=run.id).update(status=states.QUEUED)
    claimed = claim_run(
        schema=tenant.schema_name, run_id=str(run.id), attempt=1, worker=name, now=clock.now()
    )
    assert claimed is not None
    return claimed


def _b_and_c_running(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = _diamond(alpha, clock)
    engine = new_engine(redis_client, clock)
    _trigger(alpha, clock, jobs["a"])
    engine.load_run_index()
    engine.fire()
    [(schema, run_id, attempt)] = _take_messages(redis_client)
    run_execute(schema=schema, run_id=run_id, attempt=attempt, worker="w", clock=clock)
    [root] = runs_of(alpha, job_id=jobs["a"].id)
    b = _claimed_run(alpha, root.dag_run, "b", clock)
    c = _claimed_run(alpha, root.dag_run, "c", clock)
    return alpha, clock, root.dag_run, b, c


def _settle_in_thread(schema, dag_run_id, clock, out: list, name=None) -> threading.Thread:
    def run() -> None:
        try:
            out.append(dags.dag_settle(schema=schema, dag_run_id=dag_run_id, now=clock.now()))
        finally:
            connection.close()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def test_b_settles_on_a_view_without_c_while_c_finishes_and_settles(
    live, redis_client, monkeypatch
):
    """B's settle holds the DAG run's row and has read C as running; C's end commits and
    its settle waits for the row. C's settle must then see both succeeded."""
    alpha, clock, dag_run_id, b, c = _b_and_c_running(live, redis_client)
    finish_run(b, Outcome(True), clock.now())
    read, go_on = threading.Event(), threading.Event()
    original = dag_progress.settle

    def held_settle(*args, **kwargs):
        step = original(*args, **kwargs)
        if threading.current_thread().name == "b-settle":
            read.set()
            go_on.wait(10)
        return step

    monkeypatch.setattr(dags, "settle", held_settle)
    b_result: list = []
    b_thread = _settle_in_thread(alpha.schema_name, dag_run_id, clock, b_result, "b-settle")
    assert read.wait(10)
    finish_run(c, Outcome(True), clock.now())  # committed while B's settle holds the row
    c_result: list = []
    c_thread = _settle_in_thread(alpha.schema_name, dag_run_id, clock, c_result)
    c_thread.join(0.5)
    assert c_thread.is_alive(), "C's settle waits for the DAG run's row"
    go_on.set()
    b_thread.join(10)
    c_thread.join(10)
    assert b_result[0].step.create == []  # B saw C running
    assert c_result[0].step.create == [_by_job(alpha, dag_run_id)["d"].job_id]
    assert len(runs_of(alpha, dag_run=dag_run_id, trigger="dependency", job__name="d")) == 1


def test_d_is_not_recorded_as_created_before_the_end_it_follows(live, redis_client):
    """B's settle has begun (its transaction holds the DAG run's row) when C's end commits;
    its next statement sees C ended and creates D. D's creation time is the insert's, not
    the settle transaction's start, so D never reads as created before C ended."""
    alpha, clock, dag_run_id, b, c = _b_and_c_running(live, redis_client)
    finish_run(b, Outcome(True), clock.now())
    locked, go_on = threading.Event(), threading.Event()

    def pause_after_the_row_lock(execute, sql, params, many, context):
        result = execute(sql, params, many)
        text = sql if isinstance(sql, str) else sql.as_string(context["connection"].connection)
        if "FOR UPDATE" in text and "runs_dagrun" in text:
            locked.set()
            go_on.wait(10)
        return result

    out: list = []

    def b_settle() -> None:
        try:
            with connection.execute_wrapper(pause_after_the_row_lock):
                out.append(
                    dags.dag_settle(
                        schema=alpha.schema_name, dag_run_id=dag_run_id, now=clock.now()
                    )
                )
        finally:
            connection.close()

    thread = threading.Thread(target=b_settle)
    thread.start()
    assert locked.wait(10)
    finish_run(c, Outcome(True), datetime.now(UTC))  # the real clock, as in a worker
    go_on.set()
    thread.join(10)
    assert out[0].created == 1
    runs = _by_job(alpha, dag_run_id)
    assert runs["d"].created_at >= runs["c"].finished_at


def test_b_and_c_end_then_both_settle_at_once_and_d_is_created_once(live, redis_client):
    alpha, clock, dag_run_id, b, c = _b_and_c_running(live, redis_client)
    finish_run(b, Outcome(True), clock.now())
    finish_run(c, Outcome(True), clock.now())
    results: list = []
    threads = [_settle_in_thread(alpha.schema_name, dag_run_id, clock, results) for _ in range(4)]
    for thread in threads:
        thread.join(10)
    assert sum(r.created for r in results) == 1
    assert len(runs_of(alpha, dag_run=dag_run_id, job__name="d")) == 1


def test_the_unique_index_lets_one_d_in_even_without_the_row_lock(live, redis_client):
    """Two settles that both decided to create D (as two settles without the lock would):
    the second insert is refused by run_once_per_dag_run."""
    alpha, clock, dag_run_id, b, c = _b_and_c_running(live, redis_client)
    finish_run(b, Outcome(True), clock.now())
    finish_run(c, Outcome(True), clock.now())
    with schema_context(alpha.schema_name):
        d_id = Job.objects.get(name="d").id
    step = dag_progress.Step(create=[d_id])
    with connection.cursor() as cursor:
        first = dags._insert_runs(cursor, alpha.schema_name, dag_run_id, step, clock.now())
        second = dags._insert_runs(cursor, alpha.schema_name, dag_run_id, step, clock.now())
    assert (len(first), len(second)) == (1, 0)


def test_a_worker_killed_after_its_finish_is_settled_by_the_leaders_sweep(live, redis_client):
    alpha, clock, dag_run_id, b, c = _b_and_c_running(live, redis_client)
    finish_run(b, Outcome(True), clock.now())  # neither settles: their workers died
    finish_run(c, Outcome(True), clock.now())
    engine = new_engine(redis_client, clock)
    assert engine.settle_dag_runs(force=True) == 1
    assert _by_job(alpha, dag_run_id)["d"].status == states.SCHEDULED
    assert engine.settle_dag_runs(force=True) == 0  # settled: nothing more to do


def test_a_reaped_upstream_that_dies_skips_its_downstreams_through_the_sweep(live, redis_client):
    alpha, clock, dag_run_id, b, _c = _b_and_c_running(live, redis_client)
    with schema_context(alpha.schema_name):
        Job.objects.filter(name="b").update(max_attempts=1)
    with connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{alpha.schema_name}".runs_run SET heartbeat_at = now() - interval'
            " '1 hour' WHERE id = %s",
            [b.run_id],
        )
    engine = new_engine(redis_client, clock, visibility_timeout_seconds=60)
    assert engine.reap(force=True) == 1
    assert engine.settle_dag_runs(force=True) == 1
    d = _by_job(alpha, dag_run_id)["d"]
    assert (d.status, d.skip_reason) == (states.SKIPPED, states.SKIP_UPSTREAM_FAILED)


def test_a_paused_job_holds_its_part_of_the_dag_run_until_resumed(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = _diamond(alpha, clock)
    with schema_context(alpha.schema_name):
        job_pause(tenant=alpha, actor=ACTOR, job_id=jobs["d"].id, clock=clock)
    engine = new_engine(redis_client, clock)
    _trigger(alpha, clock, jobs["a"])
    _drive(engine, redis_client, clock, alpha)
    [root] = runs_of(alpha, job_id=jobs["a"].id)
    d = _by_job(alpha, root.dag_run)["d"]
    assert d.status == states.SCHEDULED  # held: neither run nor skipped
    clock.advance(60)
    engine.relay(force=True)
    engine.relay()
    assert engine.fire().published == 0
    assert _dag_run(alpha, root.dag_run).status == states.DAG_RUNNING
    with schema_context(alpha.schema_name):
        job_resume(tenant=alpha, actor=ACTOR, job_id=jobs["d"].id, clock=clock)
    _drive(engine, redis_client, clock, alpha)
    assert _by_job(alpha, root.dag_run)["d"].status == states.SUCCEEDED
    assert _dag_run(alpha, root.dag_run).status == states.DAG_SUCCEEDED


def test_deleting_a_job_with_downstreams_needs_cascade(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = _diamond(alpha, clock)
    with schema_context(alpha.schema_name):
        with pytest.raises(HasDownstreams, match=r"b \(\d+\), c \(\d+\)"):
            job_delete(tenant=alpha, actor=ACTOR, job_id=jobs["a"].id, clock=clock)
        job_delete(tenant=alpha, actor=ACTOR, job_id=jobs["d"].id, clock=clock)  # a leaf
        assert not Dependency.objects.filter(downstream_id=jobs["d"].id).exists()
        job_delete(tenant=alpha, actor=ACTOR, job_id=jobs["a"].id, clock=clock, cascade_edges=True)
        assert not Dependency.objects.exists()


def test_a_job_deleted_during_a_dag_run_is_cancelled_and_its_downstreams_skipped(
    live, redis_client
):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = _diamond(alpha, clock, below_d=True)
    engine = new_engine(redis_client, clock)
    _trigger(alpha, clock, jobs["a"])
    engine.load_run_index()
    engine.fire()
    [(schema, run_id, attempt)] = _take_messages(redis_client)
    run_execute(schema=schema, run_id=run_id, attempt=attempt, worker="w", clock=clock)
    with schema_context(alpha.schema_name):  # d goes while b and c wait (its edges too)
        job_delete(tenant=alpha, actor=ACTOR, job_id=jobs["d"].id, clock=clock, cascade_edges=True)
    _drive(engine, redis_client, clock, alpha)
    [root] = runs_of(alpha, job_id=jobs["a"].id)
    runs = _by_job(alpha, root.dag_run)
    assert (runs["d"].status, runs["d"].error) == (states.CANCELLED, "job deleted")
    assert (runs["e"].status, runs["e"].skip_reason) == (states.SKIPPED, "upstream_failed")
    assert _dag_run(alpha, root.dag_run).status == states.DAG_FAILED


def test_a_scheduled_root_starts_a_dag_run_per_slot(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    root = make_job(alpha, clock, name="root", schedule={"cron": "* * * * *"}, target=NOOP)
    _job(alpha, clock, "child", [root])
    engine = new_engine(redis_client, clock)
    for minute in (1, 2):
        clock.set(START + timedelta(minutes=minute))
        engine.materialise()
        _drive(engine, redis_client, clock, alpha)
    with schema_context(alpha.schema_name):
        assert DagRun.objects.filter(status=states.DAG_SUCCEEDED).count() == 2
        assert Run.objects.filter(trigger="dependency", status=states.SUCCEEDED).count() == 2


def test_a_leaf_ending_before_the_others_takes_no_lock_and_the_last_end_settles(live, redis_client):
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    root = _job(alpha, clock, "root")
    for name in ("x", "y"):
        _job(alpha, clock, name, [root])
    engine = new_engine(redis_client, clock)
    _trigger(alpha, clock, root)
    engine.load_run_index()
    engine.fire()
    [(schema, run_id, attempt)] = _take_messages(redis_client)
    run_execute(schema=schema, run_id=run_id, attempt=attempt, worker="w", clock=clock)
    [root_run] = runs_of(alpha, job_id=root.id)
    x = _claimed_run(alpha, root_run.dag_run, "x", clock)
    y = _claimed_run(alpha, root_run.dag_run, "y", clock)
    finish_run(x, Outcome(True), clock.now())
    # y still runs: x's end can change nothing, and the DAG run's row stays free meanwhile
    holder = other_connection()
    holder.execute(
        f'SELECT 1 FROM "{schema}".runs_dagrun WHERE id = %s FOR UPDATE', [root_run.dag_run]
    )
    try:
        assert (
            dags.dag_settle_after_end(
                schema=schema, dag_run_id=root_run.dag_run, job_id=x.job_id, now=clock.now()
            )
            is None
        )
    finally:
        holder.close()
    assert _dag_run(alpha, root_run.dag_run).status == states.DAG_RUNNING
    finish_run(y, Outcome(True), clock.now())
    settled = dags.dag_settle_after_end(
        schema=schema, dag_run_id=root_run.dag_run, job_id=y.job_id, now=clock.now()
    )
    assert settled is not None
    assert _dag_run(alpha, root_run.dag_run).status == states.DAG_SUCCEEDED


def test_a_leafs_end_during_a_settle_that_skips_the_last_job_still_ends_the_dag_run(
    live, redis_client, monkeypatch
):
    """a -> b -> c and a -> l (found by a review). b dies; its settle holds the DAG run's
    row, has read l as running, and records c as upstream_failed. l ends meanwhile: its
    count (a, b, l ended; c's record not committed yet) says it is not the last, so it
    does not settle. b's settle must then see that everything has ended."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    a = _job(alpha, clock, "a")
    b = _job(alpha, clock, "b", [a], retry={"max_attempts": 1})
    _job(alpha, clock, "c", [b])
    leaf = _job(alpha, clock, "l", [a])
    engine = new_engine(redis_client, clock)
    _trigger(alpha, clock, a)
    engine.load_run_index()
    engine.fire()
    [(schema, run_id, attempt)] = _take_messages(redis_client)
    run_execute(schema=schema, run_id=run_id, attempt=attempt, worker="w", clock=clock)
    [root] = runs_of(alpha, job_id=a.id)
    claimed = {name: _claimed_run(alpha, root.dag_run, name, clock) for name in ("b", "l")}
    assert finish_run(claimed["b"], Outcome(False, "boom"), clock.now()).status == states.DEAD
    read, go_on = threading.Event(), threading.Event()
    original = dag_progress.settle

    def held_settle(*args, **kwargs):
        step = original(*args, **kwargs)
        if threading.current_thread().name == "b-settle":
            read.set()
            go_on.wait(10)
        return step

    monkeypatch.setattr(dags, "settle", held_settle)

    def settle_after_end(job_id):
        try:
            dags.dag_settle_after_end(
                schema=schema, dag_run_id=root.dag_run, job_id=job_id, now=clock.now()
            )
        finally:
            connection.close()

    b_thread = threading.Thread(target=settle_after_end, args=(b.id,), name="b-settle")
    b_thread.start()
    assert read.wait(10)
    finish_run(claimed["l"], Outcome(True), clock.now())  # l's end commits meanwhile
    l_thread = threading.Thread(target=settle_after_end, args=(leaf.id,))
    l_thread.start()
    l_thread.join(10)  # its count is not the last: it returns without the row
    go_on.set()
    b_thread.join(10)
    runs = _by_job(alpha, root.dag_run)
    assert all(r.status in states.TERMINAL for r in runs.values())
    assert _dag_run(alpha, root.dag_run).status == states.DAG_FAILED


def test_pausing_a_job_in_the_middle_holds_only_what_is_below_it(live, redis_client):
    """A -> B, A -> C, B -> D, C -> D, D -> E with B paused: C runs, D and E wait for B
    (neither run nor skipped), and resuming B finishes the DAG run."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = _diamond(alpha, clock, below_d=True)
    with schema_context(alpha.schema_name):
        job_pause(tenant=alpha, actor=ACTOR, job_id=jobs["b"].id, clock=clock)
    engine = new_engine(redis_client, clock)
    _trigger(alpha, clock, jobs["a"])
    assert _drive(engine, redis_client, clock, alpha) == 2  # a and c
    [root] = runs_of(alpha, job_id=jobs["a"].id)
    runs = _by_job(alpha, root.dag_run)
    assert {n: r.status for n, r in runs.items()} == {
        "a": states.SUCCEEDED,
        "b": states.SCHEDULED,  # held while paused
        "c": states.SUCCEEDED,  # not below b: it runs
    }
    clock.advance(60)
    engine.relay(force=True)
    engine.relay()
    assert engine.fire().published == 0
    assert sorted(_by_job(alpha, root.dag_run)) == ["a", "b", "c"]  # d and e wait
    assert _dag_run(alpha, root.dag_run).status == states.DAG_RUNNING
    assert engine.settle_dag_runs(force=True) == 0  # nothing for the sweep to move on
    with schema_context(alpha.schema_name):
        job_resume(tenant=alpha, actor=ACTOR, job_id=jobs["b"].id, clock=clock)
    assert _drive(engine, redis_client, clock, alpha) == 3  # b, d, e
    runs = _by_job(alpha, root.dag_run)
    assert {n: r.status for n, r in runs.items()} == dict.fromkeys("abcde", states.SUCCEEDED)
    assert runs["d"].attempt == runs["e"].attempt == 1
    dag_run = _dag_run(alpha, root.dag_run)
    assert (dag_run.status, dag_run.finished_at is not None) == (states.DAG_SUCCEEDED, True)


def test_a_dependency_run_follows_its_jobs_retry_policy(live, redis_client):
    """B (max_attempts 2) fails its first attempt: its dependency run retries after its
    backoff, D waits meanwhile (neither created nor skipped), then B succeeds and D runs."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = _diamond(alpha, clock, b_target=FAIL_ONCE)  # payload {"times": 1}
    with schema_context(alpha.schema_name):
        Job.objects.filter(id=jobs["b"].id).update(
            max_attempts=2, backoff_seconds=300, retry_jitter=False
        )
    engine = new_engine(redis_client, clock)
    _trigger(alpha, clock, jobs["a"])
    _drive(engine, redis_client, clock, alpha)
    [root] = runs_of(alpha, job_id=jobs["a"].id)
    runs = _by_job(alpha, root.dag_run)
    assert (runs["b"].status, runs["b"].attempt) == (states.RETRYING, 2)
    assert runs["c"].status == states.SUCCEEDED
    assert "d" not in runs  # B has not failed for good: D is neither run nor skipped
    assert _dag_run(alpha, root.dag_run).status == states.DAG_RUNNING
    clock.advance(300)
    _drive(engine, redis_client, clock, alpha)
    runs = _by_job(alpha, root.dag_run)
    assert {n: r.status for n, r in runs.items()} == dict.fromkeys("abcd", states.SUCCEEDED)
    with schema_context(alpha.schema_name):
        outcomes = list(runs["b"].attempts.order_by("number").values_list("number", "outcome"))
    assert outcomes == [(1, states.ATTEMPT_FAILED), (2, states.ATTEMPT_SUCCEEDED)]
    assert _dag_run(alpha, root.dag_run).status == states.DAG_SUCCEEDED


def test_a_dependency_run_follows_its_jobs_forbid_policy(live, redis_client):
    """B is `forbid` with one run in flight already (a manual run): its dependency run is
    skipped as an overlap at admission, like any due run, and D and E below it are
    recorded upstream_failed while C runs."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    jobs = _diamond(alpha, clock, below_d=True)
    with schema_context(alpha.schema_name):
        Job.objects.filter(id=jobs["b"].id).update(
            concurrency_policy="forbid", max_concurrent_runs=1
        )
    engine = new_engine(redis_client, clock)
    manual = _trigger(alpha, clock, jobs["b"])
    engine.load_run_index()
    engine.fire()
    [(schema, run_id, attempt)] = _take_messages(redis_client)
    assert run_id == str(manual.id)
    assert claim_run(schema=schema, run_id=run_id, attempt=attempt, worker="w", now=clock.now())
    _trigger(alpha, clock, jobs["a"])
    _drive(engine, redis_client, clock, alpha)
    [root] = runs_of(alpha, job_id=jobs["a"].id)
    runs = _by_job(alpha, root.dag_run)
    assert (runs["b"].status, runs["b"].skip_reason, runs["b"].trigger) == (
        states.SKIPPED,
        states.SKIP_OVERLAP,
        "dependency",
    )
    assert runs["c"].status == states.SUCCEEDED
    for name in ("d", "e"):
        assert (runs[name].status, runs[name].skip_reason) == (
            states.SKIPPED,
            states.SKIP_UPSTREAM_FAILED,
        )
    assert _dag_run(alpha, root.dag_run).status == states.DAG_FAILED
    assert runs_of(alpha, id=manual.id)[0].status == states.RUNNING  # untouched


def test_a_backfill_of_a_root_starts_one_dag_run_per_slot(live, redis_client):
    """Three hourly slots backfilled: three root runs (trigger backfill), each the root of
    its own DAG run, and the child runs once in each."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    root = make_job(alpha, clock, name="root", schedule={"cron": "0 * * * *"}, target=NOOP)
    child = _job(alpha, clock, "child", [root])
    with schema_context(alpha.schema_name):
        backfilled = job_backfill(
            tenant=alpha,
            actor=ACTOR,
            job_id=root.id,
            start=START - timedelta(hours=3),
            end=START - timedelta(hours=1),
            clock=clock,
        )
    assert len(backfilled) == 3
    engine = new_engine(redis_client, clock)
    assert _drive(engine, redis_client, clock, alpha) == 6
    with schema_context(alpha.schema_name):
        dag_runs = list(DagRun.objects.order_by("started_at"))
        roots = {r.id: r for r in Run.objects.filter(job=root)}
        children = list(Run.objects.filter(job=child))
    assert len(dag_runs) == 3
    assert {d.root_run for d in dag_runs} == {r.id for r in backfilled} == set(roots)
    assert {(d.trigger, d.status, d.root_job_id) for d in dag_runs} == {
        ("backfill", states.DAG_SUCCEEDED, root.id)
    }
    assert all(roots[d.root_run].dag_run == d.id for d in dag_runs)
    assert sorted(str(c.dag_run) for c in children) == sorted(str(d.id) for d in dag_runs)
    assert {(c.trigger, c.status) for c in children} == {("dependency", states.SUCCEEDED)}


def test_replaying_a_run_that_was_in_no_dag_run_starts_one(live, redis_client):
    """A run of a job without downstreams dies (no DAG run); the job then gets a
    downstream; the replay's claim makes the run the root of a new DAG run, and the
    downstream runs in it once the replay succeeds."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    a = _job(alpha, clock, "a", target=FAIL_ONCE, payload={"times": 1}, retry={"max_attempts": 1})
    engine = new_engine(redis_client, clock)
    run = _trigger(alpha, clock, a)
    _drive(engine, redis_client, clock, alpha)
    [dead] = runs_of(alpha, id=run.id)
    assert (dead.status, dead.dag_run) == (states.DEAD, None)
    b = _job(alpha, clock, "b", [a])
    with schema_context(alpha.schema_name):
        assert not DagRun.objects.exists()
        run_replay(tenant=alpha, actor=ACTOR, run_id=run.id, clock=clock)
    assert _drive(engine, redis_client, clock, alpha) == 2
    [replayed] = runs_of(alpha, id=run.id)
    assert (replayed.status, replayed.attempt, replayed.trigger) == (
        states.SUCCEEDED,
        2,
        "manual",
    )
    assert replayed.dag_run is not None
    dag_run = _dag_run(alpha, replayed.dag_run)
    assert (dag_run.root_run, dag_run.root_job_id, dag_run.trigger, dag_run.status) == (
        run.id,
        a.id,
        "manual",
        states.DAG_SUCCEEDED,
    )
    [b_run] = runs_of(alpha, job_id=b.id)
    assert (b_run.dag_run, b_run.trigger, b_run.status) == (
        replayed.dag_run,
        "dependency",
        states.SUCCEEDED,
    )


def _advisory_lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return cursor.fetchone()[0]


def _edit_held_then(tenant, monkeypatch, first, second) -> dict[str, object]:
    """`first` (a graph edit) on one connection, held inside its transaction right after
    its cycle check passed, the graph's lock held; then `second` on another, which must
    wait for that lock; then both go on. Returns what each returned or raised."""
    checked, go_on = threading.Event(), threading.Event()
    original = job_services.find_cycle

    def held_find_cycle(edges):
        cycle = original(edges)
        if threading.current_thread().name == "first":
            checked.set()
            go_on.wait(10)
        return cycle

    monkeypatch.setattr(job_services, "find_cycle", held_find_cycle)
    results: dict[str, object] = {}

    def run(name: str, action) -> None:
        try:
            with schema_context(tenant.schema_name):
                results[name] = action()
        except Exception as exc:  # the outcome is asserted by the caller
            results[name] = exc
        finally:
            connection.close()

    threads = {
        name: threading.Thread(target=run, args=(name, action), name=name)
        for name, action in (("first", first), ("second", second))
    }
    threads["first"].start()
    assert checked.wait(10)
    threads["second"].start()
    for _ in range(200):  # until the second waits on the graph's lock (or has ended)
        if _advisory_lock_waiters() or not threads["second"].is_alive():
            break
        threads["second"].join(0.05)
    waiting = threads["second"].is_alive() and _advisory_lock_waiters() == 1
    go_on.set()
    for thread in threads.values():
        thread.join(10)
    assert waiting, f"the second action did not wait for the graph's lock: {results}"
    return results


def _depends_on(tenant, clock, job, upstream):
    return lambda: job_update(
        tenant=tenant, actor=ACTOR, job_id=job.id, data={"depends_on": [upstream.id]}, clock=clock
    )


def _edges(tenant) -> list[tuple[int, int]]:
    with schema_context(tenant.schema_name):
        return list(Dependency.objects.values_list("upstream_id", "downstream_id"))


def test_two_concurrent_edits_that_together_close_a_cycle_take_turns(live, monkeypatch):
    """`b depends on a` and `a depends on b`, each fine alone, saved at once on two
    connections: the second waits for the first's graph lock, then checks against the
    committed first edge and is refused with the cycle named (before, it held its job's
    row while waiting, which the first's new edge needs: a deadlock error instead)."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    a, b = _job(alpha, clock, "a"), _job(alpha, clock, "b")
    results = _edit_held_then(
        alpha, monkeypatch, _depends_on(alpha, clock, b, a), _depends_on(alpha, clock, a, b)
    )
    assert isinstance(results["first"], Job), results
    refused = results["second"]
    assert isinstance(refused, JobValidationError), refused
    assert refused.errors["depends_on"] == [
        f"would create a cycle: b ({b.id}) -> a ({a.id}) -> b ({b.id})"
    ]
    assert _edges(alpha) == [(a.id, b.id)]


def test_deleting_a_job_while_an_edit_makes_it_an_upstream_is_refused(live, monkeypatch):
    """`b depends on a` saved while `a` is deleted: the delete waits for the edit's graph
    lock, then sees its new downstream and is refused (409 has-downstreams)."""
    alpha = live["alpha"].tenant
    clock = FakeClock(START)
    a, b = _job(alpha, clock, "a"), _job(alpha, clock, "b")
    results = _edit_held_then(
        alpha,
        monkeypatch,
        _depends_on(alpha, clock, b, a),
        lambda: job_delete(tenant=alpha, actor=ACTOR, job_id=a.id, clock=clock),
    )
    assert isinstance(results["first"], Job), results
    assert isinstance(results["second"], HasDownstreams), results["second"]
    assert _edges(alpha) == [(a.id, b.id)]
    with schema_context(alpha.schema_name):
        assert Job.objects.get(id=a.id).deleted_at is None
