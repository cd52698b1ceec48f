"""REST API latency as a client sees it: gunicorn with 2 sync workers and DEBUG off, one
client sending one request at a time over loopback (a new connection each, as gunicorn's
sync workers close them). Measures `POST /jobs` and `GET /jobs` (a page of 50, first and
deep), then registers 10,000 jobs through `POST /jobs/bulk` (1,000 per request), and
counts the queries each request makes (in-process, Django's test client).

The tenant `bench-api` is provisioned afresh each run (bench- tenants are dropped after the
CI run, tests/bench) and dropped at the end unless `keep`."""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from core.keys import index_key
from core.redis import get_redis
from tenants.models import Tenant
from tenants.services import tenant_provision

from .processes import ROOT, stop, wait_until
from .world import percentile

SLUG = "bench-api"
TASK = {"type": "task", "task": "builtin.noop"}


def _job(name: str) -> dict[str, Any]:
    return {"name": name, "schedule": {"cron": "*/5 * * * *"}, "target": TASK}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _fresh_tenant() -> tuple[Tenant, str]:
    old = Tenant.objects.filter(slug=SLUG).first()
    if old is not None:
        old.delete(force_drop=True)
    provisioned = tenant_provision(slug=SLUG, admin_password="bench")
    return provisioned.tenant, provisioned.token.plain


def start_gunicorn(port: int, log: Path, workers: int = 2) -> subprocess.Popen:
    env = {
        **os.environ,
        "DEBUG": "0",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or "bench-" + "x" * 50,
        # with DEBUG off secrets at rest need a real key (a throwaway one will do here)
        "TICKWORK_SECRET_KEYS": os.environ.get("TICKWORK_SECRET_KEYS")
        or Fernet.generate_key().decode(),
        "SESSION_COOKIE_SECURE": "0",
    }
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "scheduler_site.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--no-control-socket",  # gunicorn 27's default socket is one per user, not per server
        "--log-level",
        "warning",
    ]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


