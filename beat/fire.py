"""Fire: admit and publish every run whose instant has come.

First attempts of active `allow` jobs (the common case) are read, published, and only
then marked queued (`publish_first`): the writes are most of the fire's cost, and need not
stand between the due instant and the broker. Except with many small tenants due at once
(ADR 0031): their runs are written first and published after, one statement for all their
schemas in a chunk, since there each schema's planning, not the rows, is the cost.

Then runs go in chunks of `fire_chunk`, oldest first, each chunk in ONE fenced transaction
across schemas: one commit per chunk rather than one per tenant, and the first chunk is out
before the last one is even looked at. The chunk's other messages are pushed (fenced by the
lease token) inside the transaction: if the commit is lost the runs stay waiting, workers
may still claim them, and the relay publishes the rest again (a duplicate message claims
nothing: invariant 4).

Admission per schema: the runs published first are marked queued; other on-time runs of
active `allow` jobs (retries) move to `queued` in one
statement (`store.queue_unconstrained`); the rest go through the full decision: a deleted
job's runs are cancelled, a paused job's slots skipped (`paused`), schedule runs later than
the job's misfire grace follow its misfire policy (`beat/planning.py`) when they may have
waited with no leader holding them (relayed, or put back for a failing tenant), and the concurrency
policy (`beat/admission.py`) queues, holds, skips or replaces. Each queued run's message is
built again if an edit changed its job's priority or timeout since it was prepared.

Runs that fair admission passed while their tenant was at its quota, for their job's state
to decide (`AdmissionControl.decided_by_policy`), take no slot: they skip the one-statement
path, and one the decision would queue waits in the fair queue again, unless it takes the
place of a run of its own `replace` job cancelled in the same transaction
(`within_freed_slots`). So however the job changed since the leader's read, nothing gets
past the quota that way.

If a statement fails for one tenant (its schema dropped, a row of it locked for longer than
`SCHEDULER_FIRE_LOCK_TIMEOUT_SECONDS`), that tenant starts its back-off at once and the
chunk is done again with every other schema in its own savepoint: the failing tenant's
runs wait for its back-off, every other tenant's are published. The lease is renewed
between schemas, so a slow tenant cannot outlast it.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter
from typing import TYPE_CHECKING

from django.db import connection, transaction

from runs import states

from . import store
from .admission import DueRun, JobLimits, admit, within_freed_slots
from .faults import isolated, must_step_down
from .lease import LeaseLost
from .metrics import record_fire
from .pending import DUE_ORDER, Pending
from .planning import DueSlotRun, MisfireRules, misfire_at_admission

if TYPE_CHECKING:
    from .engine import Engine


# Runs a call admits at most, in chunks: 100,000. Every admitted first attempt of an
# `allow` job (but many small tenants', ADR 0031) is published before any chunk writes
# (`publish_first`), so a burst split
# over several calls had each call's writes (about 40 µs a run) between its messages and
# the next call's: 100,000 due in one second reached p99 10.4 s in calls of 10,000.
FIRE_CHUNKS_PER_CALL = 50


@dataclass
class FireStats:
    published: int = 0
    skipped: int = 0
    held: int = 0
    cancelled: int = 0
    deferred: int = 0  # runs of a failing tenant, back in memory until its back-off ends
    lags: list[float] = field(default_factory=list)  # publish time - due time, seconds


@dataclass
class Admitted:
    """One schema's admission, applied to memory only after the chunk commits."""

    queued: list[Pending] = field(default_factory=list)
    held: list[Pending] = field(default_factory=list)
    skipped: int = 0
    cancelled: int = 0
    ended_jobs: set[int] = field(default_factory=set)  # jobs whose active runs were cancelled
    ended: list[tuple] = field(default_factory=list)  # (run id, attempt) of those runs
    waiting: list[Pending] = field(default_factory=list)  # back to the fair queue (no slot)


