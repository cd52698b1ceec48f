"""The task the chaos scenarios' jobs run (loaded by their workers: SCHEDULER_TASK_MODULES).

It writes `<run id>:<attempt>` to a ledger list in a Redis that the scenario does not
disturb (`CHAOS_LEDGER_URL`, default REDIS_URL), so that the scenario can count how often
each attempt really executed, then sleeps for `seconds` (stopping early when cancelled).
"""

from __future__ import annotations

import os
from functools import lru_cache

import redis

from core.registry import RunContext, register_task

LEDGER_KEY = "chaos:executions"


@lru_cache(maxsize=1)
def ledger_client() -> redis.Redis:
    from django.conf import settings

    return redis.Redis.from_url(
        os.environ.get("CHAOS_LEDGER_URL") or settings.REDIS_URL, socket_timeout=5
    )


@register_task("chaos.record", tenant_schema=False)
def record(payload: dict, context: RunContext) -> dict:
    ledger_client().rpush(LEDGER_KEY, f"{context.run_id}:{context.attempt}")
    context.wait(float(payload.get("seconds", 0)))
    return {"ok": True}