class Caller:
    """One client: a request at a time, timed from connect to the last byte read."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: Any = None) -> tuple[float, int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request(method, f"/api/v1/{path}", body=data, headers=self.headers)
            response = conn.getresponse()
            content = response.read()
        finally:
            conn.close()
        return (time.perf_counter() - started) * 1000, response.status, content

    def series(self, method: str, paths_and_bodies: list[tuple[str, Any]], status: int) -> dict:
        times = []
        for path, body in paths_and_bodies:
            ms, got, content = self.call(method, path, body)
            assert got == status, (method, path, got, content[:500])
            times.append(ms)
        return _summary(times)


def _summary(times: list[float]) -> dict:
    return {
        "requests": len(times),
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": round(percentile(times, 99), 2),
        "mean_ms": round(statistics.fmean(times), 2),
    }


def _ready(caller: Caller) -> bool:
    try:
        return caller.call("GET", "jobs?page_size=1")[1] == 200
    except OSError:
        return False


def _queries_per_request(token: str, with_bulk: bool) -> dict[str, int]:
    """What one request of each kind asks PostgreSQL, in this process (DEBUG off)."""
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="localhost")
    body = json.dumps(_job("counted"))
    requests = {
        "POST /jobs": lambda: client.post("/api/v1/jobs", body, content_type="application/json"),
        "GET /jobs (50)": lambda: client.get("/api/v1/jobs?page_size=50"),
    }
    bulk = {
        "POST /jobs/bulk (100)": lambda: client.post(
            "/api/v1/jobs/bulk",
            json.dumps({"action": "create", "jobs": [_job(f"q-{n}") for n in range(100)]}),
            content_type="application/json",
        ),
    }
    if with_bulk:
        requests.update(bulk)
    counts = {}
    for name, send in requests.items():
        send()  # warm: the token's last_used_at write, prepared statements
        with CaptureQueriesContext(connection) as queries:
            response = send()
        assert response.status_code in (200, 201), (name, response.content[:500])
        counts[name] = len(queries)
    connection.set_schema_to_public()
    return counts


def _indexed(tenant: Tenant) -> int:
    client = get_redis()
    prefix = f"{tenant.id}:".encode()
    return sum(1 for member, _ in client.zscan_iter(index_key()) if member.startswith(prefix))


def run(
    requests: int = 500, bulk_jobs: int = 10_000, batch: int = 1000, keep: bool = False
) -> dict:
    tenant, token = _fresh_tenant()
    port, log = _free_port(), Path(ROOT / ".data" / "bench-api-gunicorn.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    server = start_gunicorn(port, log)
    caller = Caller(port, token)
    try:
        if not wait_until(lambda: _ready(caller), timeout=60, interval=0.2):
            raise RuntimeError(f"gunicorn did not answer; see {log}")
        warm = [("jobs", _job(f"warm-{n}")) for n in range(40)]
        caller.series("POST", warm, 201)
        caller.series("GET", [("jobs?page_size=50", None)] * 40, 200)
        post = caller.series("POST", [("jobs", _job(f"single-{n}")) for n in range(requests)], 201)
        bulk = _bulk_create(caller, bulk_jobs, batch) if bulk_jobs else None
        first = caller.series("GET", [("jobs?page_size=50", None)] * requests, 200)
        deep_cursor = _deep_cursor(tenant)
        actions = _bulk_actions(caller, tenant, batch) if bulk_jobs else None
        deep = caller.series(
            "GET", [(f"jobs?page_size=50&cursor={deep_cursor}", None)] * requests, 200
        )
    finally:
        stop(server)
    figures = {
        "server": "gunicorn, 2 sync workers, DEBUG off, one client",
        "post_jobs": post,
        "get_jobs_page_50": first,
        "get_jobs_page_50_deep": deep,
        "bulk_create": bulk,
        "bulk_actions_ms": actions,
        "jobs_in_tenant": requests + len(warm) + bulk_jobs,
        "indexed": _indexed(tenant),
        "queries_per_request": _queries_per_request(token, with_bulk=bool(bulk_jobs)),
    }
    if not keep:
        tenant.delete(force_drop=True)
    _print(figures)
    return figures


def _bulk_create(caller: Caller, total: int, batch: int) -> dict:
    times, started = [], time.perf_counter()
    for start in range(0, total, batch):
        jobs = [_job(f"bulk-{n}") for n in range(start, min(start + batch, total))]
        ms, status, content = caller.call("POST", "jobs/bulk", {"action": "create", "jobs": jobs})
        assert status == 201, (status, content[:1000])
        times.append(ms)
    seconds = time.perf_counter() - started
    return {
        "jobs": total,
        "per_request": batch,
        "seconds": round(seconds, 2),
        "jobs_per_second": round(total / seconds),
        "request_p50_ms": round(statistics.median(times), 1),
        "request_max_ms": round(max(times), 1),
    }


def _bulk_actions(caller: Caller, tenant: Tenant, batch: int) -> dict[str, float]:
    """Pause, then resume, `batch` of the bulk-created jobs in one request each."""
    from django_tenants.utils import schema_context

    from jobs.models import Job

    with schema_context(tenant.schema_name):
        ids = list(
            Job.objects.filter(name__startswith="bulk-").order_by("id").values_list("id", flat=True)
        )[:batch]
    out = {}
    for action in ("pause", "resume"):
        ms, status, content = caller.call("POST", "jobs/bulk", {"action": action, "ids": ids})
        assert status == 200, (action, status, content[:500])
        out[f"{action}_{len(ids)}"] = round(ms, 1)
    return out


def _deep_cursor(tenant: Tenant) -> str:
    """A cursor in the middle of the tenant's jobs, as `next` would carry it (keyset: the
    page costs what page 1 costs)."""
    from django_tenants.utils import schema_context

    from jobs.models import Job
    from scheduler_site.api.pagination import encode_cursor

    with schema_context(tenant.schema_name):
        ids = list(Job.objects.order_by("id").values_list("id", flat=True))
    return encode_cursor([ids[len(ids) // 2]])


def _print(f: dict) -> None:
    print(f"API latency ({f['server']}; {f['jobs_in_tenant']:,} jobs in the tenant at the end)")
    for name in ("post_jobs", "get_jobs_page_50", "get_jobs_page_50_deep"):
        r = f[name]
        print(
            f"  {name:24} p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
            f"({r['requests']} requests)"
        )
    b = f["bulk_create"]
    if b is None:
        b = {"jobs": 0, "seconds": 0, "jobs_per_second": 0, "per_request": 0, "request_p50_ms": 0}
    print(
        f"  bulk create: {b['jobs']:,} jobs in {b['seconds']} s ({b['jobs_per_second']:,} jobs/s, "
        f"{b['per_request']} per request, p50 {b['request_p50_ms']} ms per request); "
        f"{f['indexed']:,} jobs in the time index"
    )
    if f["bulk_actions_ms"]:
        print(
            "  bulk actions: "
            + ", ".join(
                f"{k.replace('_', ' ')} jobs {v} ms" for k, v in f["bulk_actions_ms"].items()
            )
        )
    print(
        "  queries per request: "
        + ", ".join(f"{k} {v}" for k, v in f["queries_per_request"].items())
    )
