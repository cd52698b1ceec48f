"""Scenario 4: Redis restarts empty under two schedulers with many registered jobs.

The schedulers, and the broker, use a Redis of the scenario's own. The world: `registered`
idle jobs (bulk COPY over 10 tenants, due far ahead) plus 20 every-second jobs. Once the
index is built and the every-second jobs fire, Redis is killed and started again empty:
the lease, the index, the broker messages all vanish. A scheduler takes the lease again,
rebuilds the index in bounded steps (the every-second jobs, due soonest, first) while it
fires, and publishes the queued runs again.

Figures: the time from the restart to the first fire; the rebuild's length; leadership
changes during the rebuild (goal: none after the first takeover); lost and doubled fires of
the every-second jobs (goal 0, 0).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis
from django.db import connection
from psycopg import sql

from bench.world import copy_jobs
from core.keys import index_built_key
from core.sql import table

from . import harness as h

ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_LOOKAHEAD_SECONDS": "10",
    "SCHEDULER_RELAY_INTERVAL_SECONDS": "2",
    "SCHEDULER_VISIBILITY_TIMEOUT_SECONDS": "600",
}


def run(workdir: Path, *, small: bool) -> dict:
    registered = 20_000 if small else 1_000_000
    private = h.PrivateRedis(workdir)
    private.start()
    client = redis.Redis.from_url(private.url)
    try:
        tenants = [h.chaos_tenant(f"chaos-redis-{n}") for n in range(10)]
        far = datetime.now(UTC) + timedelta(days=30)
        for tenant in tenants:
            if _jobs(tenant) < registered // 10:
                copy_jobs(tenant, registered // 10, far, spread_seconds=86400 * 300, name="idle")
        ticking = h.chaos_tenant("chaos-redis-ticking")  # the others are at the job limit
        jobs = h.every_second_jobs(ticking, 20)
        env = h.process_env(**ENV, REDIS_URL=private.url)
        with h.Fleet(workdir) as fleet:
            for n in range(2):
                fleet.add(h.scheduler(workdir, f"s{n}", env))
            h.wait_for(lambda: client.exists(index_built_key()), timeout=600, interval=0.5)
            time.sleep(3)
            restarted_at = time.time()
            down = private.restart_empty()
            first_fire = h.wait_for(
                lambda: _first_fire_after(ticking, restarted_at), timeout=120, interval=0.05
            )
            epochs = [_epoch()]
            while not client.exists(index_built_key()):
                epochs.append(_epoch())
                time.sleep(0.2)
                if time.time() - restarted_at > 600:
                    raise TimeoutError("the rebuild did not finish in 600 s")
            rebuilt_after = time.time() - restarted_at
            time.sleep(3)
            since = datetime.fromtimestamp(restarted_at - 10, UTC).replace(microsecond=0)
            until = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=2)
            alive = sum(p.alive() for p in fleet.procs)
        runs = h.slot_runs(ticking, since, until)
        ledger = h.ledger(runs, jobs, since, until, executed=None)
        leadership_changes = len(set(epochs)) - 1
        return {
            "registered_jobs": registered + 20,
            "redis_down_seconds": round(down, 2),
            "first_fire_after_restart_seconds": round(first_fire - restarted_at, 3),
            "index_rebuilt_after_seconds": round(rebuilt_after, 2),
            "leadership_changes_during_rebuild": leadership_changes,
            "schedulers_alive": alive,
            **ledger,
            "checks": {
                "no_lost_fire": ledger["lost"] == 0,
                "no_double_fire": ledger["doubled"] == 0,
                "leadership_stayed_put": leadership_changes == 0,
                "every_scheduler_alive": alive == 2,
            },
        }
    finally:
        private.stop()


def _jobs(tenant) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("SELECT count(*) FROM {}").format(table(tenant.schema_name, "jobs_job"))
        )
        return cursor.fetchone()[0]


def _epoch() -> int | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT epoch FROM public.beat_schedulerlease WHERE id = 1")
        row = cursor.fetchone()
    return row[0] if row else None


def _first_fire_after(tenant, instant: float) -> float | None:
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL(
                "SELECT extract(epoch FROM min(queued_at)) FROM {} "
                "WHERE queued_at > to_timestamp(%s)"
            ).format(table(tenant.schema_name, "runs_run")),
            [instant],
        )
        value = cursor.fetchone()[0]
    return float(value) if value is not None else None
