"""The leader's publish path alone: 10,000 pre-built run messages pushed the way `fire`
pushes them, to RabbitMQ (`beat/amqp_writes.py`: lease checked per chunk, one socket write
a chunk, confirms awaited) and to Redis (`beat/fenced.py`: `WATCH` on the lock key and the
`LPUSH`es in `MULTI`/`EXEC`), side by side, and to Redis through the fenced script every
push used before ADR 0029 (`redis_script`). Needs RabbitMQ at `BENCH_AMQP_URL`; no worker,
no database."""

from __future__ import annotations

import statistics
import time
import uuid

from beat.amqp_writes import AmqpWrites
from beat.fenced import FencedRedis
from beat.messages import build_message
from core.broker import amqp_connection, amqp_queue_names, redis_queue_names
from core.redis import get_redis

from .throughput import AMQP_URL, _amqp_setup

LOCK = "lock:bench-publish"


class _ScriptPushes(FencedRedis):
    """Every push through the fenced Lua script (the fallback since ADR 0029)."""

    def push_messages(self, messages: list[tuple[str, bytes]]) -> None:
        self._push_by_script(messages)


def run(count: int = 10_000, repeats: int = 3) -> dict:
    client = get_redis()
    _amqp_setup(AMQP_URL)
    client.set(LOCK, "bench")
    queues = [f"runs.normal.{i % 4}" for i in range(count)]
    messages = [
        (
            q,
            build_message(
                task_name="runs.execute_run",
                task_id=str(uuid.uuid4()),
                args=["t_bench", str(uuid.uuid4()), 1],
                queue=q,
                origin="bench",
            ),
        )
        for q in queues
    ]
    result = {"messages": count, "repeats": repeats}
    writers = {
        "rabbitmq": AmqpWrites(client, LOCK, "bench", url=AMQP_URL),
        "redis": FencedRedis(client, LOCK, "bench"),
        "redis_script": _ScriptPushes(client, LOCK, "bench"),
    }
    try:
        for name, writes in writers.items():
            writes.push_messages(messages[:500])  # connected, scripts loaded
            seconds = []
            for _ in range(repeats):
                started = time.perf_counter()
                writes.push_messages(messages)
                seconds.append(time.perf_counter() - started)
            result[f"{name}_per_s"] = count / statistics.median(seconds)
    finally:
        client.delete(LOCK, *redis_queue_names(4))
        conn = amqp_connection(AMQP_URL)
        channel = conn.channel()
        for name in amqp_queue_names(4):
            channel.queue_delete(name)
        conn.collect()
    print(
        f"leader publish, {count:,} messages, median of {repeats}: RabbitMQ "
        f"{result['rabbitmq_per_s']:,.0f}/s (confirmed), Redis {result['redis_per_s']:,.0f}/s"
        f" (through the fenced script: {result['redis_script_per_s']:,.0f}/s)",
        flush=True,
    )
    return result