def fire(engine: Engine) -> FireStats:
    """At most `FIRE_CHUNKS_PER_CALL` chunks' worth of runs per call, the lease renewed
    between reads and chunks (`engine.checkpoint`: a burst of 100,000 admitted in one go
    once held the loop 1.7 s between two renewals of a 2 s lease). With fair admission
    every due run still joins the fair queue (in parts, with a renewal between them), so
    that the choice among tenants sees them all, and admission takes at most that many;
    `engine.fire_limited` then tells the loop to come back at once. Without it, the oldest
    due are taken and the rest stay due."""
    now = engine.clock.now()
    stats = FireStats()
    per_call = engine.config.fire_chunk * FIRE_CHUNKS_PER_CALL
    no_slot: frozenset = frozenset()
    if engine.admission is not None:  # what goes now, by quota, broker room and fair share
        due = engine.runs.pop_due(now.timestamp())
        for start in range(0, len(due), per_call):
            engine.admission.offer(due[start : start + per_call])
            engine.checkpoint()
        due, uncounted, dropped = engine.admission.choose(now.timestamp(), limit=per_call)
        engine.fire_limited = len(due) >= per_call
        engine.runs.forget(e.run_id for e in dropped)
        decided = engine.admission.decided_by_policy()  # tenants at their quota: no slot
        no_slot = frozenset(e.run_id for e in decided)
        due += decided
        due.sort(key=DUE_ORDER)
        for entries in uncounted.values():
            engine.defer_runs(entries)
            stats.deferred += len(entries)
    else:
        due = engine.runs.pop_due(now.timestamp(), limit=per_call)
        engine.fire_limited = False  # what is left is still due: the loop does not sleep
    early = publish_first(engine, due, now, no_slot, _written_first(engine, due))
    for chunk in chunks(due, engine.config.fire_chunk, engine.config.fire_chunk_schemas):
        engine.checkpoint()
        _fire_chunk(engine, chunk, now, stats, no_slot, early)
    engine.last_fire = stats
    if engine.lag_log is not None:
        engine.lag_log.extend(stats.lags)
    return stats


# A tenant with at most this many runs in a fire is small: with many of them at once, its
# runs are written first and published after, schema statements grouped (ADR 0031).
WRITE_FIRST_TENANT_RUNS = 10


def _written_first(engine: Engine, due: list[Pending]) -> frozenset:
    """The tenants whose runs the chunks write first and then publish, grouped: the small
    tenants of a fire with at least `fire_write_first_min_tenants` of them. Publishing
    first costs each schema a read before the push and a write after it, each planned by
    PostgreSQL for that schema's tables: with thousands of tenants of a run or two due
    together that planning, not the rows, was most of the fire (docs/benchmarks.md
    "Tenants"), and one grouped write that returns what to publish plans each schema
    once. A burst of a few large tenants still goes out before any write (ADR 0021)."""
    if len(due) < engine.config.fire_write_first_min_tenants:  # too few runs: no count
        return frozenset()
    counts = Counter(map(attrgetter("tenant_id"), due))
    small = frozenset(t for t, n in counts.items() if n <= WRITE_FIRST_TENANT_RUNS)
    return small if len(small) >= engine.config.fire_write_first_min_tenants else frozenset()


@dataclass
class Early:
    """Runs published before any of them was marked queued, and when."""

    # The small tenants whose runs are not published first: the chunks write and publish
    # them, their schemas grouped (`_written_first`).
    written_first: frozenset = frozenset()
    entries: dict = field(default_factory=dict)  # run id -> its entry (message as pushed)
    at: dict = field(default_factory=dict)  # run id -> when its push ended
    pushes: list = field(default_factory=list)  # (entries, when their push ended), to index

    def index(self) -> None:
        """Fill `entries` and `at` from the pushes: once, after the last group, because
        hashing 100,000 UUIDs (a Python-level `__hash__`) between two groups held the
        next group's reads back, and so its messages."""
        for sent, at in self.pushes:
            self.entries.update((e.run_id, e) for e in sent)
            self.at.update((e.run_id, at) for e in sent)
        self.pushes.clear()


