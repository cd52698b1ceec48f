"""Tell the leader about runs that need it: retries waiting in the runs index, and jobs
whose held (`queue` policy) runs may now go."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

import redis
from django.db import connection, transaction

from core import index
from core.keys import admission_waiting_key, ended_key, tenant_partition, wake_key
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
            index.wake(client, "run", partitions=[tenant_partition(tenant_id)])
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
        index.wake_tenant(pipe, tenant_id, "run")
        pipe.execute()

    transaction.on_commit(lambda: best_effort(push))


# One round trip per ended attempt: record it for the leader's in-flight count (the list
# capped, since with no leader reading it a recount replaces what it would have said),
# wake the leader when runs wait for admission (unless wake-ups already wait: a busy
# leader drains them only when it sleeps), and release a `queue` job's held runs.
_ENDED_SCRIPT = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
local woken = 0
if ARGV[3] ~= '' then
    redis.call('RPUSH', KEYS[3], ARGV[3])
    woken = 1
end
if redis.call('EXISTS', KEYS[2]) == 1 and redis.call('LLEN', KEYS[3]) < 16 then
    redis.call('RPUSH', KEYS[3], 'admit')
    woken = 1
end
return woken
"""
ENDED_LIST_CAP = 100_000


def notify_run_ended(
    schema: str, job_id: int, concurrency_policy: str, run_id: Any, attempt: int
) -> None:
    """An attempt stopped being in flight (finished, retrying, dead, cancelled): its
    tenant's quota slot is free again, and a `queue`-policy job's held runs may go. Best
    effort: if Redis does not answer, the leader's recount frees the slot and its relay
    admits held runs again within their intervals."""
    tenant_id = tenant_id_for(schema)
    release = f"release:{tenant_id}:{job_id}" if concurrency_policy == "queue" else ""
    partition = tenant_partition(tenant_id)  # the three keys share its hash tag
    with contextlib.suppress(redis.RedisError):
        get_redis().eval(
            _ENDED_SCRIPT,
            3,
            ended_key(partition),
            admission_waiting_key(partition),
            wake_key(partition),
            f"{tenant_id}:{run_id}:{attempt}",
            ENDED_LIST_CAP,
            release,
        )


def notify_finished(claimed) -> None:
    notify_run_ended(
        claimed.schema,
        claimed.job_id,
        claimed.concurrency_policy,
        claimed.run_id,
        claimed.attempt,
    )
