"""Tasks the scenario tests load into their worker processes (SCHEDULER_TASK_MODULES)."""

from __future__ import annotations

import time

from core.redis import get_redis
from core.registry import RunContext, register_task

EXECUTIONS_KEY = "test:executions"


@register_task("test.record")
def record(payload: dict, context: RunContext) -> dict:
    """Log `<run id>:<attempt>` in Redis when it starts, then sleep `seconds`."""
    get_redis().rpush(EXECUTIONS_KEY, f"{context.run_id}:{context.attempt}")
    deadline = time.monotonic() + float(payload.get("seconds", 0))
    while time.monotonic() < deadline and not context.should_stop():
        time.sleep(0.05)
    return {"ok": True}


BARRIER_KEY = "test:barrier"


@register_task("test.barrier")
def barrier(payload: dict, context: RunContext) -> dict:
    """Wait until `parties` runs created at the same instant (a DAG run's branches) have all
    started, then end together: two upstreams finishing at the same moment."""
    client = get_redis()
    key = f"{BARRIER_KEY}:{context.scheduled_for.isoformat()}"
    client.incr(key)
    client.expire(key, 120)
    parties = int(payload.get("parties", 2))
    deadline = time.monotonic() + float(payload.get("timeout", 20))
    while int(client.get(key) or 0) < parties:
        if time.monotonic() > deadline:
            return {"met": False}
        time.sleep(0.002)
    client.rpush(f"{BARRIER_KEY}:met", context.run_id)
    return {"met": True}


@register_task("test.tenant_jobs")
def tenant_jobs(payload: dict, context: RunContext) -> list[str]:
    """The names of the jobs the ORM sees from the run's tenant schema (its search_path)."""
    from jobs.models import Job

    return sorted(Job.objects.values_list("name", flat=True))