def publish_first(
    engine: Engine,
    due: list[Pending],
    now: datetime,
    no_slot: frozenset,
    written_first: frozenset = frozenset(),
) -> Early:
    """The common case goes out before the writes: first attempts of active `allow` jobs
    are read and pushed at once, in due order (`_publish_group`), and only then do the
    chunks mark them queued. Marking 10,000 runs queued costs about 40 µs a
    run in PostgreSQL (every index of `runs_run` gets a new entry: the status is indexed),
    so writing first put 0.4 s between the due instant and the last message; what decides
    a run's early publication is its row and its job's (`store.publishable_runs`), read
    by key in a few µs. ADR 0021.

    What this changes, and why it keeps the guarantees: a worker may claim such a run
    while it is still `scheduled` (a legal transition, as when a fire's commit is lost);
    the chunk's `mark_published_queued` then leaves it alone (no longer `scheduled`). If the
    leader dies or is deposed between the push and the chunk's commit, the runs stay
    `scheduled` with their messages out, and the next leader publishes them again: the
    worker's claim (a compare-and-set on status and attempt) lets only one message run an
    attempt (invariant 4). A first attempt is `scheduled` or past it (a retry is a later
    attempt, `retrying`, and not claimable before it is admitted, so it is marked first
    and published after, by the chunk). An edit that lands between the read and the
    chunk is ordered after the fire, as one landing just after the chunk's commit was.

    The runs of `written_first` tenants are left to the chunks (`_admit_written_first`)."""
    early = Early(written_first=written_first)
    if written_first:
        eligible = [
            e
            for e in due
            if e.attempt == 1 and e.run_id not in no_slot and e.tenant_id not in written_first
        ]
    elif no_slot:
        eligible = [e for e in due if e.attempt == 1 and e.run_id not in no_slot]
    else:  # the common case, without a set lookup (a UUID hash) per run
        eligible = [e for e in due if e.attempt == 1]
    # In due order, in groups of at most PUBLISH_GROUP runs and `fire_chunk_schemas`
    # schemas, one fenced transaction each: a schema read holds its tables' and indexes'
    # locks to the end of its transaction, and thousands of schemas at once filled
    # PostgreSQL's shared lock table.
    for group in chunks(eligible, PUBLISH_GROUP, engine.config.fire_chunk_schemas):
        by_tenant: dict[tuple[int, str], list[Pending]] = defaultdict(list)
        for entry in group:
            by_tenant[(entry.tenant_id, entry.schema)].append(entry)
        _publish_group(engine, by_tenant, now, early)
    early.index()
    return early


PUBLISH_GROUP = 10_000  # runs a publication transaction reads and pushes at most
# Messages per push: a read's, or several small tenants' together (one pipeline, or on
# RabbitMQ one wait for confirms, for many tenants of a few runs each).
PUSH_BATCH = 1000
PUSHES_AHEAD = 2  # pushes submitted and not yet ended, at most: reads wait for the pushes


