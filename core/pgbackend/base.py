"""django-tenants' PostgreSQL backend, made safe behind a transaction-pooling PgBouncer.

Behind a pooler in transaction mode a client holds a server connection only for one
transaction; its next transaction (in autocommit: its next statement) may run on another
server connection, which another client used last. Session state does not follow the
client, so django-tenants' `SET search_path` (issued once per schema change with
`TENANT_LIMIT_SET_CALLS`, or before every cursor, each a transaction of its own in
autocommit) and our session timeouts (startup options, which PgBouncer refuses) would
either be lost or, worse, apply to another client: a tenant's query would read the tables
of whichever tenant last set that server connection's search_path.

With `TRANSACTION_POOLING` set in the database's settings, this backend therefore:

- opens every transaction with one statement that sets the tenant's `search_path` and the
  statement, lock and idle-in-transaction timeouts *for that transaction only*
  (`set_config(..., true)`), so nothing leaks to the next client of the server connection;
- sends that statement in the same simple-protocol query as the statement it precedes,
  which PostgreSQL runs as one implicit transaction in autocommit: one round trip, one
  server connection;
- sets the search_path again inside a transaction whose schema changed, or after a
  rollback to a savepoint (which undoes a transaction-local setting made after it);
- sends no startup options and prepares no statements (PgBouncer 1.18 supports neither in
  transaction mode), and opens no server-side cursors.

Without `TRANSACTION_POOLING` it is django-tenants' backend unchanged. The scheduler and
migrations need a session of their own (session advisory locks, ending a frozen leader's
session by its pid) and refuse the setting (`require_session_connection`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.postgresql.base import Cursor as DjangoClientCursor
from django_tenants.postgresql_backend import base as tenants_base
from django_tenants.utils import quote_schema_name
from psycopg.pq import TransactionStatus

_TIMEOUTS = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")

# What a connection's transactions carry: (the search_path, the timeouts in _TIMEOUTS'
# order, "" for one left to the server, role or database default).
State = tuple[str, tuple[str, ...]]


class PoolSafeCursor(DjangoClientCursor):
    """A client-side binding cursor whose every statement runs in a transaction that set
    this client's search_path and timeouts first (see the module's docstring)."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        due = _settings_due(self)
        if due is None:
            return super().execute(query, params, **kwargs)
        prologue, state = due
        # Rendered before anything is sent or recorded: a statement that fails to render
        # leaves the connection's bookkeeping as it was.
        statement = self.mogrify(query, params)
        # One simple-protocol query, "settings; statement": in autocommit PostgreSQL runs
        # the two as one implicit transaction, so they reach the same server connection in
        # one round trip; inside a transaction they run in it. The cursor then stands on
        # the statement's result, as if it had run alone.
        try:
            super().execute(prologue + ";\n" + statement, None, **kwargs)
        except BaseException:
            self.connection.tickwork_applied = None
            raise
        _settings_sent(self.connection, state)
        if not self.nextset():
            # The statement was empty (or only a comment): no result of its own. Run it
            # alone so the cursor shows what it would have (the settings are in place, or
            # an empty statement needs none).
            super().execute(query, params, **kwargs)
        return self

    def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
        with _client_state(self):
            return super().executemany(query, params_seq, **kwargs)

    @contextmanager
    def copy(self, statement: Any, params: Any = None, **kwargs: Any) -> Iterator[Any]:
        with _client_state(self), super().copy(statement, params, **kwargs) as copy:
            yield copy

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        raise ImproperlyConfigured("cursor.stream() is not supported behind a transaction pool")


def _settings_due(cursor: PoolSafeCursor) -> tuple[str, State] | None:
    """The settings statement the cursor's next statement must carry, with the state it
    sets, or None. At the start of every transaction (in autocommit, every statement is
    one) it sets the search_path and the configured timeouts; inside a transaction only
    what changed since (another schema; a timeout changed for a block), so that a `SET
    LOCAL` the transaction made itself is not undone; after a rollback to a savepoint
    (which undoes settings made after it) all of them again."""
    conn = cursor.connection
    state: State | None = getattr(conn, "tickwork_state", None)
    status = conn.info.transaction_status
    if state is None or status == TransactionStatus.INERROR:
        # Not opened by this backend's wrapper, or a failed transaction that only a
        # rollback can follow: the statement goes as it is.
        return None
    applied: State | None = getattr(conn, "tickwork_applied", None)
    if status == TransactionStatus.IDLE or applied is None:
        return _statement(cursor, state, None), state
    if applied == state:
        return None
    return _statement(cursor, state, applied), state


def _settings_sent(conn: Any, state: State) -> None:
    """Record what the connection's open transaction now carries (nothing to record after
    an autocommit statement: its implicit transaction has ended)."""
    open_transaction = conn.info.transaction_status == TransactionStatus.INTRANS
    conn.tickwork_applied = state if open_transaction else None


