"""A PgBouncer for the tests and the benchmarks: this machine's `pgbouncer` in transaction
mode in front of a PostgreSQL server, with a server pool small enough that clients share
server connections (what DB_TRANSACTION_POOLING's tests and benchmark need to see)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_CONFIG = """\
[databases]
* = host={pg_host} port={pg_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/users.txt
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
server_reset_query =
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
admin_users = {user}
"""


@dataclass
class PgBouncer:
    port: int
    pool_size: int
    log: Path

    def url(self, database: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"


def unavailable() -> str | None:
    """Why the tests cannot start a PgBouncer here, or None."""
    if shutil.which("pgbouncer") is None and not Path("/usr/sbin/pgbouncer").exists():
        return "pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "pgbouncer does not run as root, and there is no postgres user to run it as"
    return None


def target_of(settings_dict: dict) -> tuple[str, int]:
    """Where a Django database's PostgreSQL listens (a host, or a socket directory)."""
    host = (settings_dict.get("OPTIONS") or {}).get("host") or settings_dict.get("HOST")
    return host or "127.0.0.1", int(settings_dict.get("PORT") or 5432)


def _free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@contextmanager
def running_pgbouncer(
    pool_size: int = 2, pg_host: str = "127.0.0.1", pg_port: int = 5432, user: str = "postgres"
) -> Iterator[PgBouncer]:
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    # A port of this test run's own (runs side by side differ by TEST_REDIS_DB).
    port = 16400 + int(os.environ.get("TEST_REDIS_DB", "15")) * 10
    while not _free(port):
        port += 1
    workdir = Path(tempfile.mkdtemp(prefix="tw-pgbouncer-"))
    (workdir / "users.txt").write_text(f'"{user}" ""\n')
    config = workdir / "pgbouncer.ini"
    config.write_text(
        _CONFIG.format(
            pg_host=pg_host, pg_port=pg_port, port=port, dir=workdir, pool_size=pool_size, user=user
        )
    )
    args = [binary, str(config)]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root; it switches to this user after reading its files.
        shutil.chown(workdir, "postgres")
        for path in workdir.iterdir():
            shutil.chown(path, "postgres")
        args = [binary, "-u", "postgres", str(config)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while _free(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = workdir / "pgbouncer.log"
                raise RuntimeError(
                    "pgbouncer did not start: " + (log.read_text() if log.exists() else "")
                )
            time.sleep(0.05)
        yield PgBouncer(port=port, pool_size=pool_size, log=workdir / "pgbouncer.log")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