def _publish_group(
    engine: Engine, by_tenant: dict[tuple[int, str], list[Pending]], now, early: Early
) -> None:
    """One fenced transaction: the lease row held FOR SHARE until every push of the group
    has ended (or been cancelled), so a leader deposed in PostgreSQL publishes nothing.
    Each read is of at most `fire_chunk` runs, with a lease renewal before it, and the
    lease is renewed while the group waits for its pushes."""
    size = engine.config.fire_chunk
    pushes: list[tuple[list[Pending], Future]] = []
    batch: list[Pending] = []

    def send() -> None:
        if batch:
            messages = [(e.queue, e.message) for e in batch]
            pushes.append((list(batch), _PUSHER.submit(_push, engine, messages)))
            batch.clear()
            _await(engine, [f for _, f in pushes], keep=PUSHES_AHEAD - 1)

    reads = [
        (key, entries[start : start + size])
        for key, entries in by_tenant.items()
        for start in range(0, len(entries), size)
    ]
    failed: set[int] = set()  # tenants whose read failed: the chunk defers their runs
    with transaction.atomic(), connection.cursor() as cursor:
        try:
            store.fence(cursor, engine.epoch, "fire", engine.partition)
            store.set_local_lock_timeout(cursor, engine.config.fire_lock_timeout_seconds)
            for together in _read_batches(reads, size):
                together = [(k, p) for k, p in together if k[0] not in failed]
                engine.checkpoint()
                for ((tenant_id, _schema), part), jobs in zip(
                    together, _read_publishable(engine, cursor, together), strict=True
                ):
                    if jobs is None:
                        failed.add(tenant_id)
                        continue
                    batch.extend(
                        engine.runs.rebuilt(part[n], job.priority, job.timeout_seconds)
                        for n, job in sorted(jobs.items())  # in the order they were due
                        if _publishable(part[n], job, now)
                    )
                    if len(batch) >= PUSH_BATCH:
                        send()
            send()
            _await(engine, [f for _, f in pushes], keep=0)
        finally:  # no push outlives the fence: the ones not started are cancelled
            for _, push in pushes:
                push.cancel()
            wait([push for _, push in pushes])
    early.pushes.extend((sent, push.result()) for sent, push in pushes)


Read = tuple[tuple[int, str], list[Pending]]  # (tenant id, schema), its runs to read


def _read_batches(reads: list[Read], size: int) -> list[list[Read]]:
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


def _read_publishable(
    engine: Engine, cursor, reads: list[Read]
) -> list[dict[int, store.PublishableJob] | None]:
    """`store.publishable_runs` of each read (None: that tenant failed, or backs off):
    several schemas in one statement, in a savepoint (a failing statement must not end
    the fence's transaction); if that fails, each tenant's read again on its own,
    isolated, so that a broken tenant costs only itself. A success ends no back-off: the
    read says nothing of the write after it (the chunk records it)."""
    allowed = [r for r in reads if engine.faults.allowed(r[0][0])]
    if len(allowed) > 1:
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
    out: list[dict[int, store.PublishableJob] | None] = []
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


class PushStalled(LeaseLost):
    """The broker took no push for `push_wait_seconds`: the leader stops renewing its lease
    and steps down (its fenced transaction would soon be ended by PostgreSQL)."""


def _await(engine: Engine, futures: list[Future], keep: int) -> None:
    """Until at most `keep` of the pushes are still running, renewing the lease meanwhile;
    the first one that failed raises at once (the rest are cancelled by the caller). A
    push still running after `push_wait_seconds` raises PushStalled: renewing for longer
    would keep a leader whose fence PostgreSQL is about to end holding the lease for as
    long as the broker stalls, and no standby could take over."""
    step = max(engine.config.fire_lock_timeout_seconds, 0.05)
    deadline = time.monotonic() + engine.config.push_wait_seconds
    while True:
        for future in futures:
            if future.done() and future.exception() is not None:
                raise future.exception()
        if sum(not f.done() for f in futures) <= keep:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise PushStalled(f"the broker took no push for {engine.config.push_wait_seconds:.1f}s")
        pending = [f for f in futures if not f.done()]
        wait(pending, timeout=min(step, left), return_when=FIRST_COMPLETED)
        engine.checkpoint()


# One thread pushes while the fire reads the next tenants: each waits on a different
# server (PostgreSQL, the broker), and both waits release the GIL.
_PUSHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fire-push")


def _push(engine: Engine, messages: list[tuple[str, bytes]]) -> float:
    engine.writes.push_messages(messages)
    return engine.clock.now().timestamp()


def _publishable(entry: Pending, job: store.PublishableJob, now: datetime) -> bool:
    """`store.queue_unconstrained`'s conditions, for a first attempt of an active `allow`
    job: not a paused job's slot, nor its dependency run (held by the pause), nor a slot
    that may have waited with no leader and is later than the job's misfire grace."""
    if job.paused:
        return entry.trigger not in ("schedule", "dependency")
    if entry.trigger == "schedule" and entry.judge_lateness:
        return entry.due >= now.timestamp() - job.misfire_grace_seconds
    return True


