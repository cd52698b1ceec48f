"""Scenario 3: a worker is killed with SIGKILL in the middle of a batch of runs.

100 runs of a 2 s task go to two prefork workers; once a good part has started, one
worker is killed (its children with it) and a fresh one starts. The killed worker's runs
go silent: the reaper marks their attempts lost after the visibility timeout and the retry
policy (no backoff here) sends them again.

Figures, for the runs the kill interrupted: how long after the kill their lost attempts
were reaped, against the bound (visibility timeout + the reaper's interval + a heartbeat),
and how long until they were terminal (plus the wait in the queue behind the batch, and
the task's own second); attempts executed twice (goal 0); runs not succeeded (goal 0).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from django_tenants.utils import schema_context

from core.clock import SystemClock
from core.redis import get_redis
from jobs.services import Actor, job_create
from runs import states
from runs.models import Attempt, Run
from runs.services import job_trigger

from . import harness as h
from .tasks import LEDGER_KEY, ledger_client

VISIBILITY = 10
ENV = {
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_VISIBILITY_TIMEOUT_SECONDS": str(VISIBILITY),
    "SCHEDULER_HEARTBEAT_SECONDS": "0.5",
}
TASK_SECONDS = 1.0
RETRY_DELAY = 0


def run(workdir: Path, *, small: bool) -> dict:
    count = 20 if small else 100
    ledger = ledger_client()
    ledger.delete(LEDGER_KEY)
    tenant = h.chaos_tenant("chaos-workers")
    actor, clock = Actor("chaos"), SystemClock()
    with schema_context(tenant.schema_name):
        job = job_create(
            tenant=tenant,
            actor=actor,
            data={
                "name": "two seconds",
                "schedule": None,
                "target": {"type": "task", "task": "chaos.record"},
                "payload": {"seconds": TASK_SECONDS},
                "retry": {"max_attempts": 5, "backoff_seconds": RETRY_DELAY},
            },
            clock=clock,
        )
    env = h.process_env(**ENV)
    with h.Fleet(workdir) as fleet:
        fleet.add(h.scheduler(workdir, "s", env))
        victim = fleet.add(h.worker(workdir, "w1", env, "-c", "4"))
        fleet.add(h.worker(workdir, "w2", env, "-c", "4"))
        h.wait_for(lambda: h.leader_pid(get_redis()), timeout=60)
        with schema_context(tenant.schema_name):
            run_ids = [
                job_trigger(tenant=tenant, actor=actor, job_id=job.id, clock=clock)[0].id
                for _ in range(count)
            ]
        h.wait_for(lambda: ledger.llen(LEDGER_KEY) >= count // 4, timeout=120)
        killed_at = time.time()
        victim.kill9()
        fleet.add(h.worker(workdir, "w3", env, "-c", "4"))
        finished = h.wait_for(lambda: _all_terminal(tenant, run_ids), timeout=300, interval=0.2)
        done_after = time.time() - killed_at
    executed = Counter(h.executions(ledger))
    twice = sorted(k for k, n in executed.items() if n > 1)
    statuses = Counter(status for status, _ in finished.values())
    reaped, terminal = _interrupted(tenant, run_ids, killed_at)
    bound = VISIBILITY + min(VISIBILITY / 4, 30) + float(ENV["SCHEDULER_HEARTBEAT_SECONDS"])
    # Terminal: reaped, then sent again at once (no backoff: the retry delay is 0) and run
    # for the task's second, with a second for the new message's claim and dispatch.
    terminal_bound = bound + RETRY_DELAY + TASK_SECONDS + 1.0
    return {
        "runs": count,
        "runs_interrupted_by_the_kill": len(reaped),
        "reaped_seconds_after_kill": h.summary(reaped, 2),
        "reap_bound_seconds": bound,
        "terminal_bound_seconds": terminal_bound,
        "interrupted_terminal_seconds_after_kill": h.summary(terminal, 2),
        "all_terminal_seconds_after_kill": round(done_after, 2),
        "attempts_executed_twice": len(twice),
        "statuses": dict(statuses),
        "checks": {
            "no_attempt_executed_twice": not twice,
            "every_run_succeeded": statuses == {states.SUCCEEDED: count},
            "the_kill_interrupted_runs": bool(reaped),
        },
        "goals": {
            "interrupted_runs_reaped_within_the_bound": bool(reaped) and max(reaped) <= bound,
            "interrupted_runs_terminal_within_the_bound": bool(terminal)
            and max(terminal) <= terminal_bound,
        },
    }


def _interrupted(tenant, run_ids, killed_at: float) -> tuple[list[float], list[float]]:
    """Seconds after the kill at which each interrupted run's lost attempt was reaped, and
    at which the run ended."""
    with schema_context(tenant.schema_name):
        lost = Attempt.objects.filter(run_id__in=run_ids, outcome=states.ATTEMPT_LOST)
        reaped = {a.run_id: a.finished_at.timestamp() - killed_at for a in lost}
        ended = dict(Run.objects.filter(id__in=list(reaped)).values_list("id", "finished_at"))
    return list(reaped.values()), [at.timestamp() - killed_at for at in ended.values()]


def _all_terminal(tenant, run_ids) -> dict | None:
    with schema_context(tenant.schema_name):
        rows = dict(
            (r[0], (r[1], r[2]))
            for r in Run.objects.filter(id__in=run_ids).values_list("id", "status", "attempt")
        )
    if all(status in states.TERMINAL for status, _ in rows.values()):
        return rows
    return None
