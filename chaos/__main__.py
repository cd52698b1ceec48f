"""`make chaos [ARGS="--small scenario ..."]`: run the chaos scenarios, print their figures.

Each scenario writes its processes' logs under a fresh directory (printed) and drops the
tenants it made. `--json` prints one JSON object per scenario, for the CI test.

A scenario returns `checks` (what must hold whatever the machine's load: nothing lost or
doubled, nobody exits) and `goals` (wall-clock and memory bounds). A failed check fails the
run at any size; a missed goal fails `make chaos` at full size but only prints at `--small`,
the size CI runs on a shared machine, where a time is a figure and never a verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import django

SCENARIOS = {
    "leader-kill": "s1_leader_kill",
    "leader-freeze": "s2_leader_freeze",
    "worker-kill": "s3_worker_kill",
    "redis-restart": "s4_redis_restart",
    "postgres-restart": "s5_postgres_restart",
    "broker-backlog": "s6_broker_backlog",
    "bad-data": "s7_bad_data",
    "partition-churn": "s8_partition_churn",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make chaos ARGS=")
    parser.add_argument("scenarios", nargs="*", choices=[*SCENARIOS, []], default=[])
    parser.add_argument("--small", action="store_true", help="the size CI runs")
    parser.add_argument("--json", action="store_true", help="one JSON object per scenario")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_site.settings")
    os.environ.setdefault("SCHEDULER_TASK_MODULES", "chaos.tasks")
    django.setup()
    from importlib import import_module

    from core.redis import get_redis

    from . import harness

    failed = False
    for name in args.scenarios or list(SCENARIOS):
        workdir = Path(tempfile.mkdtemp(prefix=f"chaos-{name}-"))
        get_redis().flushdb()  # each scenario starts with an empty broker and index
        started = time.monotonic()
        try:
            result = import_module(f"chaos.{SCENARIOS[name]}").run(workdir, small=args.small)
        except Exception as exc:
            traceback.print_exc()
            result = {"error": f"{exc.__class__.__name__}: {exc}", "checks": {"ran": False}}
        finally:
            if not os.environ.get("CHAOS_KEEP"):  # CHAOS_KEEP=1 leaves them, to look at
                harness.drop_chaos_tenants()
        result = {"scenario": name, "seconds": round(time.monotonic() - started, 1), **result}
        result["logs"] = str(workdir)
        failed |= not all(result["checks"].values())
        if not args.small:  # timing goals fail `make chaos`, never the CI test (`--small`)
            failed |= not all(result.get("goals", {}).values())
        if args.json:
            print(json.dumps(result, default=str), flush=True)
        else:
            print(f"\n== {name} ({result['seconds']} s; logs in {workdir})")
            for key, value in result.items():
                if key not in ("scenario", "seconds", "logs"):
                    print(f"  {key:36} {value}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
