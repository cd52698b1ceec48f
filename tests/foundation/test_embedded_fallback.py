"""The path a new user takes: no DATABASE_URL, nothing answering on localhost."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_bootstrap_starts_embedded_postgres_and_redis_when_nothing_answers(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["DEVSTACK_PG_PROBE"] = f"127.0.0.1:{_closed_port()}"
    env["DEVSTACK_REDIS_PROBE"] = f"127.0.0.1:{_closed_port()}"
    data_dir = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, "-m", "devstack", "--data-dir", str(data_dir), "smoke"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["embedded"] == ["postgresql", "redis"]
    assert summary["ready"] == "ready"
    assert summary["demo_domain"] == "demo.localhost"
    assert (data_dir / "pg" / "PG_VERSION").exists()
    # A second bootstrap reuses what the first created (same data directory, same demo).
    again = subprocess.run(
        [sys.executable, "-m", "devstack", "--data-dir", str(data_dir), "smoke"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    # Both runs stopped their embedded servers on exit.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(data_dir) not in ps
