"""The messages the leader pushes are the ones Celery itself would publish."""

from __future__ import annotations

import base64
import json
import uuid

from beat.messages import build_message, queue_for
from scheduler_site.celery import app


def _celery_published(redis_client, queue: str, task_id: str, args: list) -> dict:
    with app.connection_for_write() as conn:
        app.send_task(
            "runs.execute_run",
            args=args,
            task_id=task_id,
            queue=queue,
            routing_key=queue,
            exchange="",
            connection=conn,
        )
    return json.loads(redis_client.rpop(queue))


def test_built_message_matches_what_celery_publishes(redis_client):
    task_id = str(uuid.uuid4())
    args = ["t_alpha", task_id, 1]
    theirs = _celery_published(redis_client, "runs.normal.0", task_id, args)
    ours = json.loads(
        build_message(
            task_name="runs.execute_run",
            task_id=task_id,
            args=args,
            queue="runs.normal.0",
            origin="x",
        )
    )
    assert set(ours) == set(theirs)
    assert set(ours["headers"]) == set(theirs["headers"])
    assert set(ours["properties"]) == set(theirs["properties"])
    for key in ("task", "id", "root_id", "retries", "eta", "expires", "timelimit"):
        assert ours["headers"][key] == theirs["headers"][key], key
    assert ours["properties"]["delivery_info"] == theirs["properties"]["delivery_info"]
    for key in ("body_encoding", "correlation_id", "delivery_mode", "priority"):
        assert ours["properties"][key] == theirs["properties"][key], key
    assert (ours["content-type"], ours["content-encoding"]) == (
        theirs["content-type"],
        theirs["content-encoding"],
    )
    assert json.loads(base64.b64decode(ours["body"])) == json.loads(
        base64.b64decode(theirs["body"])
    )


def test_queue_is_stable_per_job_and_covers_every_shard():
    assert queue_for("high", "1:42", 4) == queue_for("high", "1:42", 4)
    shards = {queue_for("low", f"1:{job}", 4) for job in range(200)}
    assert shards == {f"runs.low.{n}" for n in range(4)}
    assert queue_for("bogus", "1:1", 1) == "runs.normal.0"
