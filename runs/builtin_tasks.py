"""Built-in tasks for demos, tests and benchmarks."""

from __future__ import annotations

import time

from .registry import RunContext, register_task


class TaskFailed(Exception):
    pass


@register_task("builtin.noop", tenant_schema=False)
def noop(payload: dict, context: RunContext) -> dict:
    return {"ok": True}


@register_task("builtin.sleep", tenant_schema=False)
def sleep(payload: dict, context: RunContext) -> dict:
    """Sleep `seconds` (default 1), waking every 0.2 s to honour a cancellation."""
    seconds = float(payload.get("seconds", 1))
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if context.should_stop():
            return {"slept": seconds - left, "stopped": True}
        time.sleep(min(left, 0.2))
    return {"slept": seconds}


@register_task("builtin.fail", tenant_schema=False)
def fail(payload: dict, context: RunContext) -> dict:
    """Fail the first `times` attempts (default: every attempt), then succeed."""
    times = payload.get("times")
    if times is None or context.attempt <= int(times):
        raise TaskFailed(f"builtin.fail: attempt {context.attempt} fails as asked")
    return {"ok": True, "attempt": context.attempt}