def chunks(due: list[Pending], runs: int, schemas: int) -> list[list[Pending]]:
    """Consecutive chunks of at most `runs` runs of at most `schemas` schemas each: one
    transaction holds about a dozen locks per schema it touches (every table and index of
    the statements), which must stay far below PostgreSQL's shared lock table, and a
    chunk is the unit between two lease renewals."""
    out: list[list[Pending]] = []
    chunk: list[Pending] = []
    seen: set[str] = set()
    for entry in due:
        if chunk and (len(chunk) >= runs or (entry.schema not in seen and len(seen) >= schemas)):
            out.append(chunk)
            chunk, seen = [], set()
        chunk.append(entry)
        seen.add(entry.schema)
    if chunk:
        out.append(chunk)
    return out


def _fire_chunk(
    engine: Engine,
    due: list[Pending],
    now: datetime,
    stats: FireStats,
    no_slot: frozenset,
    early: Early,
) -> None:
    by_tenant: dict[tuple[int, str], list[Pending]] = defaultdict(list)
    for entry in due:
        if engine.faults.allowed(entry.tenant_id):
            by_tenant[(entry.tenant_id, entry.schema)].append(entry)
        else:
            _defer(engine, [entry], stats, early)
    reached: list[tuple[int, str]] = []  # the schemas the first attempt got to, in order
    try:
        admitted = _admit_all(
            engine, by_tenant, now, no_slot, early, isolate=False, reached=reached
        )
    except Exception as exc:
        if must_step_down(exc):
            raise
        if reached:  # the statement that failed was this tenant's: skip it at once
            engine.faults.failed(*reached[-1], exc)
        admitted = _admit_all(engine, by_tenant, now, no_slot, early, isolate=True)
    published_at = engine.clock.now().timestamp()
    for key, entries in by_tenant.items():
        result = admitted.get(key)
        if result is None:  # the tenant failed: its runs wait for its back-off
            _defer(engine, entries, stats, early)
            continue
        engine.faults.succeeded(key[0])
        _apply(engine, entries, result, published_at, stats, early)


def _defer(engine: Engine, entries: list[Pending], stats: FireStats, early: Early) -> None:
    """A failing tenant's runs wait for its back-off, except those published already: their
    messages are out and a worker may be running them, so they count as in flight, and
    they leave memory (had one come back later as attempt 1, a retry a worker recorded
    meanwhile would be hidden behind it). One that stays `scheduled` (its message lost
    with the write) is found by the relay once the tenant may go on."""
    out = [e for e in entries if e.run_id in early.entries]
    rest = [e for e in entries if e.run_id not in early.entries]
    engine.defer_runs(rest)
    stats.deferred += len(rest)
    if not out:
        return
    stats.published += len(out)
    _record_early(out, stats, early)
    if engine.admission is not None:
        engine.admission.admitted(out)
    engine.runs.forget(e.run_id for e in out)


def _record_early(out: list[Pending], stats: FireStats, early: Early) -> None:
    """The lags of runs published early, each from the end of its own push."""
    by_push: dict[float, list[Pending]] = defaultdict(list)
    for entry in out:
        by_push[early.at[entry.run_id]].append(entry)
    for at, entries in by_push.items():
        stats.lags.extend(at - e.due for e in entries)
        record_fire(entries[0].schema, entries, 0, 0, at)


