"""`python -m devstack run|test|smoke|env`: the launcher behind `make run` and `make test`."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .services import Resolved, describe_database, resolve

ROOT = Path(__file__).resolve().parent.parent
SIGINT_RC = 128 + signal.SIGINT  # what honcho's manager sets when Ctrl-C stopped it


def _base_env(resolved: Resolved) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = resolved.database_url
    env["REDIS_URL"] = resolved.redis_url
    env.setdefault("DEBUG", "1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _manage(env: dict[str, str], *args: str, capture: bool = False) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        check=True,
        text=True,
        stdout=subprocess.PIPE if capture else None,
    )
    return result.stdout or ""


def _prepare(env: dict[str, str], data_dir: Path) -> dict:
    _manage(env, "migrate", "--noinput", "-v", "0")
    out = _manage(env, "ensure_demo", "--state-file", str(data_dir / "demo.json"), capture=True)
    return json.loads(out.strip().splitlines()[-1])


def _metrics_dir(env: dict[str, str], data_dir: Path) -> Path:
    """The directory where web, worker and scheduler processes write their metrics
    (prometheus_client's multiprocess mode), emptied before they start: files of processes
    that no longer run would otherwise stay (their counters only, which add up right)."""
    path = Path(env.setdefault("PROMETHEUS_MULTIPROC_DIR", str(data_dir / "metrics")))
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()
    return path


def _say(lines: list[str]) -> None:
    print("\n".join(lines), flush=True)


def _hold_the_terminal() -> Callable[[], None]:
    """Move into a process group of our own and make it the terminal's foreground group, so
    that Ctrl-C reaches this launcher (which stops everything and exits 0) and not `make`
    around it (which would print `Error 130` or `Interrupt`). Returns how to undo it."""
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd) or os.getpid() == os.getsid(0):
            return lambda: None
        previous = os.tcgetpgrp(fd)
        signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group may then take it
        os.setpgid(0, 0)
        os.tcsetpgrp(fd, os.getpgrp())
    except OSError:
        return lambda: None

    def undo() -> None:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, previous)

    return undo


def cmd_run(args: argparse.Namespace) -> int:
    from honcho.environ import parse_procfile
    from honcho.manager import Manager
    from honcho.printer import Printer

    data_dir = Path(args.data_dir).resolve()
    resolved = resolve(data_dir=data_dir)
    env = _base_env(resolved)
    port = env.setdefault("PORT", "8000")
    _say([f"[devstack] {note}" for note in resolved.notes])
    _say([f"[devstack] {describe_database(resolved.database_url)}"])
    demo = _prepare(env, data_dir)
    metrics_dir = _metrics_dir(env, data_dir)
    procfile = parse_procfile((ROOT / "Procfile").read_text())
    manager = Manager(Printer(sys.stdout))
    for name, command in procfile.processes.items():
        manager.add_process(name, command, env=env, cwd=str(ROOT))
    _say(
        [
            "",
            "Tickwork is starting: web, scheduler and worker.",
            f"  Dashboard  http://{demo['domain']}:{port}/   "
            f"user {demo['user']} / {demo['password']}",
            f"  Admin      http://localhost:{port}/admin/   user {demo['operator']} / "
            f"{demo['operator_password']}",
            f"  API token  {demo['token']}",
            f"  Metrics    http://localhost:{port}/metrics   (processes write to {metrics_dir})",
            f"  Try        curl -H 'Authorization: Bearer {demo['token']}' "
            f"http://localhost:{port}/api/v1/jobs",
            "Press Ctrl-C to stop every process.",
            "",
        ]
    )
    release = _hold_the_terminal()
    try:
        manager.loop()
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        manager.returncode = SIGINT_RC
    finally:
        release()
    # honcho answers Ctrl-C by stopping every process and setting 130: a normal way to stop,
    # so exit 0 (make then prints no `Error 130`).
    if manager.returncode == SIGINT_RC:
        print("[devstack] stopped (Ctrl-C); every process has ended.", flush=True)
        return 0
    return manager.returncode or 0


def cmd_test(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    resolved = resolve(data_dir=data_dir)
    env = _base_env(resolved)
    _say([f"[devstack] {note}" for note in resolved.notes])
    pytest_args = [a for a in args.rest if a != "--"]
    return subprocess.call([sys.executable, "-m", "pytest", *pytest_args], env=env, cwd=ROOT)


def cmd_bench(args: argparse.Namespace) -> int:
    """Benchmarks run in their own database and Redis DB, never the development data."""
    from .services import BENCH_DB_NAME, ensure_database, with_db_name, with_redis_db

    resolved = resolve(data_dir=Path(args.data_dir).resolve())
    ensure_database(with_db_name(resolved.database_url, "postgres"), BENCH_DB_NAME)
    resolved.database_url = with_db_name(resolved.database_url, BENCH_DB_NAME)
    resolved.redis_url = with_redis_db(resolved.redis_url, 14)
    env = _base_env(resolved)
    env.setdefault("SCHEDULER_MIN_INTERVAL_SECONDS", "1")
    _say([f"[devstack] {note}" for note in resolved.notes])
    _manage(env, "migrate", "--noinput", "-v", "0")
    bench_args = [a for a in args.rest if a != "--"]
    return subprocess.call([sys.executable, "-m", "bench", *bench_args], env=env, cwd=ROOT)


def cmd_chaos(args: argparse.Namespace) -> int:
    """The chaos scenarios run in their own database and Redis DB, like the benchmarks."""
    from .services import ensure_database, with_db_name, with_redis_db

    resolved = resolve(data_dir=Path(args.data_dir).resolve())
    ensure_database(with_db_name(resolved.database_url, "postgres"), "tickwork_chaos")
    resolved.database_url = with_db_name(resolved.database_url, "tickwork_chaos")
    resolved.redis_url = with_redis_db(resolved.redis_url, 12)
    env = _base_env(resolved)
    env.setdefault("SCHEDULER_MIN_INTERVAL_SECONDS", "1")
    env.setdefault("SCHEDULER_TASK_MODULES", "chaos.tasks")
    _say([f"[devstack] {note}" for note in resolved.notes])
    _manage(env, "migrate", "--noinput", "-v", "0")
    chaos_args = [a for a in args.rest if a != "--"]
    return subprocess.call([sys.executable, "-m", "chaos", *chaos_args], env=env, cwd=ROOT)


def cmd_smoke(args: argparse.Namespace) -> int:
    """Resolve services, migrate, provision the demo and check readiness, then stop."""
    data_dir = Path(args.data_dir).resolve()
    resolved = resolve(data_dir=data_dir)
    env = _base_env(resolved)
    demo = _prepare(env, data_dir)
    ready = _manage(env, "check_ready", capture=True).strip()
    print(
        json.dumps(
            {
                "notes": resolved.notes,
                "embedded": resolved.embedded,
                "demo_domain": demo["domain"],
                "ready": ready,
            }
        )
    )
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    resolved = resolve(data_dir=Path(args.data_dir).resolve())
    if resolved.embedded:
        print(
            "# embedded services stop when this command exits; use `make run` instead",
            file=sys.stderr,
        )
    print(f"export DATABASE_URL='{resolved.database_url}'")
    print(f"export REDIS_URL='{resolved.redis_url}'")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack")
    parser.add_argument("--data-dir", default=os.environ.get("DEVSTACK_DATA_DIR", ".data"))
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="start web, scheduler and worker with a demo tenant")
    test = sub.add_parser("test", help="run the test suite against real services")
    test.add_argument("rest", nargs=argparse.REMAINDER)
    bench = sub.add_parser("bench", help="run the benchmarks (their own database)")
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    chaos = sub.add_parser("chaos", help="run the chaos scenarios (their own database)")
    chaos.add_argument("rest", nargs=argparse.REMAINDER)
    sub.add_parser("smoke", help="bootstrap once and check readiness, then exit")
    sub.add_parser("env", help="print the resolved DATABASE_URL and REDIS_URL")
    args = parser.parse_args(argv)
    handlers = {
        "run": cmd_run,
        "test": cmd_test,
        "bench": cmd_bench,
        "chaos": cmd_chaos,
        "smoke": cmd_smoke,
        "env": cmd_env,
    }
    try:
        return handlers[args.command](args)
    except subprocess.CalledProcessError as exc:
        print(
            f"[devstack] {' '.join(map(str, exc.cmd[1:]))} failed (exit {exc.returncode})",
            file=sys.stderr,
        )
        return exc.returncode or 1


if __name__ == "__main__":
    sys.exit(main())
