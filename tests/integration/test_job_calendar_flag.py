"""`jobs_job.has_calendars`, kept by a trigger on the links table (jobs/migrations/0006):
it follows every way a link is made or removed, never reads false while a link exists
(two transactions changing one job's links at once, driven for real on two sessions), and
the leader reads the calendars of exactly the jobs that have some."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connection
from django_tenants.utils import schema_context

from beat import store
from core.clock import FakeClock
from jobs.calendars import calendar_create
from jobs.models import ExclusionCalendar, Job
from jobs.services import job_update

from .helpers import ACTOR, make_job, other_connection, set_public, utc

NOW = utc(2026, 12, 21, 8, 0)
DAILY = {"cron": "0 9 * * *", "timezone": "UTC"}


def _calendars(tenant, *names: str) -> None:
    with schema_context(tenant.schema_name):
        for name in names:
            calendar_create(
                tenant=tenant,
                actor=ACTOR,
                data={"name": name, "dates": ["2026-12-25"]},
                clock=FakeClock(NOW),
            )


def _flag(schema: str, job_id: int) -> bool:
    set_public()
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT has_calendars FROM "{schema}".jobs_job WHERE id = %s', [job_id])
        return cursor.fetchone()[0]


def _set_calendars(tenant, job_id: int, names: list[str]) -> None:
    with schema_context(tenant.schema_name):
        job_update(
            tenant=tenant,
            actor=ACTOR,
            job_id=job_id,
            data={"schedule": {**DAILY, "calendars": names}},
            clock=FakeClock(NOW),
        )


def test_the_flag_follows_links_added_and_removed(live):
    alpha = live["alpha"].tenant
    _calendars(alpha, "a", "b")
    job = make_job(alpha, FakeClock(NOW), schedule={**DAILY, "calendars": ["a"]})
    plain = make_job(alpha, FakeClock(NOW), name="plain", schedule=DAILY)
    schema = alpha.schema_name
    assert _flag(schema, job.id) and not _flag(schema, plain.id)
    _set_calendars(alpha, job.id, ["a", "b"])
    _set_calendars(alpha, job.id, ["b"])  # one of two removed: still on one
    assert _flag(schema, job.id)
    _set_calendars(alpha, job.id, [])
    assert not _flag(schema, job.id)
    _set_calendars(alpha, job.id, ["a"])
    # A save of the job (every model field written) leaves the flag alone: not a field.
    with schema_context(schema):
        loaded = Job.objects.get(id=job.id)
        loaded.description = "saved"
        loaded.save()
    assert _flag(schema, job.id)
    # A calendar deleted under a deleted job takes its links with it.
    with schema_context(schema):
        Job.objects.filter(id=job.id).update(deleted_at=NOW)
        ExclusionCalendar.objects.filter(name="a").delete()
    assert not _flag(schema, job.id)


def _link_sql(schema: str) -> tuple[str, str]:
    links = f'"{schema}".jobs_job_calendars'
    return (
        f"INSERT INTO {links} (job_id, exclusioncalendar_id) VALUES (%s, %s)",
        f"DELETE FROM {links} WHERE job_id = %s AND exclusioncalendar_id = %s",
    )


def _calendar_ids(schema: str) -> dict[str, int]:
    with schema_context(schema):
        return dict(ExclusionCalendar.objects.values_list("name", "id"))


def _waits_for(holder, waiter, seconds: float = 5.0) -> bool:
    """Whether `waiter`'s session is blocked by `holder`'s (PostgreSQL's own account)."""
    holding, waiting = holder.info.backend_pid, waiter.info.backend_pid
    with other_connection() as watcher:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            row = watcher.execute("SELECT %s = ANY(pg_blocking_pids(%s))", [holding, waiting])
            if row.fetchone()[0]:
                return True
            watcher.rollback()
            time.sleep(0.02)
    return False


@pytest.mark.parametrize("first", ["removal", "addition"])
def test_a_link_added_while_the_last_one_is_removed_leaves_the_flag_set(live, first):
    """Session R removes the job's only link while session A adds another, each holding
    its transaction open so that the other runs into it; whichever commits first, the
    job ends with one link, so its flag must say true. (Counted in the statement that
    waits for the lock, the removal's count was of a snapshot taken before the wait and
    cleared the flag; the addition, made conditional on the flag being false, skipped
    the row whose visible version said true.)"""
    alpha = live["alpha"].tenant
    schema = alpha.schema_name
    _calendars(alpha, "a", "b")
    job = make_job(alpha, FakeClock(NOW), schedule={**DAILY, "calendars": ["a"]})
    ids = _calendar_ids(schema)
    insert, delete = _link_sql(schema)
    remover, adder = other_connection(), other_connection()
    try:
        one, two = (remover, adder) if first == "removal" else (adder, remover)
        statement = {remover: (delete, ids["a"]), adder: (insert, ids["b"])}
        sql_one, calendar_one = statement[one]
        one.execute(sql_one, [job.id, calendar_one])  # holds the job row, not committed
        sql_two, calendar_two = statement[two]
        failed: list[BaseException] = []

        def change() -> None:
            try:
                two.execute(sql_two, [job.id, calendar_two])
            except BaseException as exc:  # re-raised below: a thread's error is lost
                failed.append(exc)

        second = threading.Thread(target=change)
        second.start()
        assert _waits_for(one, two), "the second change did not wait for the first"
        one.commit()
        second.join(10)
        assert not second.is_alive() and not failed, failed
        two.commit()
    finally:
        remover.close()
        adder.close()
    with schema_context(schema):
        links = list(Job.objects.get(id=job.id).calendars.values_list("name", flat=True))
    assert links == ["b"]
    assert _flag(schema, job.id)


def test_a_link_made_or_removed_waits_for_the_leaders_lock_on_its_job(live):
    """The leader reads a job's flag in the statement that locks the job, and its calendars
    after: a link made or removed meanwhile must wait for the leader's commit, or the
    leader would plan by a flag that no longer holds when it reads the calendars."""
    alpha = live["alpha"].tenant
    schema = alpha.schema_name
    _calendars(alpha, "a")
    job = make_job(alpha, FakeClock(NOW), schedule=DAILY)
    insert, delete = _link_sql(schema)
    set_public()
    leader = other_connection()
    linker = other_connection(lock_timeout="300ms")
    try:
        with leader.cursor() as cursor:
            store.lock_jobs(cursor, schema, [job.id])
        with pytest.raises(psycopg.errors.LockNotAvailable):
            linker.execute(insert, [job.id, _calendar_ids(schema)["a"]])
        linker.rollback()
        leader.commit()
        linker.execute(insert, [job.id, _calendar_ids(schema)["a"]])
        linker.commit()
        assert _flag(schema, job.id)
        with leader.cursor() as cursor:
            [row], _busy = store.lock_jobs(cursor, schema, [job.id])
            assert row.has_calendars and [c[0] for c in row.calendars] == ["a"]
        with pytest.raises(psycopg.errors.LockNotAvailable):
            linker.execute(delete, [job.id, _calendar_ids(schema)["a"]])
        linker.rollback()
        leader.commit()
        linker.execute(delete, [job.id, _calendar_ids(schema)["a"]])
        linker.commit()
    finally:
        leader.close()
        linker.close()
    assert not _flag(schema, job.id)


def test_the_leader_reads_calendars_only_of_jobs_that_have_some(live):
    alpha, beta = live["alpha"].tenant, live["beta"].tenant
    _calendars(alpha, "xmas")
    on = make_job(alpha, FakeClock(NOW), schedule={**DAILY, "calendars": ["xmas"]})
    off = make_job(alpha, FakeClock(NOW), name="off", schedule=DAILY)
    other = make_job(beta, FakeClock(NOW), schedule=DAILY)
    set_public()
    wanted = [(alpha.schema_name, [on.id, off.id]), (beta.schema_name, [other.id])]
    statements = []

    def count(execute, sql, params, many, context):
        statements.append(sql if isinstance(sql, str) else sql.as_string())
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count), connection.cursor() as cursor:
        locked = store.lock_jobs_of_schemas(cursor, wanted)
        calendar_reads = [s for s in statements if "jobs_job_calendars" in s]
        assert len(calendar_reads) == 1 and beta.schema_name not in calendar_reads[0]
        (alpha_rows, _), ([beta_row], _) = locked  # ids restart in each schema
        by_id = {row.id: row for row in alpha_rows}
        assert [c[0] for c in by_id[on.id].calendars] == ["xmas"]
        assert by_id[off.id].calendars == [] and beta_row.calendars == []
        statements.clear()
        store.lock_jobs_of_schemas(cursor, [(alpha.schema_name, [off.id]), wanted[1]])
        assert not [s for s in statements if "jobs_job_calendars" in s]