def _statement(cursor: PoolSafeCursor, state: State, applied: State | None) -> str:
    """`SELECT set_config(..., true), ...` for what differs between `applied` and `state`
    (everything when `applied` is None); timeouts left to the server are not set."""
    key = (state, applied)
    literal = _literals.get(key)
    if literal is None:
        search_path, timeouts = state
        calls: list[str] = []
        values: list[str] = []
        if applied is None or applied[0] != search_path:
            calls.append("set_config('search_path', %s, true)")
            values.append(search_path)
        for index, (name, value) in enumerate(zip(_TIMEOUTS, timeouts, strict=True)):
            if applied is not None and applied[1][index] == value:
                continue
            if value:
                calls.append(f"set_config('{name}', %s, true)")
                values.append(value)
            elif applied is not None:
                # back to no configured value inside the transaction: the session's own
                # (the server's, role's or database's default)
                calls.append(
                    f"set_config('{name}', (SELECT reset_val FROM pg_settings"
                    f" WHERE name = '{name}'), true)"
                )
        if not calls:
            calls, values = ["set_config('search_path', %s, true)"], [search_path]
        literal = DjangoClientCursor.mogrify(cursor, f"SELECT {', '.join(calls)}", values)
        if len(_literals) > 4096:
            _literals.clear()
        _literals[key] = literal
    return literal


# The settings statements, each rendered once.
_literals: dict[tuple, str] = {}


@contextmanager
def _client_state(cursor: PoolSafeCursor) -> Iterator[None]:
    """For executemany and COPY, which cannot carry the settings in their own query."""
    conn = cursor.connection
    in_autocommit = conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
    due = _settings_due(cursor)
    if due is None:
        yield
    elif in_autocommit:
        with conn.transaction():
            DjangoClientCursor.execute(cursor, due[0])
            yield
    else:
        DjangoClientCursor.execute(cursor, due[0])
        _settings_sent(conn, due[1])
        yield


def _milliseconds(options: str, name: str) -> str:
    """The value of `-c name=N` in a libpq options string, or "" (not configured: the
    server's, role's or database's default holds)."""
    for word in options.split():
        if word.startswith(f"{name}="):
            return word.split("=", 1)[1]
    return ""


class DatabaseWrapper(tenants_base.DatabaseWrapper):
    # The timeouts from the settings (as the startup options would have set them), and a
    # statement timeout set for a block (statement_timeout_for_block), if any.
    _configured_timeouts: list[str] = ["", "", ""]
    _statement_timeout: str | None = None

    @property
    def transaction_pooling(self) -> bool:
        return bool(self.settings_dict.get("TRANSACTION_POOLING"))

    def get_connection_params(self) -> dict:
        params = super().get_connection_params()
        if self.transaction_pooling:
            options = params.pop("options", "") or ""
            self._configured_timeouts = [_milliseconds(options, name) for name in _TIMEOUTS]
            params["cursor_factory"] = PoolSafeCursor
            params["prepare_threshold"] = None
        return params

    def get_new_connection(self, conn_params: dict) -> Any:
        connection = super().get_new_connection(conn_params)
        if self.transaction_pooling:
            connection.tickwork_state = None
            connection.tickwork_applied = None
        return connection

    def create_cursor(self, name: str | None = None) -> Any:
        if name and self.transaction_pooling:
            raise ImproperlyConfigured(
                "server-side cursors do not work behind a transaction pool"
                " (DISABLE_SERVER_SIDE_CURSORS is set with TRANSACTION_POOLING)"
            )
        return super().create_cursor(name)

    def _handle_search_path(self, cursor: Any = None) -> None:
        if not self.transaction_pooling:
            super()._handle_search_path(cursor)
            return
        if not self.schema_name:
            raise ImproperlyConfigured("Database schema not set (set_schema or set_tenant).")
        # Not django-tenants' session-level SET: the cursor sets the search_path inside
        # each transaction instead.
        search_path = ",".join(quote_schema_name(s) for s in self._get_cursor_search_paths())
        self.connection.tickwork_state = (search_path, self._timeouts())

    @contextmanager
    def statement_timeout_for_block(self, seconds: float) -> Iterator[None]:
        """Statements run inside the block end after `seconds` (the session-level `SET
        statement_timeout` a direct connection would use does not hold behind a transaction
        pool: the next transaction would set its own)."""
        previous = self._statement_timeout
        self._statement_timeout = f"{seconds * 1000:.0f}"
        self._refresh_state()
        try:
            yield
        finally:
            self._statement_timeout = previous
            self._refresh_state()

    def _timeouts(self) -> tuple[str, ...]:
        configured = self._configured_timeouts
        return (self._statement_timeout or configured[0], *configured[1:])

    def _refresh_state(self) -> None:
        state = getattr(self.connection, "tickwork_state", None)
        if state is not None:
            self.connection.tickwork_state = (state[0], self._timeouts())

    def _commit(self) -> None:
        self._forget_applied()
        super()._commit()

    def _rollback(self) -> None:
        self._forget_applied()
        super()._rollback()

    def _set_autocommit(self, autocommit: bool) -> None:
        self._forget_applied()
        super()._set_autocommit(autocommit)

    def _forget_applied(self) -> None:
        """The transaction ends (or its mode changes): whatever opens the next one, a
        cursor of ours or psycopg's own, must find nothing recorded as already set."""
        if self.transaction_pooling and self.connection is not None:
            self.connection.tickwork_applied = None

    def savepoint_rollback(self, sid: str) -> None:
        super().savepoint_rollback(sid)
        if self.transaction_pooling and self.connection is not None:
            # ROLLBACK TO SAVEPOINT undoes a set_config made after the savepoint.
            self.connection.tickwork_applied = None


def require_session_connection(what: str) -> None:
    """Refuse, with one line (a CommandError), to run `what` on a transaction-pooled
    connection."""
    from django.core.management.base import CommandError
    from django.db import connection

    if connection.transaction_pooling:
        raise CommandError(
            f"{what} needs a PostgreSQL session of its own: unset DB_TRANSACTION_POOLING"
            " and point DATABASE_URL at PostgreSQL (or a session-mode pool) for it"
        )
