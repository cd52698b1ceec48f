"""A worker's claim whose reply is lost with its connection.

Before: the delivery went back to the broker (`DatabaseUnavailable`) whether or not the
claim had committed. If it had, the run was `running` under a worker that had given it up:
the redelivered message claimed nothing, and the run waited for the reaper (a visibility
timeout), which counted the attempt, so a job of one attempt went `dead` without running.
Now the worker looks for its own claim (same run, attempt, worker and start) before handing
the delivery back. Driven for real: a TCP proxy between the worker and PostgreSQL cuts the
connection after the claim reached the server, before its reply came back.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.db import connection
from django_tenants.utils import schema_context

from core.clock import FakeClock
from runs import execution, states
from runs.execution import DatabaseUnavailable, claim_or_requeue, run_execute

from .helpers import StallingProxy, make_job, new_engine, other_connection, runs_of, utc

START = utc(2026, 6, 1, 12, 0)
SLOT = utc(2026, 6, 1, 12, 1)
CLAIM = b"WITH claimed AS"  # the claim statement's text, as the proxy sees it go by


@contextlib.contextmanager
def through(proxy: StallingProxy):
    """This thread's Django connection goes through the proxy (a new connection)."""
    saved = connection.settings_dict["HOST"], connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["HOST"], connection.settings_dict["PORT"] = "127.0.0.1", proxy.port
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["HOST"], connection.settings_dict["PORT"] = saved


@pytest.fixture
def proxy():
    settings = connection.settings_dict
    proxy = StallingProxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
    yield proxy
    proxy.close()


def _queued_run(tenant, redis_client, **job):
    clock = FakeClock(START)
    make_job(tenant, clock, schedule={"cron": "* * * * *"}, **job)
    engine = new_engine(redis_client, clock)
    clock.set(SLOT)
    engine.materialise()
    engine.fire()
    [run] = runs_of(tenant)
    assert run.status == states.QUEUED
    return clock, run


def _claim(tenant, run, clock: FakeClock, **more) -> dict:
    """claim_or_requeue's arguments for the run's first attempt, at the clock's now."""
    return {
        "schema": tenant.schema_name,
        "run_id": str(run.id),
        "attempt": 1,
        "now": clock.now(),
        **more,
    }


def test_a_run_whose_claim_reply_was_lost_runs_once_as_claimed(live, redis_client, proxy):
    alpha = live["alpha"].tenant
    clock, run = _queued_run(alpha, redis_client, retry={"max_attempts": 1})
    with through(proxy):
        cut = proxy.cut_after_request(CLAIM)
        with schema_context(alpha.schema_name):
            done = run_execute(
                schema=alpha.schema_name,
                run_id=str(run.id),
                attempt=1,
                worker="w:1",
                clock=clock,
            )
    assert cut.is_set()  # the claim reached PostgreSQL, and its reply never came back
    assert done == states.SUCCEEDED
    [run] = runs_of(alpha)
    assert (run.status, run.attempt, run.worker) == (states.SUCCEEDED, 1, "w:1")


def test_a_claim_that_never_reached_the_server_hands_the_delivery_back(live, redis_client, proxy):
    """Nothing is taken for claimed that was not: the delivery goes back, the run stays
    `queued`, and the delivery's next coming claims it."""
    alpha = live["alpha"].tenant
    clock, run = _queued_run(alpha, redis_client)
    claim = _claim(alpha, run, clock, worker="w:1")
    with through(proxy):
        cut = proxy.cut_after_request(CLAIM, deliver=False)
        with pytest.raises(DatabaseUnavailable):
            claim_or_requeue(**claim)
    assert cut.is_set()
    [after] = runs_of(alpha)
    assert after.status == states.QUEUED
    claimed = claim_or_requeue(**{**claim, "worker": "w:2"})
    assert claimed is not None and claimed.attempt == 1
    with schema_context(alpha.schema_name):
        run.refresh_from_db()
    assert (run.status, run.worker) == (states.RUNNING, "w:2")


