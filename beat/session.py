"""The leader's PostgreSQL session: tighter bounds than the fleet's defaults.

Set on every connection the leader uses (after a reconnect too): a lock it waits for, one
statement, and above all `idle_in_transaction_session_timeout`, so that a leader frozen
inside a fenced transaction (SIGSTOP, a VM pause) has that transaction ended by PostgreSQL
itself and cannot hold up the next leader's epoch bump.
"""

from __future__ import annotations

import weakref

from django.conf import settings
from django.db import connection

_configured: weakref.WeakSet = weakref.WeakSet()  # raw connections already set up


def bounded_leader_session(holder: str | None = None) -> None:
    """Apply the leader's timeouts to the current connection, once per connection; with
    `holder`, name the session after it (`pg_stat_activity.application_name`), so that an
    operator, and the chaos suite's audit, can tell which scheduler wrote what."""
    connection.ensure_connection()
    raw = connection.connection
    if raw in _configured:
        return
    values = {
        "lock_timeout": settings.SCHEDULER_DB_LOCK_TIMEOUT_SECONDS,
        "statement_timeout": settings.SCHEDULER_DB_STATEMENT_TIMEOUT_SECONDS,
        "idle_in_transaction_session_timeout": (
            settings.SCHEDULER_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS
        ),
    }
    with connection.cursor() as cursor:
        for name, seconds in values.items():
            cursor.execute("SELECT set_config(%s, %s, false)", [name, f"{seconds * 1000:.0f}"])
        if holder:
            cursor.execute(
                "SELECT set_config('application_name', %s, false)",
                [f"tickwork-scheduler {holder}"[:63]],
            )
    # The sweeps' chunk statements (one per chunk of tenants per sweep) stay prepared.
    raw.prepared_max = max(raw.prepared_max or 0, 500)
    _configured.add(raw)