def _admit_all(
    engine: Engine,
    by_tenant: dict[tuple[int, str], list[Pending]],
    now: datetime,
    no_slot: frozenset,
    early: Early,
    *,
    isolate: bool,
    reached: list[tuple[int, str]] | None = None,
) -> dict[tuple[int, str], Admitted]:
    admitted: dict[tuple[int, str], Admitted] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        store.fence(cursor, engine.epoch, "fire", engine.partition)
        store.set_local_lock_timeout(cursor, engine.config.fire_lock_timeout_seconds)
        if not isolate:  # schemas whose runs were all published first: one statement
            admitted.update(_admit_published(cursor, by_tenant, early))
            # Small tenants' runs left unpublished: one statement writes and returns them.
            admitted.update(
                _admit_written_first(
                    engine, cursor, by_tenant, admitted, now, no_slot, early, reached
                )
            )
        for (tenant_id, schema), entries in by_tenant.items():
            if (tenant_id, schema) in admitted:
                continue
            engine.checkpoint()  # a slow tenant must not outlast the lease
            if reached is not None:
                reached.append((tenant_id, schema))
            if isolate:
                ran, result = isolated(
                    engine.faults,
                    tenant_id,
                    schema,
                    lambda s=schema, e=entries: _admit_schema(
                        engine, cursor, s, e, now, no_slot, early
                    ),
                )
                if ran:
                    admitted[(tenant_id, schema)] = result
            else:
                admitted[(tenant_id, schema)] = _admit_schema(
                    engine, cursor, schema, entries, now, no_slot, early
                )
        if reached is not None:
            reached.clear()  # past the tenants: a failure from here on is nobody's own
        engine.checkpoint()
        engine.writes.push_messages(
            [
                (e.queue, e.message)
                for result in admitted.values()
                for e in result.queued
                if e.run_id not in early.entries
            ]
        )
    return admitted


def _admit_published(
    cursor, by_tenant: dict[tuple[int, str], list[Pending]], early: Early
) -> dict[tuple[int, str], Admitted]:
    """The common case of `_admit_schema` for several schemas at once: every run of the
    schema was published first, so all there is to do is mark them queued. A failure
    here is nobody's own: the chunk is done again with each tenant isolated."""
    published = {
        key: [early.entries[e.run_id] for e in entries]
        for key, entries in by_tenant.items()
        if all(e.run_id in early.entries for e in entries)
    }
    if len(published) < 2:
        return {}
    store.mark_published_queued_of_schemas(
        cursor, [(schema, [e.run_id for e in out]) for (_t, schema), out in published.items()]
    )
    return {key: Admitted(queued=out) for key, out in published.items()}


def _admit_written_first(
    engine: Engine,
    cursor,
    by_tenant: dict[tuple[int, str], list[Pending]],
    done: dict[tuple[int, str], Admitted],
    now: datetime,
    no_slot: frozenset,
    early: Early,
    reached: list[tuple[int, str]] | None = None,
) -> dict[tuple[int, str], Admitted]:
    """`_admit_schema` for several small tenants' schemas at once (ADR 0031): their runs
    go to `queued` in one statement (`store.queue_first_attempts_of_schemas`), which
    returns what to publish, and are pushed with the chunk's other messages before its
    commit (as a retry is, ADR 0021); what it leaves (another concurrency policy, a paused
    or deleted job, a misfire) is decided schema by schema as before. A schema with a run
    published first or one the fair queue passed without a slot goes the usual way. A
    failure of the grouped statement is nobody's own: the chunk is done again with each
    tenant isolated; one of a schema's own statements after it is that tenant's
    (`reached`), which then backs off at once."""
    if not early.written_first:
        return {}
    wanted = [
        (key, entries)
        for key, entries in by_tenant.items()
        if key not in done
        and key[0] in early.written_first
        and not any(e.run_id in early.entries or e.run_id in no_slot for e in entries)
    ]
    if len(wanted) < 2:
        return {}
    # The common case goes to the grouped statement: first attempts held from before their
    # instant. Retries and runs that may have waited with no leader (the misfire policy
    # judges those) go through the full decision below, as the statement's leftovers do.
    plain = [
        [e for e in entries if e.attempt == 1 and not e.judge_lateness] for _k, entries in wanted
    ]
    grouped = [n for n, runs in enumerate(plain) if runs]
    if len(grouped) < 2:  # the others go the usual way, schema by schema
        return {}
    found = store.queue_first_attempts_of_schemas(
        cursor,
        [
            (wanted[n][0][1], [e.run_id for e in plain[n]], [e.job_id for e in plain[n]])
            for n in grouped
        ],
    )
    out: dict[tuple[int, str], Admitted] = {}
    for n, queued in zip(grouped, found, strict=True):
        (tenant_id, schema), entries = wanted[n]
        by_id = {e.run_id: e for e in entries}
        first = [
            engine.runs.rebuilt(by_id[q.run_id], q.priority, q.timeout_seconds) for q in queued
        ]
        moved = {q.run_id for q in queued}
        rest = [e for e in entries if e.run_id not in moved]
        result = Admitted()
        if rest:  # as `_admit_schema` would have done with them (retries: one statement)
            engine.checkpoint()
            if reached is not None:
                reached.append((tenant_id, schema))
            result = _admit_schema(engine, cursor, schema, rest, now, no_slot, early)
        result.queued = first + result.queued
        out[(tenant_id, schema)] = result
    if reached is not None:
        reached.clear()  # past these tenants: a failure from here on is nobody's own
    return out


