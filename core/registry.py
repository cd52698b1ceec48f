"""Python callables that jobs with a `task` target run, registered by name in code.

@register_task("reports.daily")
def daily_report(payload: dict, context: RunContext) -> object: ...
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

TaskFunction = Callable[[dict, "RunContext"], Any]
_REGISTRY: dict[str, TaskFunction] = {}
_NO_SCHEMA: set[str] = set()


@dataclass(frozen=True)
class RunContext:
    run_id: str
    job_id: int
    tenant_schema: str
    attempt: int
    scheduled_for: datetime
    # Set once the run is cancelled (seen at the worker's next heartbeat).
    stopped: threading.Event = field(default_factory=threading.Event)

    def should_stop(self) -> bool:
        return self.stopped.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, waking at once if the run is cancelled; True if it was.
        Prefer it to polling: thousands of runs in one thread worker cost nothing idle."""
        return self.stopped.wait(seconds)


def register_task(
    name: str, *, tenant_schema: bool = True
) -> Callable[[TaskFunction], TaskFunction]:
    """Register `func` under `name`. It runs with the connection in its tenant's schema, so
    the ORM sees that tenant's tables; `tenant_schema=False` skips the switch (and its
    SET search_path round trips) for tasks that never touch the database."""

    def decorator(func: TaskFunction) -> TaskFunction:
        if name in _REGISTRY and _REGISTRY[name] is not func:
            raise ValueError(f"task {name!r} is registered twice")
        _REGISTRY[name] = func
        if not tenant_schema:
            _NO_SCHEMA.add(name)
        return func

    return decorator


def needs_tenant_schema(name: str) -> bool:
    return name not in _NO_SCHEMA


def get_task(name: str) -> TaskFunction | None:
    return _REGISTRY.get(name)


def task_names() -> list[str]:
    return sorted(_REGISTRY)
