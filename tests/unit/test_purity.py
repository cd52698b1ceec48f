"""Pure logic stays pure: schedule math, slot planning, admission, retry arithmetic, run
outcomes and states, DAG checks import no Django, Redis, database or broker code (directly
or through what they import), so they are unit-tested in milliseconds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("django", "redis", "redis_lock", "psycopg", "celery", "kombu", "rest_framework")
PURE_MODULES = (
    "jobs.schedules",
    "jobs.dag",
    "beat.planning",
    "beat.partition_plan",
    "core.partitions",
    "beat.admission",
    "beat.fair_share",
    "beat.retention_plan",
    "beat.messages",
    "runs.retry",
    "runs.outcomes",
    "runs.states",
    "runs.slot_changes",
    "runs.dag_progress",
    "core.clock",
    "core.encryption",
    "core.webhook_signing",
    "core.redaction",
    "core.logs",
    "jobs.headers",
    "runs.targets.http_async",
    "alerts.states",
    "alerts.conditions",
    "alerts.payloads",
)


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_module_loads_no_framework(module):
    code = f"import sys, {module}; print(','.join(sorted(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert not [m for m in loaded.split(",") if m.split(".")[0] in FORBIDDEN]


def test_the_check_sees_a_framework_import():
    code = "import sys, core.keys; print(','.join(sorted(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "django" in loaded.split(",")
