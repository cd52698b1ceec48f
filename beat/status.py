"""What `scheduler_status` reports: leader, epoch, index size, due-but-unfired work."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from psycopg import sql

from core import index
from core.keys import index_built_key, index_key, leader_info_key
from core.sql import table
from runs.status_sql import STATUS

from .lease import current_epoch
from .tenant_directory import TenantDirectory


def _unfired_runs(now: datetime) -> tuple[int, datetime | None]:
    count, oldest = 0, None
    for _tenant_id, schema in TenantDirectory().all():
        query = sql.SQL(
            "SELECT count(*), min(due_at) FROM {} WHERE status IN {waiting} AND due_at <= %s"
        ).format(table(schema, "runs_run"), **STATUS)
        with connection.cursor() as cursor:
            cursor.execute(query, [now])
            n, first = cursor.fetchone()
        count += n
        if first is not None and (oldest is None or first < oldest):
            oldest = first
    return count, oldest


def scheduler_status(client, now: datetime) -> dict:
    raw_leader = client.get(leader_info_key())
    lease = current_epoch()
    unfired, oldest_run = _unfired_runs(now)
    overdue_jobs = client.zcount(index_key(), "-inf", now.timestamp())
    head = index.earliest(client, index_key())
    lags = [now.timestamp() - oldest_run.timestamp()] if oldest_run else []
    if overdue_jobs and head is not None:
        lags.append(now.timestamp() - head)
    return {
        "leader": raw_leader.decode() if raw_leader else None,
        "epoch": lease[0] if lease else None,
        "last_holder": lease[1] if lease else None,
        "index_built": bool(client.exists(index_built_key())),
        "index_size": client.zcard(index_key()),
        "runs_index_size": client.zcard(index.runs_index_key()),
        "due_unfired_runs": unfired,
        "due_unmaterialised_jobs": overdue_jobs,
        "oldest_unfired_lag_seconds": round(max(lags), 3) if lags else None,
    }
