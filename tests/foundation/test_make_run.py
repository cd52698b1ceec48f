"""`make run` says which database it takes (new, or reused: which server, how many
tenants), and Ctrl-C in its terminal ends everything with exit status 0 and no make
`Error 130` line."""

from __future__ import annotations

import os
import pty
import select
import signal
import socket
import time
from pathlib import Path

import pytest
from django.conf import settings

from devstack.services import describe_database, ensure_database, with_db_name

ROOT = Path(__file__).resolve().parents[2]


def _server_url() -> str:
    """The test database's server, its maintenance database."""
    db = settings.DATABASES["default"]
    return f"postgresql://{db['USER'] or 'postgres'}@{db['HOST']}:{db['PORT'] or 5432}/postgres"


def _drop(name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(_server_url(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def scratch_database():
    name = f"{settings.DATABASES['default']['NAME']}_make_run"
    _drop(name)
    ensure_database(_server_url(), name)
    yield name, with_db_name(_server_url(), name)
    _drop(name)


def test_a_new_database_is_said_to_be_new(scratch_database):
    name, url = scratch_database
    line = describe_database(url)
    assert line.startswith(f"Database {name} on ") and "new (no tenants yet)" in line


def test_a_reused_database_names_its_server_and_counts_its_tenants(world):
    url = with_db_name(_server_url(), settings.DATABASES["default"]["NAME"])
    line = describe_database(url)
    host, port = settings.DATABASES["default"]["HOST"], settings.DATABASES["default"]["PORT"]
    assert line.startswith(f"Reusing the existing database {settings.DATABASES['default']['NAME']}")
    assert f"on {host}:{port or 5432}" in line
    assert "2 tenants (alpha, beta)" in line and "Set DATABASE_URL" in line


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _read_until(fd: int, done, timeout: float) -> bytes:
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline and not done(out):
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the terminal closed: everything has exited
                break
            if not chunk:
                break
            out += chunk
    return out


@pytest.mark.slow
def test_ctrl_c_in_the_terminal_stops_everything_with_exit_status_0(scratch_database, tmp_path):
    """Through a real terminal (a pty), as a person runs it: `make run`, wait for the web,
    scheduler and worker, press Ctrl-C."""
    _, url = scratch_database
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "REDIS_URL": settings.REDIS_URL,
        "PORT": str(_free_port()),
        "DEVSTACK_DATA_DIR": str(tmp_path),
    }
    env.pop("MAKEFLAGS", None)
    pid, fd = pty.fork()
    if pid == 0:  # the child: make in a terminal of its own
        os.chdir(ROOT)
        os.execvpe("make", ["make", "run"], env)
    try:
        started = _read_until(
            fd, lambda out: b"Listening at" in out and b"ready." in out, timeout=180
        )
        assert b"Database " in started and b"new (no tenants yet)" in started, started[-3000:]
        time.sleep(1)
        os.write(fd, b"\x03")  # Ctrl-C, delivered by the terminal to its foreground group
        ended = _read_until(fd, lambda out: False, timeout=60)
        _, status = os.waitpid(pid, 0)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, ended[-3000:]
    assert b"stopped (Ctrl-C)" in ended
    assert b"Error 130" not in ended and b"Interrupt" not in ended
