"""Python callables that jobs with a `task` target run, registered by name in code.

@register_task("reports.daily")
def daily_report(payload: dict, context: RunContext) -> object: ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

TaskFunction = Callable[[dict, "RunContext"], Any]
_REGISTRY: dict[str, TaskFunction] = {}


@dataclass(frozen=True)
class RunContext:
    run_id: str
    job_id: int
    tenant_schema: str
    attempt: int
    scheduled_for: datetime
    should_stop: Callable[[], bool] = lambda: False  # True once the run is cancelled


def register_task(name: str) -> Callable[[TaskFunction], TaskFunction]:
    def decorator(func: TaskFunction) -> TaskFunction:
        if name in _REGISTRY and _REGISTRY[name] is not func:
            raise ValueError(f"task {name!r} is registered twice")
        _REGISTRY[name] = func
        return func

    return decorator


def get_task(name: str) -> TaskFunction | None:
    return _REGISTRY.get(name)


def task_names() -> list[str]:
    return sorted(_REGISTRY)
