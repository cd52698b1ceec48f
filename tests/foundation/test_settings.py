from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _django_setup(env_overrides: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    env.update(env_overrides, DJANGO_SETTINGS_MODULE="scheduler_site.settings")
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_refuses_the_development_secret_key():
    result = _django_setup({"DEBUG": "0"})
    assert result.returncode != 0
    assert "SECRET_KEY is the development key" in result.stderr


def test_production_starts_with_a_real_secret_key():
    result = _django_setup({"DEBUG": "0", "SECRET_KEY": "x" * 50})
    assert result.returncode == 0, result.stderr


def test_a_malformed_setting_names_the_variable():
    result = _django_setup({"DEBUG": "1", "SCHEDULER_SHARD_COUNT": "four"})
    assert result.returncode != 0
    assert "SCHEDULER_SHARD_COUNT='four': expected a whole number" in result.stderr
