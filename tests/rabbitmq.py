"""The tests' RabbitMQ: reachable or skipped with the reason, in a vhost of their own."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from urllib.parse import urlsplit

BASE_URL = os.environ.get("TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")


def _reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port or 5672), timeout=1):
            return True
    except OSError:
        return False


def _ctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


def rabbitmq_test_url() -> tuple[str | None, str]:
    if not _reachable(BASE_URL):
        return None, f"RabbitMQ is not reachable at {urlsplit(BASE_URL).netloc} (TEST_RABBITMQ_URL)"
    parts = urlsplit(BASE_URL)
    if shutil.which("rabbitmqctl") is None:
        return BASE_URL, ""  # a remote broker: its own vhost, queues emptied around each test
    vhost = f"tickwork_test_{os.environ.get('TEST_REDIS_DB', '15')}"
    try:
        _ctl("add_vhost", vhost)
    except subprocess.CalledProcessError as error:
        if b"already exists" not in (error.stderr + error.stdout):
            return None, f"rabbitmqctl add_vhost {vhost} failed: {error.stderr.decode().strip()}"
    _ctl("set_permissions", "-p", vhost, parts.username or "guest", ".*", ".*", ".*")
    return f"{parts.scheme}://{parts.netloc}/{vhost}", ""


def reset_queues(url: str, shard_count: int = 4) -> None:
    """Delete the run queues (and the benchmark's) so each test starts from none."""
    from core.broker import amqp_connection

    conn = amqp_connection(url, timeout=5)
    try:
        channel = conn.channel()
        for name in [f"runs.{s}" for s in range(shard_count)] + ["bench.plain"]:
            channel.queue_delete(name)
    finally:
        conn.collect()
    import core.broker

    if core.broker._amqp_depths is not None:
        core.broker._amqp_depths.close()
        core.broker._amqp_depths = None
