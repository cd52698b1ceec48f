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