def _apply(
    engine: Engine,
    entries: list[Pending],
    result: Admitted,
    published_at: float,
    stats: FireStats,
    early: Early,
) -> None:
    stats.published += len(result.queued)
    if engine.admission is not None:
        engine.admission.admitted(result.queued)
        engine.admission.ended(entries[0].tenant_id, result.ended)
        engine.admission.offer(result.waiting)
    first = [e for e in result.queued if e.run_id in early.entries]
    later = [e for e in result.queued if e.run_id not in early.entries]
    _record_early(first, stats, early)
    stats.lags.extend(published_at - e.due for e in later)
    record_fire(entries[0].schema, later, result.skipped, result.cancelled, published_at)
    stats.skipped += result.skipped
    stats.cancelled += result.cancelled
    stats.held += len(result.held)
    for entry in result.held:
        engine.runs.hold(entry)
    kept = {e.run_id for e in result.held} | {e.run_id for e in result.waiting}
    engine.runs.forget(e.run_id for e in entries if e.run_id not in kept)
    for job_id in result.ended_jobs:
        engine.runs.release(entries[0].tenant_id, job_id)


def _admit_schema(
    engine: Engine,
    cursor,
    schema: str,
    entries: list[Pending],
    now: datetime,
    no_slot: frozenset,
    early: Early,
) -> Admitted:
    result = Admitted()
    # Published already (`publish_first`): marked queued now, and counted as queued
    # whether or not the row still moves (a worker may have claimed it): its message is out.
    out = [early.entries[e.run_id] for e in entries if e.run_id in early.entries]
    store.mark_published_queued(cursor, schema, [e.run_id for e in out])
    result.queued = list(out)
    # The others without a policy decision to make: marked queued, then published.
    slotted = [e for e in entries if e.run_id not in no_slot and e.run_id not in early.entries]
    fast = store.queue_unconstrained(
        cursor,
        schema,
        [e.run_id for e in slotted],
        [e.attempt for e in slotted],
        [e.run_id for e in slotted if e.judge_lateness],
        now,
    )
    by_id = {e.run_id: e for e in entries}
    result.queued += [
        engine.runs.rebuilt(by_id[q.run_id], q.priority, q.timeout_seconds) for q in fast
    ]
    moved = {q.run_id for q in fast} | {e.run_id for e in out}
    rest = [e for e in entries if e.run_id not in moved]
    if rest:
        _admit_the_rest(engine, cursor, schema, rest, now, result, no_slot)
    return result


