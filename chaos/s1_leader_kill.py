"""Scenario 1: the leader is killed with SIGKILL again and again, two standbys waiting,
every-second jobs firing and a worker executing them.

Figures: takeover time (kill to a new leader), the lateness of the slots due during each
failover (publish time minus slot, worst per failover), and over every slot of the window:
fires lost (a slot no run executed) and doubled (two runs, or one attempt executed twice).
Goals: failover lateness p99 < 3 s; 0 lost; 0 doubled.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from core.redis import get_redis

from . import harness as h
from .tasks import LEDGER_KEY, ledger_client

ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_LOOKAHEAD_SECONDS": "5",
    "SCHEDULER_RELAY_INTERVAL_SECONDS": "2",
    "SCHEDULER_VISIBILITY_TIMEOUT_SECONDS": "30",
}


def run(workdir: Path, *, small: bool) -> dict:
    kills, job_count = (3, 10) if small else (20, 40)
    client = get_redis()
    ledger_client().delete(LEDGER_KEY)
    tenant = h.chaos_tenant("chaos-kill")
    jobs = h.every_second_jobs(tenant, job_count)
    env = h.process_env(**ENV)
    takeovers: list[float] = []
    kill_times: list[float] = []
    with h.Fleet(workdir) as fleet:
        schedulers = [fleet.add(h.scheduler(workdir, f"s{n}", env)) for n in range(3)]
        fleet.add(h.worker(workdir, "w", env, "-P", "threads", "-c", "50"))
        h.wait_for(lambda: h.leader_pid(client), timeout=60)
        time.sleep(3)
        since = _next_second()
        for n in range(kills):
            pid = h.wait_for(lambda: h.leader_pid(client), timeout=30)
            victim = next(p for p in schedulers if p.pid == pid)
            killed_at = time.time()
            victim.kill9()
            h.wait_for(lambda p=pid: h.leader_pid(client) not in (None, p), timeout=30)
            takeovers.append(time.time() - killed_at)
            kill_times.append(killed_at)
            schedulers[schedulers.index(victim)] = fleet.add(h.scheduler(workdir, f"s{n}-r", env))
            time.sleep(2.5)
        until = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=2)
        time.sleep(4)  # the worker drains what the window fired
        alive = sum(p.alive() for p in schedulers)
    runs = h.slot_runs(tenant, since, until)
    ledger = h.ledger(runs, jobs, since, until, h.executions(ledger_client()))
    lateness = {
        (r.job_id, r.scheduled_for): (r.queued_at - r.scheduled_for).total_seconds()
        for r in runs
        if r.queued_at is not None
    }
    per_failover = [
        max(
            (late for (_, at), late in lateness.items() if k <= at.timestamp() <= k + t + 1),
            default=0.0,
        )
        for k, t in zip(kill_times, takeovers, strict=True)
    ]
    return {
        "kills": kills,
        "jobs": job_count,
        "takeover_seconds": h.summary(takeovers),
        "failover_lateness_seconds": h.summary(per_failover),
        "slot_lateness_seconds": h.summary(list(lateness.values())),
        "schedulers_alive": alive,
        **ledger,
        "checks": {
            "no_lost_fire": ledger["lost"] == 0,
            "no_double_fire": ledger["doubled"] == 0,
            "every_scheduler_alive": alive == 3,
        },
        "goals": {
            "failover_lateness_p99_under_3s": bool(per_failover)
            and h.summary(per_failover)["p99"] < 3.0
        },
    }


def _next_second() -> datetime:
    return datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
