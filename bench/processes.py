"""Worker processes for benchmarks (the bench's own database and Redis DB)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def production_env() -> dict[str, str]:
    """Run the measured processes as in production, with DEBUG off: with it on, Django's
    debug cursor formats and keeps every statement (the leader's carry arrays of thousands
    of ids), which cost the fire step tens of milliseconds. The keys are the bench's own,
    so that the processes read what this one wrote."""
    from django.conf import settings

    return {
        "DEBUG": "0",
        "SECRET_KEY": "bench-" + settings.SECRET_KEY,
        "TICKWORK_SECRET_KEYS": ",".join(settings.TICKWORK_SECRET_KEYS),
    }


def start_worker(*args: str, log: Path, **env: str) -> subprocess.Popen:
    full_env = {**os.environ, **production_env(), **env}
    log.parent.mkdir(parents=True, exist_ok=True)  # bench/results is not in git
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "scheduler_site",
        "worker",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--loglevel",
        "WARNING",
        *args,
    ]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=full_env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def start_scheduler(*, log: Path, **env: str) -> subprocess.Popen:
    """A `manage.py runscheduler` process (leader or standby) on the bench's database."""
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "manage.py", "runscheduler"],
        cwd=ROOT,
        env={**os.environ, **production_env(), **env},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill9(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants (Linux /proc)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        todo.extend(int(c) for c in children)
    return total


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