def _admit_the_rest(
    engine: Engine,
    cursor,
    schema: str,
    rest: list[Pending],
    now: datetime,
    result: Admitted,
    no_slot: frozenset,
) -> None:
    by_id = {e.run_id: e for e in rest}

    def attempts(run_ids: list) -> list[int]:  # the attempt each decision is about
        return [by_id[run_id].attempt for run_id in run_ids]

    jobs = store.job_admission_rows(cursor, schema, sorted({e.job_id for e in rest}))
    gone, paused, live = _split_by_job_state(rest, jobs)
    result.skipped += store.mark_skipped(
        cursor, schema, paused, attempts(paused), states.SKIP_PAUSED, now
    )
    result.cancelled += store.cancel_runs(cursor, schema, gone, "job deleted", now)
    live, late = _apply_misfire(live, jobs, now, engine.config.misfire_max_runs)
    result.skipped += store.mark_skipped(
        cursor, schema, late, attempts(late), states.SKIP_MISFIRE, now
    )
    decision = admit(
        [DueRun(e.run_id, e.job_id, e.scheduled_for) for e in live],
        {j.id: JobLimits(j.policy, j.max_concurrent, j.active) for j in jobs.values()},
    )
    replaced = store.cancel_active_runs_of_jobs(
        cursor, schema, decision.replace_jobs, "replaced by a newer run", now, decision.queue
    )
    result.cancelled += len(replaced)
    result.ended += [(run_id, attempt) for _, run_id, attempt in replaced]
    result.ended_jobs.update(decision.replace_jobs)
    to_queue, waiting, superseded = within_freed_slots(
        decision.queue,
        {run_id: by_id[run_id].job_id for run_id in decision.queue},
        no_slot,
        Counter(job_id for job_id, _, _ in replaced),
    )
    result.waiting += [by_id[run_id] for run_id in waiting]
    result.cancelled += store.cancel_runs(
        cursor, schema, decision.supersede + superseded, "superseded by a newer run", now
    )
    overlap = decision.skip_overlap
    result.skipped += store.mark_skipped(
        cursor, schema, overlap, attempts(overlap), states.SKIP_OVERLAP, now
    )
    moved = store.mark_queued(cursor, schema, to_queue, attempts(to_queue))
    for run_id in to_queue:
        if run_id in moved:
            entry, job = by_id[run_id], jobs[by_id[run_id].job_id]
            result.queued.append(engine.runs.rebuilt(entry, job.priority, job.timeout_seconds))
    result.held += [by_id[run_id] for run_id in decision.hold]


def _split_by_job_state(entries: list[Pending], jobs: dict[int, store.JobAdmissionRow]):
    """(runs of deleted jobs, slots of paused jobs, the rest); a paused job's dependency
    runs are in none: they stay waiting, out of memory, until the job is resumed."""
    gone, paused, live = [], [], []
    for entry in entries:
        job = jobs.get(entry.job_id)
        if job is None or job.deleted:
            gone.append(entry.run_id)
        elif job.paused and entry.trigger == "schedule" and entry.attempt == 1:
            paused.append(entry.run_id)
        elif job.paused and entry.trigger == "dependency":
            continue  # held by the pause (store.HELD_BY_PAUSE)
        else:
            live.append(entry)
    return gone, paused, live


def _apply_misfire(
    live: list[Pending], jobs: dict[int, store.JobAdmissionRow], now: datetime, max_runs: int
) -> tuple[list[Pending], list]:
    """First attempts of schedule runs that may have waited out their instant with no
    leader (`Pending.judge_lateness`) go through their job's misfire policy."""
    slot_runs: dict[int, list[Pending]] = defaultdict(list)
    others: list[Pending] = []
    for entry in live:
        if entry.trigger == "schedule" and entry.attempt == 1 and entry.judge_lateness:
            slot_runs[entry.job_id].append(entry)
        else:
            others.append(entry)
    kept, late = list(others), []
    for job_id, entries in slot_runs.items():
        job = jobs[job_id]
        rules = MisfireRules(job.misfire_policy, job.misfire_grace_seconds, max_runs, 0)
        by_id = {e.run_id: e for e in entries}
        admit_ids, skip_ids = misfire_at_admission(
            [DueSlotRun(e.run_id, datetime.fromtimestamp(e.due, now.tzinfo)) for e in entries],
            rules=rules,
            now=now,
        )
        kept += [by_id[i] for i in admit_ids]
        late += skip_ids
    return kept, late
