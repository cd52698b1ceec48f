"""Celery task messages built ahead of time and pushed to Redis in pipelined batches.

`apply_async` costs ~0.5 ms a message (2,200/s from one process); a due second can hold
10,000 runs. So the leader builds each message when it materialises the run, in the exact
format kombu's Redis transport writes (protocol 2, base64 body, anonymous exchange, routed
by queue name), and at the run's instant pushes a whole batch with one pipeline. Workers
consume these messages unchanged; `tests/integration/test_messages.py` proves it against
messages produced by Celery itself and a real worker.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
import zlib

PRIORITIES = ("high", "normal", "low")


def queue_for(priority: str, shard_key: str, shard_count: int) -> str:
    """`runs.<priority>.<shard>`; the shard is stable per job so one job's runs stay ordered."""
    shard = zlib.crc32(shard_key.encode()) % shard_count
    return f"runs.{priority if priority in PRIORITIES else 'normal'}.{shard}"


def time_limits(timeout_seconds: int | None) -> tuple[int | None, int | None]:
    """Celery's (hard, soft) limits for a run: the soft one raises inside the task at the
    job's timeout (plus a moment, so an HTTP call's own deadline answers first); the hard
    one kills a task that ignores it (prefork pool only)."""
    if not timeout_seconds:
        return (None, None)
    return (timeout_seconds + 30, timeout_seconds + 2)


def build_message(
    *,
    task_name: str,
    task_id: str,
    args: list,
    queue: str,
    origin: str,
    time_limits: tuple[int | None, int | None] = (None, None),
    delivery_tag: str | None = None,
) -> bytes:
    """The reference form of a message, any args (`MessageTemplate` is the fast path)."""
    body = json.dumps(
        [args, {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
    ).encode()
    headers = {
        "lang": "py",
        "task": task_name,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": list(time_limits),
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": repr(tuple(args)),
        "kwargsrepr": "{}",
        "origin": origin,
        "ignore_result": True,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    message = {
        "body": base64.b64encode(body).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            "correlation_id": task_id,
            "reply_to": "",
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": delivery_tag or str(uuid.uuid4()),
        },
    }
    return json.dumps(message, separators=(",", ":")).encode()


class MessageTemplate:
    """`build_message` for the leader's one task shape, args `[schema, run_id, attempt]`, by
    joining bytes around the per-run values instead of building and serialising two dicts
    per run (~40 µs a message down to a few). The same bytes as `build_message`: its
    constant parts are escaped here once (schema names and the origin per value, cached),
    and the per-run values need no escaping: a run id is a UUID's text, the queue is
    `runs.<priority>.<shard>`, the attempt and the limits are integers
    (`tests/unit/test_message_template.py` compares the two byte for byte)."""

    _BODY_TAIL = b'], {}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'

    def __init__(self, task_name: str, origin: str) -> None:
        dump = json.dumps
        self._head = b'{"body":"'
        self._after_body = (
            '","content-encoding":"utf-8","content-type":"application/json","headers":{"lang":"py",'
            f'"task":{dump(task_name)},"id":"'
        ).encode()
        self._after_id = (
            b'","shadow":null,"eta":null,"expires":null,"group":null,"group_index":null,'
            b'"retries":0,"timelimit":'
        )
        self._after_limits = b',"root_id":"'
        self._after_root = b'","parent_id":null,"argsrepr":"'
        self._after_argsrepr = (
            f'","kwargsrepr":"{{}}","origin":{dump(origin)},"ignore_result":true,'
            '"replaced_task_nesting":0,"stamped_headers":null,"stamps":{}},"properties":'
            '{"correlation_id":"'
        ).encode()
        self._after_correlation = (
            b'","reply_to":"","delivery_mode":2,"delivery_info":{"exchange":"","routing_key":"'
        )
        self._after_queue = b'"},"priority":0,"body_encoding":"base64","delivery_tag":"'
        self._tail = b'"}}'
        self._schemas: dict[str, tuple[bytes, bytes]] = {}
        self._limits: dict[tuple[int | None, int | None], bytes] = {}

    def _schema_parts(self, schema: str) -> tuple[bytes, bytes]:
        parts = self._schemas.get(schema)
        if parts is None:
            body_head = b"[[" + json.dumps(schema).encode() + b', "'
            argsrepr_head = json.dumps("(" + repr(schema) + ", '")[1:-1].encode()
            parts = self._schemas[schema] = (body_head, argsrepr_head)
        return parts

    def _limits_part(self, limits: tuple[int | None, int | None]) -> bytes:
        part = self._limits.get(limits)
        if part is None:
            part = self._limits[limits] = json.dumps(list(limits), separators=(",", ":")).encode()
        return part

    def render(
        self,
        *,
        run_id: str,
        schema: str,
        attempt: int,
        queue: str,
        time_limits: tuple[int | None, int | None] = (None, None),
        delivery_tag: str | None = None,
    ) -> bytes:
        body_head, argsrepr_head = self._schema_parts(schema)
        rid = run_id.encode()
        attempt_text = str(attempt).encode()
        body = base64.b64encode(body_head + rid + b'", ' + attempt_text + self._BODY_TAIL)
        return b"".join(
            (
                self._head,
                body,
                self._after_body,
                rid,
                self._after_id,
                self._limits_part(time_limits),
                self._after_limits,
                rid,
                self._after_root,
                argsrepr_head,
                rid,
                b"', ",
                attempt_text,
                b")",
                self._after_argsrepr,
                rid,
                self._after_correlation,
                queue.encode(),
                self._after_queue,
                (delivery_tag or new_delivery_tag()).encode(),
                self._tail,
            )
        )


def new_delivery_tag() -> str:
    """A random (version 4) UUID's text, as kombu writes, from one `os.urandom` call:
    `str(uuid.uuid4())` costs several times more, and the leader writes one per run."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}


def by_queue(messages: list[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    """(queue, message) pairs grouped by queue, each queue's in their order."""
    grouped: dict[str, list[bytes]] = {}
    for queue, message in messages:
        grouped.setdefault(queue, []).append(message)
    return grouped


def push_messages(pipeline, messages: list[tuple[str, bytes]], chunk: int) -> None:
    """Queue LPUSHes on a Redis pipeline, per destination queue and at most `chunk`
    messages each (the caller executes)."""
    for queue, batch in by_queue(messages).items():
        for start in range(0, len(batch), chunk):
            pipeline.lpush(queue, *batch[start : start + chunk])