def test_another_workers_claim_is_not_taken_for_ones_own(live, redis_client, proxy):
    """The run was claimed by another delivery meanwhile (a duplicate message): the
    recovery finds no claim of its own and hands the delivery back."""
    alpha = live["alpha"].tenant
    clock, run = _queued_run(alpha, redis_client)
    claim = _claim(alpha, run, clock)
    assert claim_or_requeue(worker="w:2", **claim) is not None
    with through(proxy):
        proxy.cut_after_request(CLAIM)
        with pytest.raises(DatabaseUnavailable):
            claim_or_requeue(worker="w:1", **claim)
    [after] = runs_of(alpha)
    assert (after.status, after.worker) == (states.RUNNING, "w:2")


def test_a_claim_cut_off_while_it_waits_for_the_fires_lock_is_found_once_it_commits(
    live, redis_client, proxy
):
    """The claim reached PostgreSQL and waits there for a row lock (a fire holding the
    run); its connection is cut meanwhile. The server runs it on once the lock goes, and it
    commits: the worker's look must wait for that, not read the row as it was (then hand
    the delivery back, the claim committing unseen behind it)."""
    alpha = live["alpha"].tenant
    clock, run = _queued_run(alpha, redis_client, retry={"max_attempts": 1})
    holder = other_connection()
    holder.execute(
        f'SELECT 1 FROM "{alpha.schema_name}".runs_run WHERE id = %s FOR UPDATE', [run.id]
    )
    result: dict = {}

    def claim() -> None:
        with through(proxy):
            try:
                result["claimed"] = claim_or_requeue(
                    schema=alpha.schema_name,
                    run_id=str(run.id),
                    attempt=1,
                    worker="w:1",
                    now=clock.now(),
                )
            except Exception as exc:  # reported below
                result["error"] = exc

    cut = proxy.cut_after_request(CLAIM, at_reply=False)
    worker = threading.Thread(target=claim)
    try:
        worker.start()
        assert cut.wait(5)  # the claim is on the server, waiting for the row; its link is gone
        time.sleep(0.5)  # the worker is looking meanwhile
    finally:
        holder.rollback()  # the fire commits: the claim goes on, and commits
        holder.close()
    worker.join(15)
    assert not worker.is_alive()
    assert "error" not in result, result
    assert result["claimed"] is not None and result["claimed"].attempt == 1
    [after] = runs_of(alpha)
    assert (after.status, after.worker) == (states.RUNNING, "w:1")


def test_an_orphaned_claim_still_waiting_is_ended_so_the_delivery_goes_back_cleanly(
    live, redis_client, proxy, monkeypatch
):
    """The claim waits on the server for a row lock held longer than the worker looks: the
    worker ends its own orphaned claim (it commits nothing) before handing the delivery
    back, so the run stays `queued` for the delivery's next coming, instead of the claim
    committing afterwards, unseen, and the run waiting for the reaper."""
    monkeypatch.setattr(execution, "CLAIM_RECOVERY_SECONDS", 2.0)
    alpha = live["alpha"].tenant
    clock, run = _queued_run(alpha, redis_client)
    holder = other_connection()
    holder.execute(
        f'SELECT 1 FROM "{alpha.schema_name}".runs_run WHERE id = %s FOR UPDATE', [run.id]
    )
    claim = _claim(alpha, run, clock, worker="w:1")
    try:
        with through(proxy):
            proxy.cut_after_request(CLAIM, at_reply=False)
            with pytest.raises(DatabaseUnavailable):
                claim_or_requeue(**claim)
    finally:
        holder.rollback()  # the lock goes: an orphaned claim still alive would commit now
        holder.close()
    time.sleep(0.3)
    [after] = runs_of(alpha)
    assert (after.status, after.worker) == (states.QUEUED, "")
    assert claim_or_requeue(**{**claim, "worker": "w:2"}) is not None  # the next coming


def test_a_soft_time_limit_during_the_claim_looks_for_it_before_handing_back(monkeypatch):
    """Celery's soft limit (the job's timeout, counted from the task's start) fires while
    the claim waits on the server: the claim may still commit there, so it is looked for
    like a lost reply, and one that committed runs."""
    found = object()

    def out_of_time(**_):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(execution.connection, "ensure_connection", lambda: None)
    monkeypatch.setattr(execution, "_backend_pid", lambda: None)
    monkeypatch.setattr(execution, "claim_run", out_of_time)
    monkeypatch.setattr(execution, "claim_made", lambda **_: found)
    claimed = claim_or_requeue(schema="t_alpha", run_id="r", attempt=1, worker="w", now=None)
    assert claimed is found
