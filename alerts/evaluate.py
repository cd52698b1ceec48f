"""One tenant's alert evaluation: read the facts from PostgreSQL, open and resolve incidents
and write their notifications, all in the caller's (fenced) transaction.

Facts, from the evaluation cursor minus an overlap (attempts a worker committed late are
read again, and reading twice changes nothing: alerts/conditions.py) to now:
- the attempts that ended (runs_attempt.finished_at, on `alerts_attempt_ended_idx`);
- for jobs with a failed attempt among them, their newest ended attempts (the streak);
- scheduled runs whose slot + a channel's grace passed in the window and that had not
  succeeded (on `run_status_idx`: status, scheduled_for).
Tenant schemas are named in every statement (the leader works across them).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from psycopg import sql

from core.logs import log_event
from core.metrics import LEADER, tenant_label
from core.sql import one_of, table
from runs import states as run_states
from runs.ids import uuid7

from . import conditions as cond
from .payloads import payload
from .states import OPENED, PENDING, RESOLVED

log = logging.getLogger("alerts.evaluate")

STREAK_OUTCOMES = one_of(
    (run_states.ATTEMPT_SUCCEEDED, run_states.ATTEMPT_FAILED, run_states.ATTEMPT_LOST)
)
NOT_MISSED = one_of((run_states.SUCCEEDED, run_states.SKIPPED, run_states.CANCELLED))


@dataclass
class Evaluated:
    opened: int = 0
    resolved: int = 0
    notifications: int = 0


def _t(schema: str, name: str) -> sql.Composed:
    return table(schema, name)


def evaluate_tenant(cursor, *, schema: str, slug: str, now: datetime, overlap: float) -> Evaluated:
    channels, enabled = _channels(cursor, schema)
    done = Evaluated()
    if not channels:
        return done
    # Nothing before the oldest channel matters: a cursor left from channels since deleted
    # must not make this pass read a long history.
    oldest = min(c.created_at for c in channels) - timedelta(seconds=overlap)
    since = max(_since(cursor, schema, now, overlap), oldest)
    ended, through = _ended(cursor, schema, since, now)
    active = [c for c in channels if c.id in enabled]
    streaks = _streaks(cursor, schema, active, ended, through)
    missed = _missed(cursor, schema, active, since, through)
    names: dict[int, str] = {}
    for opening in cond.to_open(active, ended, streaks, missed):
        incident = _insert_incident(cursor, schema, opening, now)
        if incident is None:
            continue  # open already, or this fact's incident exists: the database decided
        done.opened += 1
        done.notifications += _notify(cursor, schema, slug, incident, OPENED, names, now)
        _opened_event(slug, incident)
    for incident, at, run_id in cond.to_resolve(_open_incidents(cursor, schema), ended):
        row = _resolve(cursor, schema, incident.id, at, run_id)
        if row is None:
            continue
        done.resolved += 1
        channel = next(c for c in channels if c.id == incident.channel_id)
        if channel.notify_resolved and channel.id in enabled:
            done.notifications += _notify(cursor, schema, slug, row, RESOLVED, names, now)
        log_event(
            log,
            "alert.resolved",
            "%s: incident %s (%s of job %s) resolved by run %s",
            schema,
            row["id"],
            row["kind"],
            row["job_id"],
            run_id,
            tenant=slug,
            job_id=row["job_id"],
            run_id=run_id,
            incident=row["id"],
            kind=row["kind"],
        )
    cursor.execute(
        sql.SQL(
            "UPDATE {} SET evaluated_through = GREATEST(evaluated_through, %s) WHERE id = 1"
        ).format(_t(schema, "alerts_evaluationcursor")),
        [through],
    )
    return done


def _channels(cursor, schema: str) -> tuple[list[cond.Channel], set[int]]:
    cursor.execute(
        sql.SQL(
            "SELECT id, job_id, on_dead_letter, failure_threshold, missed_grace_seconds, "
            "notify_resolved, created_at, enabled FROM {} ORDER BY id"
        ).format(_t(schema, "alerts_alertchannel"))
    )
    rows = cursor.fetchall()
    return [cond.Channel(*row[:7]) for row in rows], {row[0] for row in rows if row[7]}


def _since(cursor, schema: str, now: datetime, overlap: float) -> datetime:
    """The window's start; the first evaluation of a tenant starts `overlap` back (history
    before alerting began raises nothing)."""
    cursors = _t(schema, "alerts_evaluationcursor")
    cursor.execute(
        sql.SQL(
            "INSERT INTO {} (id, evaluated_through) VALUES (1, %s) ON CONFLICT (id) DO NOTHING"
        ).format(cursors),
        [now],
    )
    cursor.execute(sql.SQL("SELECT evaluated_through FROM {} WHERE id = 1").format(cursors))
    through = cursor.fetchone()[0]
    return min(through, now) - timedelta(seconds=overlap)


# The window's attempts in two reads: every failed or lost one (few, unless things are
# bad: at most FAILURES_PER_PASS, the rest in the next pass), and each job's newest success
# (one row per job, however many runs succeeded), which is all the conditions need of them.
FAILURES_PER_PASS = 5000
FAILED_SQL = """
SELECT r.job_id, r.id, a.finished_at, false, (r.status = {dead_status} AND a.number = r.attempt)
FROM {attempts} a JOIN {runs} r ON r.id = a.run_id
WHERE a.finished_at > %s AND a.finished_at <= %s AND a.outcome IN {failed}
ORDER BY a.finished_at LIMIT %s
"""
SUCCEEDED_SQL = """
SELECT DISTINCT ON (r.job_id) r.job_id, r.id, a.finished_at, true, false
FROM {attempts} a JOIN {runs} r ON r.id = a.run_id
WHERE a.finished_at > %s AND a.finished_at <= %s AND a.outcome = {ok}
ORDER BY r.job_id, a.finished_at DESC
"""


def _ended(cursor, schema: str, since: datetime, now: datetime) -> tuple[list, datetime]:
    """The window's failures and newest successes, and how far they reach (`now`, or the
    last failure read when there were more than a pass takes)."""
    names = {
        "attempts": _t(schema, "runs_attempt"),
        "runs": _t(schema, "runs_run"),
        "ok": sql.Literal(run_states.ATTEMPT_SUCCEEDED),
        "dead_status": sql.Literal(run_states.DEAD),
        "failed": one_of((run_states.ATTEMPT_FAILED, run_states.ATTEMPT_LOST)),
    }
    cursor.execute(sql.SQL(FAILED_SQL).format(**names), [since, now, FAILURES_PER_PASS])
    failed = [cond.Ended(*row) for row in cursor.fetchall()]
    through = failed[-1].finished_at if len(failed) == FAILURES_PER_PASS else now
    cursor.execute(sql.SQL(SUCCEEDED_SQL).format(**names), [since, through])
    return failed + [cond.Ended(*row) for row in cursor.fetchall()], through


STREAK_SQL = """
SELECT r.job_id, r.id, a.finished_at, a.outcome = {ok}, false
FROM {attempts} a JOIN {runs} r ON r.id = a.run_id
WHERE r.job_id = %s AND a.finished_at IS NOT NULL AND a.finished_at <= %s
  AND a.outcome IN {outcomes}
