"""Scenario 5: PostgreSQL restarts under the whole fleet.

A PostgreSQL cluster of the scenario's own (migrated, one tenant provisioned by the
command an operator would use, jobs created through the REST API) serves a scheduler, a
worker and a web server. It is restarted (`pg_ctl restart -m fast`: every connection is
cut). Nobody is told: every process must reconnect by itself.

Figures: how long the database was down; after it was back, how long until the web
answered `/readyz` 200, the scheduler fired again, and the worker executed again; runs
created that never finished (goal 0); slots before and after the restart that did not fire
(goal 0); processes still alive (goal all).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import redis

from . import harness as h
from .tasks import LEDGER_KEY

ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_LOOKAHEAD_SECONDS": "5",
    "SCHEDULER_RELAY_INTERVAL_SECONDS": "2",
    "SCHEDULER_VISIBILITY_TIMEOUT_SECONDS": "30",
    "SCHEDULER_HEARTBEAT_SECONDS": "1",
}


def run(workdir: Path, *, small: bool) -> dict:
    job_count = 5 if small else 20
    pg = h.PrivatePostgres(workdir)
    private_redis = h.PrivateRedis(workdir)
    pg.start()
    private_redis.start()
    try:
        env = h.process_env(**ENV, DATABASE_URL=pg.url, REDIS_URL=private_redis.url)
        env["CHAOS_LEDGER_URL"] = private_redis.url
        ledger = redis.Redis.from_url(private_redis.url)
        _manage(env, "migrate", "--noinput", "-v", "0")
        info = json.loads(_manage(env, "provision_tenant", "chaos-pg", "--json"))
        port = h.free_port()
        with h.Fleet(workdir) as fleet:
            web = fleet.add(h.web(workdir, "web", env, port))
            h.wait_for(lambda: _ready(port), timeout=60)
            for n in range(job_count):
                _create_job(port, info["token"], n)
            fleet.add(h.scheduler(workdir, "s", env))
            fleet.add(h.worker(workdir, "w", env, "-P", "threads", "-c", "20"))
            h.wait_for(lambda: ledger.llen(LEDGER_KEY) > job_count * 3, timeout=60)
            _say("restarting PostgreSQL")
            down = pg.restart()
            back = time.time()
            _say(f"PostgreSQL back after {down:.2f}s")
            ready_after = h.wait_for(lambda: _ready(port) and time.time(), timeout=120) - back
            _say("web ready")
            fired_after = (
                h.wait_for(lambda: _fired_since(pg, info["schema"], back), timeout=120) - back
            )
            executed_at = ledger.llen(LEDGER_KEY)
            worked_after = (
                h.wait_for(
                    lambda: ledger.llen(LEDGER_KEY) > executed_at and time.time(), timeout=120
                )
                - back
            )
            time.sleep(6)
            alive = {p.name: p.alive() for p in fleet.procs}
            assert web.alive()
            time.sleep(4)  # the worker drains
        unfinished, missed = _ledger(pg, info["schema"], back)
        return {
            "jobs": job_count,
            "postgres_down_seconds": round(down, 2),
            "web_ready_after_seconds": round(ready_after, 2),
            "scheduler_fired_after_seconds": round(fired_after, 2),
            "worker_executed_after_seconds": round(worked_after, 2),
            "runs_created_never_finished": unfinished,
            "slots_missed_outside_the_outage": missed,
            "processes_alive": alive,
            "checks": {
                "every_process_reconnected": all(alive.values()),
                "no_run_lost": unfinished == 0,
                "no_fire_lost_outside_the_outage": missed == 0,
            },
        }
    finally:
        pg.stop()
        private_redis.stop()


def _manage(env: dict, *args: str) -> str:
    """Run a management command against the private cluster; its last line of output."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=h.ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    lines = result.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def _say(text: str) -> None:
    print(f"[postgres-restart] {text}", file=sys.stderr, flush=True)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _create_job(port: int, token: str, n: int) -> None:
    body = json.dumps(
        {
            "name": f"every-second-{n}",
            "schedule": {"interval_seconds": 1},
            "target": {"type": "task", "task": "chaos.record"},
            "misfire_grace_seconds": 3600,
        }
    ).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/jobs",
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201


def _query(pg: h.PrivatePostgres, statement: str, params=()):
    with psycopg.connect(pg.url, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


def _fired_since(pg: h.PrivatePostgres, schema: str, instant: float) -> float | None:
    try:
        rows = _query(
            pg,
            f'SELECT extract(epoch FROM min(queued_at)) FROM "{schema}".runs_run '
            "WHERE queued_at > to_timestamp(%s)",
            (instant,),
        )
    except psycopg.Error:
        return None
    return time.time() if rows and rows[0][0] is not None else None


def _ledger(pg: h.PrivatePostgres, schema: str, back: float) -> tuple[int, int]:
    """(runs that exist but never finished, one-second slots with no run outside the
    outage window: from 10 s before it until 10 s after it came back the leader's
    misfire policy may decide)."""
    unfinished = _query(
        pg,
        f'SELECT count(*) FROM "{schema}".runs_run WHERE status NOT IN '
        "('succeeded', 'dead', 'skipped', 'cancelled') AND due_at < now() - interval '5 s'",
    )[0][0]
    jobs = _query(pg, f'SELECT id, anchor_at FROM "{schema}".jobs_job')
    now = datetime.now(UTC) - timedelta(seconds=5)
    outage = (datetime.fromtimestamp(back - 10, UTC), datetime.fromtimestamp(back + 10, UTC))
    missed = 0
    for job_id, anchor in jobs:
        slots = {
            row[0]
            for row in _query(
                pg,
                f'SELECT scheduled_for FROM "{schema}".runs_run WHERE job_id = %s',
                (job_id,),
            )
        }
        at = anchor + timedelta(seconds=2)
        while at < now:
            if not outage[0] <= at <= outage[1] and at not in slots:
                missed += 1
            at += timedelta(seconds=1)
    return unfinished, missed
