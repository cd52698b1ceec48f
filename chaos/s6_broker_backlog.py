"""Scenario 6: a broker backlog of 100,000 messages that the workers fall far behind on.

`due` jobs (bulk COPY) fall due on one instant; the leader materialises and publishes them
all while a single slow worker (2 processes, 50 ms a run) drains a few dozen a second.
Meanwhile the API is asked for the tenant's runs and jobs once a second.

Figures: the scheduler's and the worker's resident memory (peak, when the whole burst was
in the broker, and at the end: it must not keep growing while the backlog stands), the
backlog reached, and the API's answer times (p50/p99) and failures while it stands.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
from django.db import connection
from psycopg import sql

from bench.world import copy_jobs, index_jobs
from core.redis import get_redis
from core.sql import table
from runs import states
from tenants.tokens import token_issue

from . import harness as h

ENV = {
    # The default 2 s lease: the one tenant's burst is materialised in chunks with the
    # lease renewed between them (with one transaction for the whole batch, the leader lost
    # its lease over and over on a slow database and published nothing).
    "SCHEDULER_LEASE_SECONDS": "2",
    "SCHEDULER_LOOKAHEAD_SECONDS": "20",
    "SCHEDULER_VISIBILITY_TIMEOUT_SECONDS": "600",
}


def run(workdir: Path, *, small: bool) -> dict:
    due, watch_seconds = (10_000, 20) if small else (100_000, 60)
    client = get_redis()
    tenant = h.chaos_tenant("chaos-backlog")
    with connection.cursor() as cursor:
        cursor.execute(sql.SQL("DELETE FROM {}").format(table(tenant.schema_name, "runs_run")))
        cursor.execute(sql.SQL("DELETE FROM {}").format(table(tenant.schema_name, "jobs_job")))
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=25)
    copy_jobs(tenant, due, at, spread_seconds=1, name="burst")  # hourly, all due at `at`
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("UPDATE {} SET payload = %s").format(table(tenant.schema_name, "jobs_job")),
            [json.dumps({"seconds": 0.05})],
        )
        cursor.execute(
            sql.SQL("UPDATE {} SET target = %s").format(table(tenant.schema_name, "jobs_job")),
            [json.dumps({"task": "chaos.record"})],
        )
    index_jobs(client, tenant)
    token = token_issue(tenant=tenant, name="chaos").plain
    port = h.free_port()
    env = h.process_env(**ENV)
    samples: dict[str, list[float]] = {"scheduler": [], "worker": []}
    answers: list[float] = []
    failures = 0
    backlog_peak = 0
    rss_when_published: dict[str, float] = {}  # once the whole burst is in the broker
    with h.Fleet(workdir) as fleet:
        sched = fleet.add(h.scheduler(workdir, "s", env))
        work = fleet.add(h.worker(workdir, "w", env, "-c", "2"))
        fleet.add(h.web(workdir, "web", env, port))
        h.wait_for(lambda: _answers(port, token) is not None, timeout=60)
        deadline = at.timestamp() + watch_seconds
        while time.time() < deadline:
            samples["scheduler"].append(_rss_mb(sched.pid))
            samples["worker"].append(_rss_mb(work.pid))
            backlog = _backlog(client)
            backlog_peak = max(backlog_peak, backlog)
            if not rss_when_published and backlog >= due * 0.9:
                rss_when_published = {k: v[-1] for k, v in samples.items()}
            for path in ("runs?page_size=50", "jobs?page_size=50"):
                seconds = _answers(port, token, path)
                if seconds is None:
                    failures += 1
                else:
                    answers.append(seconds)
            time.sleep(max(0.0, 1.0 - (time.time() % 1)))
        # Every run of the burst is published in the end (a check, with a generous bound:
        # how soon is a goal, above): none stays `scheduled`.
        with contextlib.suppress(TimeoutError):
            h.wait_for(lambda: _still_scheduled(tenant) == 0, timeout=180, interval=1.0)
        left_scheduled = _still_scheduled(tenant)
    published = backlog_peak
    # Memory is bounded when it stops growing once the burst is out, although the backlog
    # still stands: at most 20% (and 50 MB) more at the end than when the last went out.
    bounded = {
        name: bool(rss_when_published)
        and values[-1] <= max(rss_when_published[name] * 1.2, rss_when_published[name] + 50)
        for name, values in samples.items()
    }
    return {
        "due_at_once": due,
        "backlog_peak_messages": published,
        "scheduler_rss_mb": _rss_figures(samples["scheduler"], rss_when_published, "scheduler"),
        "worker_rss_mb": _rss_figures(samples["worker"], rss_when_published, "worker"),
        "api_seconds": h.summary(answers),
        "api_failures": failures,
        "runs_left_scheduled": left_scheduled,
        "checks": {
            "api_kept_answering": failures == 0,
            "backlog_formed": published >= due // 2,
            "every_burst_run_published": left_scheduled == 0,
        },
        "goals": {
            "the_whole_burst_was_published": bool(rss_when_published),
            "scheduler_memory_stopped_growing": bounded["scheduler"],
            "worker_memory_stopped_growing": bounded["worker"],
        },
    }


def _rss_figures(values: list[float], at_publish: dict[str, float], name: str) -> dict:
    return {"peak": max(values), "published": at_publish.get(name), "end": values[-1]}


def _still_scheduled(tenant) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE status = %s").format(
                table(tenant.schema_name, "runs_run")
            ),
            [states.SCHEDULED],
        )
        return cursor.fetchone()[0]


def _rss_mb(pid: int) -> float:
    """The process and its children (a prefork worker's pool)."""
    try:
        process = psutil.Process(pid)
        total = process.memory_info().rss
        for child in process.children(recursive=True):
            total += child.memory_info().rss
        return round(total / 2**20, 1)
    except psutil.Error:
        return 0.0


def _backlog(client) -> int:
    return sum(client.llen(key) for key in client.scan_iter("runs.*"))


def _answers(port: int, token: str, path: str = "jobs?page_size=1") -> float | None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/{path}", headers={"Authorization": f"Bearer {token}"}
    )
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
            if response.status != 200:
                return None
    except OSError:
        return None
    return time.perf_counter() - started
