"""The API fuzzed as a client would: schemathesis 4's own CLI with every check (`-c all`)
against the live schema of gunicorn (2 workers, DEBUG off) with a tenant's token, seeded and
bounded in time. The repository's schemathesis.toml (and tests/api/fuzz_hooks.py) tell it
what the schema cannot: generators for the `cron` and `time-zone` formats, and which fields
a schema-valid request may still be refused for. Beside the in-process run of
test_schema.py, which sends more cases per operation but with fewer checks."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from ..scenarios.procs import ROOT, Proc, process_env, wait_for

pytestmark = pytest.mark.slow

# 60 s reaches every operation (36, about 1,300 cases here); set more for a deeper hunt.
SECONDS = os.environ.get("API_FUZZ_CLI_SECONDS", "60")
SEED = os.environ.get("API_FUZZ_CLI_SEED", "20261201")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture
def gunicorn(live, tmp_path):
    port = _free_port()
    env = process_env(
        DEBUG="0",
        SECRET_KEY="fuzz-" + "k" * 50,
        SESSION_COOKIE_SECURE="0",
        TICKWORK_SECRET_KEYS=Fernet.generate_key().decode(),  # DEBUG off needs a real key
    )
    web = Proc(
        "web",
        [
            sys.executable,
            "-m",
            "gunicorn",
            "scheduler_site.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--no-control-socket",
        ],
        env,
        tmp_path,
    )
    try:
        wait_for(lambda: _answers(port), timeout=30)
        yield port
    finally:
        web.stop()


def test_schemathesis_cli_with_every_check_finds_nothing(gunicorn, live, tmp_path):
    cli = Path(sys.executable).parent / "schemathesis"
    result = subprocess.run(
        [
            str(cli),
            "run",
            f"http://127.0.0.1:{gunicorn}/api/v1/openapi.json",
            "--checks",
            "all",
            "--header",
            f"Authorization: Bearer {live['alpha'].token}",
            "--seed",
            SEED,
            "--max-time",
            SECONDS,
            "--workers",
            "1",
            "--no-color",
        ],
        cwd=ROOT,  # where schemathesis.toml is
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=int(SECONDS) + 300,
    )
    summary = result.stdout[result.stdout.find("SUMMARY") :]
    print(summary)
    assert result.returncode == 0, result.stdout[-12_000:] + result.stderr[-3000:]
    tested = re.search(r"Tested: (\d+)", summary)
    assert tested is not None and int(tested.group(1)) >= 26, summary  # every operation
