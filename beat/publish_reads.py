"""The early publication's reads (`beat/fire.py` `publish_first`), sent ahead.

A read is of at most `fire_chunk` runs: one tenant's, or several small tenants' in one
statement (`store.publishable_read`). Read one after the other, PostgreSQL waited while the
leader turned a read's rows into messages, and the leader waited while PostgreSQL did the
next read. They now go through a psycopg pipeline, `READS_AHEAD` ahead of the one being
used, so that the two overlap (docs/benchmarks.md, "Fire lag: reads sent ahead").

Each read stands in a savepoint of its own, so a failing statement (a tenant's tables
gone, a lock held past the fire's lock timeout) does not end the fence's transaction.
When one fails, the server skipped everything sent after it: the pipeline is left, the
savepoint rolled back, that read's tenants read again one by one, each isolated, and the
pipeline started again from the next read. A read that works ends no tenant's back-off
(it says nothing of the write after it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from django.db import DatabaseError, connection, transaction

from . import store
from .faults import isolated, must_step_down
from .pending import Pending

if TYPE_CHECKING:
    from .engine import Engine

Read = tuple[tuple[int, str], list[Pending]]  # (tenant id, schema), its runs to read
Found = list[dict[int, store.PublishableJob] | None]  # per read; None: not read, or failed

READS_AHEAD = 2  # reads sent and not yet used, at most, the one being used included
_SAVEPOINT = "tw_publish_read"


def read_batches(reads: list[Read], size: int) -> list[list[Read]]:
    """Consecutive reads of at most `size` runs in all: small tenants' reads go in one
    statement."""
    out: list[list[Read]] = []
    runs = 0
    for read in reads:
        if out and runs + len(read[1]) <= size:
            out[-1].append(read)
            runs += len(read[1])
        else:
            out.append([read])
            runs = len(read[1])
    return out


def read_ahead(
    engine: Engine, cursor, batches: list[list[Read]], skip: Callable[[int], bool]
) -> Iterator[tuple[list[Read], Found]]:
    """Each batch, in order, as it was read (without the tenants `skip` ruled out when it
    was sent), with each of its reads' result as `read_publishable` gives it. Use it in
    `contextlib.closing`: the pipeline must end when the caller's loop does, before the
    transaction's commit or rollback."""
    position = 0
    while position < len(batches):
        sent: deque[_Sent] = deque()  # in order: the first is the next to be used
        following = position
        try:
            with connection.connection.pipeline():
                while position < len(batches):
                    while following < len(batches) and len(sent) < READS_AHEAD:
                        batch = [r for r in batches[following] if not skip(r[0][0])]
                        # In the queue before it is sent: an earlier read's error may
                        # surface while this one is sent, and the first one left in the
                        # queue is then the one that failed.
                        sent.append(_Sent(batch, _allowed(engine, batch)))
                        sent[-1].reading = _send(sent[-1].allowed)
                        following += 1
                    found = sent[0].fetch()
                    batch = sent.popleft().batch
                    position += 1
                    yield batch, found
        except DatabaseError as exc:
            if must_step_down(exc):
                raise
            for unused in sent:
                unused.close()
            with connection.cursor() as rollback:
                rollback.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
                rollback.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
            position += 1
            yield sent[0].batch, _read_alone(engine, cursor, sent[0], exc)


class _Sent:
    """A batch whose read was sent: its reads, those of tenants not backing off when it
    was sent (what the statement reads), and the cursor that holds its rows."""

    def __init__(self, batch: list[Read], allowed: list[Read]) -> None:
        self.batch = batch
        self.allowed = allowed
        self.reading = None

    def fetch(self) -> Found:
        if self.reading is None:
            return [None] * len(self.batch)
        with self.reading:
            rows = self.reading.fetchall()
        found = store.publishable_found(rows, self.allowed)
        by_read = {id(r): jobs for r, jobs in zip(self.allowed, found, strict=True)}
        return [by_read.get(id(r)) for r in self.batch]

    def close(self) -> None:
        if self.reading is not None:
            self.reading.close()


def _send(allowed: list[Read]):
    """Send the read of these tenants' runs in its savepoint; returns its cursor (None:
    nothing to read)."""
    if not allowed:
        return None
    wanted = [(schema, [e.run_id for e in part]) for (_t, schema), part in allowed]
    with connection.cursor() as savepoint:
        savepoint.execute(f"SAVEPOINT {_SAVEPOINT}")
    reading = connection.cursor()
    reading.execute(*store.publishable_read(wanted))
    with connection.cursor() as release:
        release.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
    return reading


def _allowed(engine: Engine, batch: list[Read]) -> list[Read]:
    return [r for r in batch if engine.faults.allowed(r[0][0])]


def _read_alone(engine: Engine, cursor, failed: _Sent, exc: DatabaseError) -> Found:
    """After a batch's read failed: one tenant's failure is its own (recorded, as
    `isolated` would); several tenants' reads go again one by one."""
    if len(failed.allowed) == 1:
        (tenant_id, schema), _part = failed.allowed[0]
        engine.faults.failed(tenant_id, schema, exc)
        return [None] * len(failed.batch)
    return read_publishable(engine, cursor, failed.batch, grouped=False)


def read_publishable(engine: Engine, cursor, reads: list[Read], *, grouped: bool = True) -> Found:
    """`store.publishable_runs` of each read (None: that tenant failed, or backs off):
    several schemas in one statement, in a savepoint (a failing statement must not end
    the fence's transaction); if that fails, or not `grouped`, each tenant's read on its
    own, isolated, so that a broken tenant costs only itself. A success ends no back-off:
    the read says nothing of the write after it (the chunk records it)."""
    allowed = _allowed(engine, reads)
    if grouped and len(allowed) > 1:
        try:
            with transaction.atomic():
                found = store.publishable_runs_of_schemas(
                    cursor, [(schema, [e.run_id for e in part]) for (_t, schema), part in allowed]
                )
        except Exception as exc:
            if must_step_down(exc):
                raise
        else:
            by_key = {id(r): jobs for r, jobs in zip(allowed, found, strict=True)}
            return [by_key.get(id(r)) for r in reads]
    out: Found = []
    for n, ((tenant_id, schema), part) in enumerate(reads):
        if n:
            engine.checkpoint()  # each read may wait out the lock timeout
        ran, jobs = isolated(
            engine.faults,
            tenant_id,
            schema,
            lambda s=schema, p=part: store.publishable_runs(cursor, s, [x.run_id for x in p]),
            record_success=False,
        )
        out.append(jobs if ran else None)
    return out