ORDER BY a.finished_at DESC LIMIT %s
"""


def _streaks(cursor, schema: str, channels, ended, now: datetime) -> dict[int, list[cond.Ended]]:
    failed_jobs = sorted({e.job_id for e in ended if not e.ok})
    out: dict[int, list[cond.Ended]] = {}
    for job_id in failed_jobs:
        depth = max((c.failure_threshold or 0 for c in channels if c.covers(job_id)), default=0)
        if not depth:
            continue
        cursor.execute(
            sql.SQL(STREAK_SQL).format(
                attempts=_t(schema, "runs_attempt"),
                runs=_t(schema, "runs_run"),
                ok=sql.Literal(run_states.ATTEMPT_SUCCEEDED),
                outcomes=STREAK_OUTCOMES,
            ),
            [job_id, now, depth],
        )
        out[job_id] = [cond.Ended(*row) for row in cursor.fetchall()]
    return out


MISSED_SQL = """
SELECT r.job_id, r.id, r.scheduled_for, r.status FROM {runs} r
WHERE r.trigger = 'schedule' AND r.scheduled_for > %s AND r.scheduled_for <= %s
  AND r.scheduled_for >= %s AND r.status NOT IN {not_missed} {job}
ORDER BY r.scheduled_for LIMIT 1000
"""


def _missed(cursor, schema: str, channels, since: datetime, now: datetime) -> list[cond.Missed]:
    out: list[cond.Missed] = []
    for channel in channels:
        if channel.missed_grace_seconds is None:
            continue
        grace = timedelta(seconds=channel.missed_grace_seconds)
        job = sql.SQL("AND r.job_id = %s") if channel.job_id is not None else sql.SQL("")
        params: list = [since - grace, now - grace, channel.created_at - grace]
        if channel.job_id is not None:
            params.append(channel.job_id)
        cursor.execute(
            sql.SQL(MISSED_SQL).format(runs=_t(schema, "runs_run"), not_missed=NOT_MISSED, job=job),
            params,
        )
        out += [
            cond.Missed(channel.id, job_id, run_id, at, at + grace, status)
            for job_id, run_id, at, status in cursor.fetchall()
        ]
    return out


INCIDENT_COLUMNS = (
    "id, channel_id, job_id, kind, trigger_at, run_id, detail, opened_at, resolved_at, "
    "resolved_by_run"
)


def _row(values) -> dict:
    return dict(zip([c.strip() for c in INCIDENT_COLUMNS.split(",")], values, strict=True))


def _insert_incident(cursor, schema: str, o: cond.Open, now: datetime) -> dict | None:
    # ON CONFLICT without a target: either unique index (the open one, or the fact's) wins.
    cursor.execute(
        sql.SQL(
            "INSERT INTO {} (channel_id, job_id, kind, trigger_at, run_id, detail, opened_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING "
            f"RETURNING {INCIDENT_COLUMNS}"
        ).format(_t(schema, "alerts_incident")),
        [o.channel_id, o.job_id, o.kind, o.trigger_at, o.run_id, o.detail, now],
    )
    row = cursor.fetchone()
    return _row(row) if row else None


def _open_incidents(cursor, schema: str) -> list[cond.OpenIncident]:
    cursor.execute(
        sql.SQL(
            "SELECT id, channel_id, job_id, trigger_at FROM {} WHERE resolved_at IS NULL"
        ).format(_t(schema, "alerts_incident"))
    )
    return [cond.OpenIncident(*row) for row in cursor.fetchall()]


def _resolve(cursor, schema: str, incident_id: int, at: datetime, run_id) -> dict | None:
    cursor.execute(
        sql.SQL(
            "UPDATE {} SET resolved_at = %s, resolved_by_run = %s "
            f"WHERE id = %s AND resolved_at IS NULL RETURNING {INCIDENT_COLUMNS}"
        ).format(_t(schema, "alerts_incident")),
        [at, run_id, incident_id],
    )
    row = cursor.fetchone()
    return _row(row) if row else None


def _job_name(cursor, schema: str, job_id: int, names: dict[int, str]) -> str:
    if job_id not in names:
        cursor.execute(
            sql.SQL("SELECT name FROM {} WHERE id = %s").format(_t(schema, "jobs_job")), [job_id]
        )
        row = cursor.fetchone()
        names[job_id] = row[0] if row else ""
    return names[job_id]


def _notify(cursor, schema: str, slug: str, incident: dict, event: str, names, now) -> int:
    """The notification of `event` about `incident`, once (`notification_once`)."""
    notification_id = str(uuid7())
    job = {"id": incident["job_id"], "name": _job_name(cursor, schema, incident["job_id"], names)}
    body = payload(
        notification_id=notification_id,
        event=event,
        tenant=slug,
        incident=incident,
        job=job,
        at=now,
    )
    cursor.execute(
        sql.SQL(
            "INSERT INTO {} (id, incident_id, channel_id, event, payload, state, attempts, "
            "next_attempt_at, claimed_by, last_error, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, 0, %s, '', '', %s) ON CONFLICT DO NOTHING"
        ).format(_t(schema, "alerts_notification")),
        [
            notification_id,
            incident["id"],
            incident["channel_id"],
            event,
            json.dumps(body),
            PENDING,
            now,
            now,
        ],
    )
    return cursor.rowcount


def _opened_event(slug: str, incident: dict) -> None:
    LEADER.inc("tickwork_alert_incidents_opened", tenant=tenant_label(slug), kind=incident["kind"])
    log_event(
        log,
        "alert.opened",
        "incident %s opened: %s of job %s (%s)",
        incident["id"],
        incident["kind"],
        incident["job_id"],
        incident["detail"],
        level=logging.WARNING,
        tenant=slug,
        job_id=incident["job_id"],
        run_id=incident["run_id"],
        incident=incident["id"],
        kind=incident["kind"],
    )
