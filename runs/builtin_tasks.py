"""Built-in tasks for demos, tests and benchmarks."""

from __future__ import annotations

import time

from core.registry import RunContext, register_task


class TaskFailed(Exception):
    pass


@register_task("builtin.noop", tenant_schema=False)
def noop(payload: dict, context: RunContext) -> dict:
    return {"ok": True}


@register_task("builtin.sleep", tenant_schema=False)
def sleep(payload: dict, context: RunContext) -> dict:
    """Sleep `seconds` (default 1); a cancellation ends it early."""
    seconds = float(payload.get("seconds", 1))
    started = time.monotonic()
    if context.wait(seconds):
        return {"slept": round(time.monotonic() - started, 3), "stopped": True}
    return {"slept": seconds}


@register_task("builtin.fail", tenant_schema=False)
def fail(payload: dict, context: RunContext) -> dict:
    """Fail the first `times` attempts (default: every attempt), then succeed."""
    times = payload.get("times")
    if times is None or context.attempt <= int(times):
        raise TaskFailed(f"builtin.fail: attempt {context.attempt} fails as asked")
    return {"ok": True, "attempt": context.attempt}
