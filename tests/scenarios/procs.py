"""Start the real processes (runscheduler, celery worker) against the test database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    s = connection.settings_dict
    host = s.get("HOST") or ""
    socket_dir = (s.get("OPTIONS") or {}).get("host")
    if socket_dir:
        return f"postgresql://{s['USER']}@/{s['NAME']}?host={socket_dir}"
    return f"postgresql://{s['USER']}@{host}:{s.get('PORT') or 5432}/{s['NAME']}"


def process_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="scheduler_site.settings",
        DEBUG="1",
        DATABASE_URL=test_database_url(),
        REDIS_URL=settings.REDIS_URL,
        SCHEDULER_MIN_INTERVAL_SECONDS="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


class Proc:
    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("w")
        self.popen = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill9(self) -> None:
        os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def stop(self, timeout: float = 15) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text()


def scheduler(log_dir: Path, name: str, **env: str) -> Proc:
    return Proc(name, [sys.executable, "manage.py", "runscheduler"], process_env(**env), log_dir)


def worker(log_dir: Path, name: str, *extra: str, **env: str) -> Proc:
    args = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "scheduler_site",
        "worker",
        "-n",
        f"{name}@%h",
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        *extra,
    ]
    return Proc(name, args, process_env(**env), log_dir)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def web(log_dir: Path, port: int, *, workers: int = 1, threads: int = 4, **env: str) -> Proc:
    """gunicorn serving the site on 127.0.0.1:`port`, as the Procfile runs it."""
    args = [sys.executable, "-m", "gunicorn", "scheduler_site.wsgi", "--bind"]
    args += [f"127.0.0.1:{port}", "--workers", str(workers), "--threads", str(threads)]
    return Proc("web", args, process_env(**env), log_dir)


def wait_for(predicate, timeout: float, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")
