"""Settings checked in a fresh interpreter: each test's environment reaches
`scheduler_site.settings` at import, which a test process has long done."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUP = ["-c", "import django; django.setup()"]
CHECK = ["manage.py", "check"]
SHELL = ["manage.py", "shell", "-c"]


def run_django(
    env_overrides: dict[str, str], command: list[str] = SETUP, drop: Iterable[str] = ()
) -> subprocess.CompletedProcess:
    """`python <command>` with this process's environment less `drop`, plus the overrides."""
    dropped = set(drop)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(env_overrides, DJANGO_SETTINGS_MODULE="scheduler_site.settings")
    return subprocess.run(
        [sys.executable, *command],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
