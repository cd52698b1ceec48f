"""Tell the leader about runs that need it: retries waiting in the runs index, and jobs
whose held (`queue` policy) runs may now go."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

import redis
from django.db import connection, transaction

from core import index
from core.keys import wake_key
from core.redis import get_redis
from jobs.indexing import best_effort

_TENANT_IDS: dict[str, int] = {}


def tenant_id_for(schema: str) -> int:
    if schema not in _TENANT_IDS:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM public.tenants_tenant WHERE schema_name = %s", [schema])
            _TENANT_IDS[schema] = cursor.fetchone()[0]
    return _TENANT_IDS[schema]


def enqueue_retry_on_commit(schema: str, run_id: Any, due_at: datetime) -> None:
    tenant_id = tenant_id_for(schema)

    def push() -> None:
        try:
            client = get_redis()
            pipe = client.pipeline(transaction=False)
            index.put_runs(pipe, [(tenant_id, run_id, due_at)])
            pipe.execute()
            index.wake(client, "run")
        except redis.RedisError:
            pass  # the relay finds the retry in PostgreSQL once it is overdue

    transaction.on_commit(push)


def enqueue_runs_on_commit(tenant_id: int, runs: list) -> None:
    """Runs admitted on their own (manual, backfill, replay, dependency) go to the runs
    index once the transaction that created them commits; if Redis does not answer, the
    leader's relay finds them in PostgreSQL."""
    entries = [(tenant_id, run.id, run.due_at) for run in runs]

    def push() -> None:
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        index.put_runs(pipe, entries)
        pipe.rpush(wake_key(), "run")
        pipe.execute()

    transaction.on_commit(lambda: best_effort(push))


def notify_run_ended(schema: str, job_id: int, concurrency_policy: str) -> None:
    """An active run of a `queue`-policy job ended (finished, dead, cancelled): the leader
    admits its held runs now. Best effort: if Redis does not answer, the leader's relay
    admits held runs again within its sweep interval."""
    if concurrency_policy == "queue":
        tenant_id = tenant_id_for(schema)
        with contextlib.suppress(redis.RedisError):
            index.wake(get_redis(), f"release:{tenant_id}:{job_id}")


def notify_finished(claimed) -> None:
    notify_run_ended(claimed.schema, claimed.job_id, claimed.concurrency_policy)
