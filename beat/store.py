"""The engine's SQL against tenant schemas: set-based statements, schema-qualified names.

The leader works across every tenant schema, so it names tables as `"<schema>"."<table>"`
instead of switching the connection's search_path, and it writes whole batches with
`unnest` arrays: one statement per schema per step, never one per run. Status words come
from `runs.states` through `runs.status_sql.STATUS`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from psycopg import sql
from psycopg.types.datetime import TimestamptzLoader

from core.failpoints import freeze_in_fence
from core.keys import partition_count
from core.partitions import lease_row_id
from core.sql import per_schema, pg_array, table, tagged_ctes, tagged_union, uuid_array
from jobs.indexing import SCHEDULABLE
from runs import status_sql
from runs.status_sql import STATUS

JOB_COLUMNS = (
    "id",
    "schedule_kind",
    "cron_resolved",
    "timezone",
    "interval_seconds",
    "anchor_at",
    "hash_seed",
    "jitter_seconds",
    "dst_gap",
    "dst_repeat",
    "misfire_policy",
    "misfire_grace_seconds",
    "paused",
    "paused_at",
    "resumed_at",
    "deleted_at",
    "fault_code",
    "next_run_at",
    "priority",
    "concurrency_policy",
    "max_concurrent_runs",
    "timeout_seconds",
    "version",
    "extra_specs",
    "run_at_wall",
    "start_at",
    "end_at",
    "has_calendars",
)
# The condition of job_schedulable_idx, a job whose slots the leader materialises: SCHEDULABLE
# (from jobs/indexing.py, which writes the index for the same jobs).


HELD_BY_PAUSE = status_sql.HELD_BY_PAUSE


def fast_times(cursor):
    """Load `timestamptz` on this cursor with psycopg's own loader, which psycopg swaps for
    its C implementation. Django registers a Python subclass on its connections (to set
    the tzinfo), which costs several µs a value: most of reading thousands of job rows.
    The C loader returns the same aware instants (in the session's time zone, UTC here)."""
    getattr(cursor, "cursor", cursor).adapters.register_loader("timestamptz", TimestamptzLoader)
    return cursor


def _times(values: list) -> str:
    """`pg_array` for a column of instants (None: NULL), without its per-value dispatch."""
    return "{" + ",".join("NULL" if v is None else f'"{v.isoformat()}"' for v in values) + "}"


def _plain(values: list) -> str:
    """`pg_array` for ids and numbers (their text needs no quotes)."""
    return "{" + ",".join(map(str, values)) + "}"


def _words(values: list) -> str:
    """`pg_array` for our own status words and skip reasons (no quotes or backslashes)."""
    return "{" + ",".join(f'"{v}"' for v in values) + "}"


class FencingError(Exception):
    """This process's lease epoch is no longer current: it must stop writing at once."""


# The advisory lock class of the fencing check (the second key is the partition's lease
# row): a new leader of a partition ends, if it must, exactly the sessions holding
# (class, row), never another partition's leader (beat/lease.py).
FENCE_LOCK_CLASS = 742_001


def fence(cursor, epoch: int, step: str = "", partition: int = 0) -> None:
    """Invariant 3: hold the partition's lease row FOR SHARE while this transaction writes.

    A new leader's epoch bump (an UPDATE of the same row) waits for this transaction (for a
    bounded time, see `beat.lease.bump_epoch`), and once it commits, this check fails for
    the old epoch. The shared advisory lock names the partition in `pg_locks`, which a row
    lock does not: it is how the bump finds the sessions to end.
    """
    row = lease_row_id(partition, partition_count())
    # `tickwork.fence` (this transaction only) says which epoch the writes are fenced by:
    # what an audit trigger compares with the lease row (the chaos suite's partition churn).
    cursor.execute(
        "SELECT pg_advisory_xact_lock_shared(%s, %s), set_config('tickwork.fence', %s, true)"
        " FROM public.beat_schedulerlease WHERE id = %s AND epoch = %s FOR SHARE",
        [FENCE_LOCK_CLASS, row, f"{row}:{epoch}", row, epoch],
    )
    if cursor.fetchone() is None:
        raise FencingError(f"lease epoch {epoch} of partition {partition} is no longer current")
    freeze_in_fence(step)  # the chaos suite's failpoint (core/failpoints.py)


@dataclass
class JobRow:
    id: int
    schedule_kind: str
    cron_resolved: str
    timezone: str
    interval_seconds: int | None
    anchor_at: datetime | None
    hash_seed: str
    jitter_seconds: int
    dst_gap: str
    dst_repeat: str
    misfire_policy: str
    misfire_grace_seconds: int
    paused: bool
    paused_at: datetime | None
    resumed_at: datetime | None
    deleted_at: datetime | None
    fault_code: str
    next_run_at: datetime | None
    priority: str
    concurrency_policy: str
    max_concurrent_runs: int
    timeout_seconds: int
    version: int
    extra_specs: list
    run_at_wall: str
    start_at: datetime | None
    end_at: datetime | None
    has_calendars: bool  # kept by PostgreSQL (jobs/migrations/0006_job_has_calendars.py)
    calendars: list = field(default_factory=list)  # [(name, dates, ranges)]

    def __post_init__(self) -> None:
        # Raw queries return jsonb as text: Django registers no loader on its connections.
        # (Most jobs have neither: skip the decoder for the empty values.)
        if isinstance(self.extra_specs, str):
            self.extra_specs = [] if self.extra_specs == "[]" else json.loads(self.extra_specs)
        if isinstance(self.calendars, str):
            self.calendars = json.loads(self.calendars)
        self.calendars = self.calendars or []

    @property
    def schedulable(self) -> bool:
        return (
            self.deleted_at is None
            and not self.paused
            and self.next_run_at is not None
            and self.schedule_kind != "none"
            and not self.fault_code
        )


@per_schema
def _lock_query(schema: str) -> sql.Composable:
    return sql.SQL(
        "SELECT {cols} FROM {jobs} j WHERE j.id = ANY(%s::bigint[]) FOR UPDATE OF j SKIP LOCKED"
    ).format(
        cols=sql.SQL(", ").join(sql.SQL("j.{}").format(sql.Identifier(c)) for c in JOB_COLUMNS),
        jobs=table(schema, "jobs_job"),
    )


@per_schema
def _calendars_query(schema: str) -> sql.Composable:
    return sql.SQL(
        """
        SELECT jc.job_id, json_agg(json_build_array(c.name, c.dates, c.ranges))
        FROM {links} jc JOIN {calendars} c ON c.id = jc.exclusioncalendar_id
        WHERE jc.job_id = ANY(%s::bigint[]) GROUP BY jc.job_id
        """
    ).format(
        links=table(schema, "jobs_job_calendars"),
        calendars=table(schema, "jobs_exclusioncalendar"),
    )


def lock_jobs(cursor, schema: str, job_ids: list[int]) -> tuple[list[JobRow], set[int]]:
    """Lock the jobs to materialise. A job an edit holds locked is skipped, not waited
    for (the leader never queues behind a tenant's request); returns (locked rows, ids of
    the jobs that are locked elsewhere and so left for the next iteration)."""
    fast_times(cursor).execute(_lock_query(schema), [pg_array(job_ids)])
    rows = [JobRow(*row) for row in cursor.fetchall()]
    _read_calendars(cursor, [(schema, rows)])
    return rows, _busy(cursor, schema, job_ids, rows)


def lock_jobs_of_schemas(
    cursor, wanted: list[tuple[str, list[int]]]
) -> list[tuple[list[JobRow], set[int]]]:
    """`lock_jobs` for several schemas in ONE statement (a data-reading CTE per schema,
    each locking its rows): with thousands of tenants of a job or two each, a round trip
    per tenant was most of the leader's time. In the order of `wanted`."""
    fast_times(cursor).execute(*lock_jobs_of_schemas_sql(wanted))
    rows: list[list[JobRow]] = [[] for _ in wanted]
    for n, *row in cursor.fetchall():
        rows[n].append(JobRow(*row))
    _read_calendars(cursor, [(schema, rows[n]) for n, (schema, _ids) in enumerate(wanted)])
    return [
        (rows[n], _busy(cursor, schema, ids, rows[n])) for n, (schema, ids) in enumerate(wanted)
    ]


def lock_jobs_of_schemas_sql(wanted: list[tuple[str, list[int]]]) -> tuple[sql.Composed, list]:
    """The statement and parameters of `lock_jobs_of_schemas` (`make bench ARGS=
    "schema-statements"` explains it)."""
    query = tagged_ctes([_lock_query(schema) for schema, _ids in wanted])
    return query, [pg_array(ids) for _schema, ids in wanted]


def _read_calendars(cursor, locked: list[tuple[str, list[JobRow]]]) -> None:
    """The calendars of the locked jobs that have some, in one statement for all schemas.

    Read apart from the lock because most jobs have none: joined into the lock, the two
    calendar tables of every schema were planned and opened in each statement (a third of
    a 25-schema lock's time). The flag cannot be stale here: a link added or removed
    updates the job row (the trigger), which waits for the lock this transaction holds;
    this statement, run after the lock, sees every change committed before it."""
    wanted = [
        (schema, {row.id: row for row in rows if row.has_calendars}) for schema, rows in locked
    ]
    wanted = [(schema, jobs) for schema, jobs in wanted if jobs]
    if not wanted:
        return
    query = tagged_union((n, _calendars_query(schema)) for n, (schema, _jobs) in enumerate(wanted))
    cursor.execute(query, [pg_array(sorted(jobs)) for _schema, jobs in wanted])
    for n, job_id, calendars in cursor.fetchall():
        wanted[n][1][job_id].calendars = (
            json.loads(calendars) if isinstance(calendars, str) else calendars
        )


@per_schema
def _existing_jobs_sql(schema: str) -> sql.Composable:
    return sql.SQL("SELECT id FROM {} WHERE id = ANY(%s::bigint[])").format(
        table(schema, "jobs_job")
    )


def _busy(cursor, schema: str, job_ids: list[int], rows: list[JobRow]) -> set[int]:
    """The wanted jobs not locked that still exist: an edit holds them."""
    missing = set(job_ids) - {row.id for row in rows}
    if not missing:
        return set()
    cursor.execute(_existing_jobs_sql(schema), [pg_array(sorted(missing))])
    return {row[0] for row in cursor.fetchall()}


@per_schema
def _job_states_sql(schema: str) -> sql.Composable:
    return sql.SQL(
        f"SELECT id, ({SCHEDULABLE}) AND schedule_kind <> 'none', next_run_at FROM {{}} "
        "WHERE id = ANY(%s::bigint[])"
    ).format(table(schema, "jobs_job"))


def job_states(cursor, schema: str, job_ids: list[int]) -> dict[int, tuple[bool, datetime | None]]:
    """(schedulable, next_run_at) of each job that exists: what the index must say."""
    fast_times(cursor).execute(_job_states_sql(schema), [pg_array(job_ids)])
    return {row[0]: (row[1], row[2]) for row in cursor.fetchall()}


def job_states_of_schemas(
    cursor, wanted: list[tuple[str, list[int]]]
) -> list[dict[int, tuple[bool, datetime | None]]]:
    """`job_states` of several schemas in one statement, in the order of `wanted`."""
    query = tagged_union((n, _job_states_sql(schema)) for n, (schema, _ids) in enumerate(wanted))
    fast_times(cursor).execute(query, [pg_array(ids) for _schema, ids in wanted])
    states: list[dict[int, tuple[bool, datetime | None]]] = [{} for _ in wanted]
    for n, job_id, ok, at in cursor.fetchall():
        states[n][job_id] = (ok, at)
    return states


@per_schema
def _insert_runs_sql(schema: str) -> sql.Composable:
    return sql.SQL(
        """
        INSERT INTO {runs} (id, job_id, trigger, scheduled_for, due_at, status, skip_reason,
                            attempt, worker, error, created_at, finished_at)
        SELECT u.id, u.job_id, 'schedule', u.slot, u.due, u.status, u.reason, 1, '', '', now(),
               CASE WHEN u.status = {skipped} THEN now() END
        FROM unnest(%s::uuid[], %s::bigint[], %s::timestamptz[], %s::timestamptz[],
                    %s::text[], %s::text[]) AS u(id, job_id, slot, due, status, reason)
        ON CONFLICT (job_id, scheduled_for) WHERE trigger = 'schedule' DO NOTHING
        RETURNING id
        """
    ).format(runs=table(schema, "runs_run"), **STATUS)


def _insert_runs_params(rows: list[tuple]) -> list[str]:
    ids, job_ids, slots, dues, statuses, reasons = map(list, zip(*rows, strict=True))
    return [
        _plain(ids),
        _plain(job_ids),
        _times(slots),
        _times(dues),
        _words(statuses),
        _words(reasons),
    ]


def insert_scheduled_runs(cursor, schema: str, rows: list[tuple]) -> list[Any]:
    """Insert (id, job_id, scheduled_for, due_at, status, skip_reason) rows for schedule
    slots; ON CONFLICT DO NOTHING (invariant 1). Returns the ids actually inserted."""
    if not rows:
        return []
    cursor.execute(_insert_runs_sql(schema), _insert_runs_params(rows))
    return [row[0] for row in cursor.fetchall()]


@per_schema
def _advance_sql(schema: str) -> sql.Composable:
    # No next slot: the schedule has ended, and the job is complete.
    return sql.SQL(
        """
        UPDATE {jobs} AS j SET next_run_at = u.next,
               completed_at = CASE WHEN u.next IS NULL THEN now() ELSE j.completed_at END
        FROM unnest(%s::bigint[], %s::timestamptz[]) AS u(id, next) WHERE j.id = u.id
        """
    ).format(jobs=table(schema, "jobs_job"))


def _advance_params(cursors: list[tuple[int, datetime | None]]) -> list[str]:
    job_ids, nexts = map(list, zip(*cursors, strict=True))
    return [_plain(job_ids), _times(nexts)]


def advance_jobs(cursor, schema: str, cursors: list[tuple[int, datetime | None]]) -> None:
    if cursors:
        cursor.execute(_advance_sql(schema), _advance_params(cursors))


@per_schema
def _park_sql(schema: str) -> sql.Composable:
    return sql.SQL(
        """
        UPDATE {jobs} AS j SET fault_code = u.code, fault_detail = u.detail, faulted_at = now(),
               version = j.version + 1
        FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS u(id, code, detail)
        WHERE j.id = u.id
        """
    ).format(jobs=table(schema, "jobs_job"))


def _park_params(faults: list[tuple[int, str, str]]) -> list:
    ids, codes, details = map(list, zip(*faults, strict=True))
    return [ids, codes, details]


def park_jobs(cursor, schema: str, faults: list[tuple[int, str, str]]) -> None:
    """(job id, fault code, detail): the job leaves scheduling until edited or resumed."""
    if faults:
        cursor.execute(_park_sql(schema), _park_params(faults))


@dataclass(frozen=True)
class Materialised:
    """One schema's share of a grouped materialise write."""

    schema: str
    runs: list[tuple]  # insert_scheduled_runs rows
    cursors: list[tuple[int, datetime | None]]  # advance_jobs
    parked: list[tuple[int, str, str]]  # park_jobs


def write_materialised(cursor, parts: list[Materialised]) -> list[set]:
    """`insert_scheduled_runs`, `advance_jobs` and `park_jobs` of several schemas in ONE
    statement (a data-modifying CTE each, all run to completion whether read or not).
    A job is advanced or parked, never both, so no two CTEs touch one row. Returns each
    part's inserted run ids, in the order of `parts`."""
    ctes: list[sql.Composable] = []
    params: list = []
    reads: list[sql.Composable] = []
    for n, part in enumerate(parts):
        assert not {c[0] for c in part.cursors} & {p[0] for p in part.parked}
        if part.runs:
            ctes.append(
                sql.SQL("i{} AS ({})").format(sql.SQL(str(n)), _insert_runs_sql(part.schema))
            )
            params += _insert_runs_params(part.runs)
            reads.append(sql.SQL("SELECT {n}, id FROM i{n}").format(n=sql.SQL(str(n))))
        if part.cursors:
            ctes.append(sql.SQL("a{} AS ({})").format(sql.SQL(str(n)), _advance_sql(part.schema)))
            params += _advance_params(part.cursors)
        if part.parked:
            ctes.append(sql.SQL("p{} AS ({})").format(sql.SQL(str(n)), _park_sql(part.schema)))
            params += _park_params(part.parked)
    inserted: list[set] = [set() for _ in parts]
    if not ctes:
        return inserted
    if not reads:
        reads = [sql.SQL("SELECT 0, NULL::uuid WHERE false")]
    cursor.execute(
        sql.SQL("WITH {} {}").format(sql.SQL(", ").join(ctes), sql.SQL(" UNION ALL ").join(reads)),
        params,
    )
    for n, run_id in cursor.fetchall():
        inserted[n].add(run_id)
    return inserted


@dataclass(frozen=True)
class Queued:
    """A run the fire step moved to `queued`, with what its message depends on as the job
    says now (an edit since the message was built changes the queue or the time limits)."""

    run_id: Any
    priority: str
    timeout_seconds: int


def set_local_lock_timeout(cursor, seconds: float) -> None:
    """A lock wait bound for the rest of this transaction only."""
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{seconds * 1000:.0f}"])


def queue_unconstrained(
    cursor, schema: str, run_ids: list, attempts: list[int], judged_ids: list, now: datetime
) -> list[Queued]:
    """The common case in one statement: runs of active `allow` jobs go straight to queued
    (first attempts of any trigger, and retries), each only at the attempt the leader holds
    (`attempts`, one per run): a run a worker took meanwhile from an earlier message and
    ended in a retry is a later attempt, whose own back-off and message stay for it (ADR
    0021). Runs it leaves need the full admission:
    other concurrency policies, paused or deleted jobs, and schedule runs among
    `judged_ids` (runs that may have waited with no leader) later than their job's misfire
    grace (the misfire policy decides those).

    The plan is fixed by the query's shape, driven from the given runs: first those runs
    (the CTE), then each one's job by its key (`LATERAL ... OFFSET 0`, which the planner
    cannot turn around). Written as a plain join, a tenant's freshly filled tables (no
    statistics yet) made PostgreSQL walk every job of the tenant and probe the runs for
    each: 1.4 s for 2,000 runs of one tenant with 10,000 jobs, instead of 60 ms."""
    if not run_ids:
        return []
    cursor.execute(
        queue_unconstrained_sql(schema),
        queue_unconstrained_params(run_ids, attempts, judged_ids, now),
    )
    return [Queued(*row) for row in cursor.fetchall()]


@per_schema
def queue_unconstrained_sql(schema: str) -> sql.Composable:
    return sql.SQL(
        """
        WITH due AS MATERIALIZED (
            SELECT r.id, r.job_id, v.attempt, v.judged
            FROM unnest(%s::uuid[], %s::int[], %s::bool[]) AS v(id, attempt, judged)
            JOIN {runs} r ON r.id = v.id AND r.attempt = v.attempt
            WHERE r.status IN {admittable})
        UPDATE {runs} r SET status = {queued}, queued_at = now()
        FROM due d CROSS JOIN LATERAL (
            SELECT j.paused, j.misfire_grace_seconds, j.priority, j.timeout_seconds
            FROM {jobs} j
            WHERE j.id = d.job_id AND j.concurrency_policy = 'allow' AND j.deleted_at IS NULL
            OFFSET 0) j
        WHERE r.id = d.id AND r.attempt = d.attempt AND r.status IN {admittable}
          AND NOT {held}
          AND (r.trigger <> 'schedule' OR r.attempt > 1
               OR (NOT j.paused
                   AND (NOT d.judged
                        OR r.due_at >= %s - make_interval(secs => j.misfire_grace_seconds))))
        RETURNING r.id, j.priority, j.timeout_seconds
        """
    ).format(
        runs=table(schema, "runs_run"),
        jobs=table(schema, "jobs_job"),
        held=sql.SQL(HELD_BY_PAUSE),
        **STATUS,
    )


@per_schema
def _first_attempts_queued_sql(schema: str) -> sql.Composable:
    """First attempts still `scheduled` of active, unpaused `allow` jobs to `queued`. Both
    tables are reached by key from the given arrays (runs and their jobs), so the plan
    cannot walk a tenant's jobs whatever its statistics (see `queue_unconstrained`); and
    the target table is planned once, not twice as in `queue_unconstrained_sql`."""
    return sql.SQL(
        """
        UPDATE {runs} r SET status = {queued}, queued_at = now()
        FROM {jobs} j
        WHERE r.id = ANY(%s::uuid[]) AND r.attempt = 1 AND r.status = {scheduled}
          AND j.id = ANY(%s::bigint[]) AND j.id = r.job_id
          AND j.concurrency_policy = 'allow' AND j.deleted_at IS NULL AND NOT j.paused
        RETURNING r.id, j.priority, j.timeout_seconds
        """
    ).format(runs=table(schema, "runs_run"), jobs=table(schema, "jobs_job"), **STATUS)


def queue_first_attempts_of_schemas(
    cursor, wanted: list[tuple[str, list, list[int]]]
) -> list[list[Queued]]:
    """Several schemas' first attempts of active, unpaused `allow` jobs moved to `queued` in
    ONE statement (a data-modifying CTE each, all run to completion), in the order of
    `wanted`: (schema, run ids, their job ids). Returns each schema's runs moved, with
    what their messages depend on; the others are left as they were (another policy, a
    paused or deleted job, a run an edit removed) for the full admission. With thousands of
    small tenants due at once, PostgreSQL's planning of each schema's tables is most of
    the cost: this plans each schema once, where a read before the publication and a write
    after it (ADR 0021) planned it twice (`make bench ARGS="schema-statements"`)."""
    params: list = []
    for _schema, run_ids, job_ids in wanted:
        params += [uuid_array(run_ids), pg_array(sorted(set(job_ids)))]
    cursor.execute(
        tagged_ctes([_first_attempts_queued_sql(schema) for schema, _r, _j in wanted]), params
    )
    found: list[list[Queued]] = [[] for _ in wanted]
    for n, *row in cursor.fetchall():
        found[n].append(Queued(*row))
    return found


def queue_unconstrained_params(
    run_ids: list, attempts: list[int], judged_ids: list, now: datetime
) -> list:
    judged = set(judged_ids)
    return [
        pg_array(run_ids),
        pg_array(attempts),
        pg_array([run_id in judged for run_id in run_ids]),
        now,
    ]


class PublishableJob(NamedTuple):  # a tuple: 10,000 of them are built per fire
    paused: bool
    misfire_grace_seconds: int
    priority: str
    timeout_seconds: int


@per_schema
def _publishable_sql(schema: str) -> sql.Composable:
    return sql.SQL(
        """
        WITH due AS MATERIALIZED (
            SELECT v.n, r.job_id
            FROM unnest(%s::uuid[]) WITH ORDINALITY AS v(id, n)
            JOIN {runs} r ON r.id = v.id
            WHERE r.status = {scheduled})
        SELECT d.n, j.paused, j.misfire_grace_seconds, j.priority, j.timeout_seconds
        FROM due d CROSS JOIN LATERAL (
            SELECT j.paused, j.misfire_grace_seconds, j.priority, j.timeout_seconds
            FROM {jobs} j
            WHERE j.id = d.job_id AND j.concurrency_policy = 'allow' AND j.deleted_at IS NULL
            OFFSET 0) j
        """
    ).format(runs=table(schema, "runs_run"), jobs=table(schema, "jobs_job"), **STATUS)


def publishable_runs(cursor, schema: str, run_ids: list) -> dict[int, PublishableJob]:
    """Of `run_ids`, those still `scheduled` whose job is an active `allow` job, by their
    position in the list, with what the fire's early publication decides by
    (`beat/fire.py` `publish_first`): each run and its job read by key, no lock. A run an
    edit removed or cancelled since it was prepared is left out: no message for it.

    Positions rather than ids come back, and the ids go in as bare hex, because turning
    10,000 UUIDs into text and back cost more in Python than the read in PostgreSQL. The
    plan is fixed by the query's shape, as in `queue_unconstrained_sql`."""
    if not run_ids:
        return {}
    cursor.execute(_publishable_sql(schema), [uuid_array(run_ids)])
    return {row[0] - 1: PublishableJob(*row[1:]) for row in cursor.fetchall()}


def publishable_runs_of_schemas(
    cursor, wanted: list[tuple[str, list]]
) -> list[dict[int, PublishableJob]]:
    """`publishable_runs` of several schemas in ONE statement, in the order of `wanted`:
    with thousands of tenants of a run or two each, a round trip per tenant (and a
    savepoint around each) was most of the fire."""
    query = tagged_union((n, _publishable_sql(schema)) for n, (schema, _ids) in enumerate(wanted))
    cursor.execute(query, [uuid_array(ids) for _schema, ids in wanted])
    found: list[dict[int, PublishableJob]] = [{} for _ in wanted]
    for n, position, *job in cursor.fetchall():
        found[n][position - 1] = PublishableJob(*job)
    return found


@dataclass(frozen=True)
class JobAdmissionRow:
    id: int
    policy: str
    max_concurrent: int
    paused: bool
    deleted: bool
    active: int
    misfire_policy: str
    misfire_grace_seconds: int
    priority: str
    timeout_seconds: int


@per_schema
def _job_admission_sql(schema: str) -> sql.Composable:
    return sql.SQL(
        """
        SELECT j.id, j.concurrency_policy, j.max_concurrent_runs, j.paused,
               j.deleted_at IS NOT NULL,
               CASE WHEN j.concurrency_policy = 'allow' THEN 0 ELSE
                 (SELECT count(*) FROM {runs} r
                  WHERE r.job_id = j.id AND r.status IN {active}) END,
               j.misfire_policy, j.misfire_grace_seconds, j.priority, j.timeout_seconds
        FROM {jobs} j WHERE j.id = ANY(%s)
        """
    ).format(jobs=table(schema, "jobs_job"), runs=table(schema, "runs_run"), **STATUS)


def job_admission_rows(cursor, schema: str, job_ids: list[int]) -> dict[int, JobAdmissionRow]:
    """Current policy, pause state and active-run count of the jobs with due runs."""
    cursor.execute(_job_admission_sql(schema), [job_ids])
    return {row[0]: JobAdmissionRow(*row) for row in cursor.fetchall()}


@per_schema
def _mark_queued_sql(schema: str) -> sql.Composable:
    return sql.SQL(
        """
        UPDATE {runs} r SET status = {queued}, queued_at = now()
        FROM unnest(%s::uuid[], %s::int[]) AS v(id, attempt)
        WHERE r.id = v.id AND r.attempt = v.attempt AND r.status IN {admittable}
        RETURNING r.id
        """
    ).format(runs=table(schema, "runs_run"), **STATUS)


def mark_queued(cursor, schema: str, run_ids: list, attempts: list[int]) -> set:
    """scheduled|retrying -> queued, each run only at the attempt the leader holds (as
    `queue_unconstrained`); returns the ids that moved (only those are published)."""
    if not run_ids:
        return set()
    cursor.execute(_mark_queued_sql(schema), [pg_array(run_ids), pg_array(attempts)])
    return {row[0] for row in cursor.fetchall()}


@per_schema
def _published_queued_sql(schema: str) -> sql.Composable:
    return sql.SQL(
        """
        UPDATE {runs} SET status = {queued}, queued_at = now()
        WHERE id = ANY(%s::uuid[]) AND status = {scheduled} AND attempt = 1
        """
    ).format(runs=table(schema, "runs_run"), **STATUS)


def mark_published_queued(cursor, schema: str, run_ids: list) -> None:
    """The fire's write for first attempts it published before writing (`beat/fire.py`
    `publish_first`): `scheduled` at attempt 1 -> queued. Only that: a worker may have
    claimed one and even failed it meanwhile, and its retry (`retrying`, attempt 2) must
    stay for the leader to admit after its back-off, with a message of its own."""
    if run_ids:
        cursor.execute(_published_queued_sql(schema), [uuid_array(run_ids)])


def mark_published_queued_of_schemas(cursor, wanted: list[tuple[str, list]]) -> None:
    """`mark_published_queued` of several schemas in ONE statement (a data-modifying CTE
    each, all run to completion)."""
    wanted = [(schema, ids) for schema, ids in wanted if ids]
    if not wanted:
        return
    ctes = sql.SQL(", ").join(
        sql.SQL("q{n} AS ({query})").format(n=sql.SQL(str(n)), query=_published_queued_sql(s))
        for n, (s, _ids) in enumerate(wanted)
    )
    cursor.execute(
        sql.SQL("WITH {} SELECT 1").format(ctes), [uuid_array(ids) for _s, ids in wanted]
    )


def mark_skipped(
    cursor, schema: str, run_ids: list, attempts: list[int], reason: str, now: datetime
) -> int:
    """The fire's skips (paused, misfire, overlap), each run only at the attempt the
    leader decided on: a retry recorded meanwhile is not skipped for its first attempt."""
    if not run_ids:
        return 0
    query = sql.SQL(
        """
        UPDATE {runs} r SET status = {skipped}, skip_reason = %s, finished_at = %s
        FROM unnest(%s::uuid[], %s::int[]) AS v(id, attempt)
        WHERE r.id = v.id AND r.attempt = v.attempt AND r.status IN {skippable}
        """
    ).format(runs=table(schema, "runs_run"), **STATUS)
    cursor.execute(query, [reason, now, pg_array(run_ids), pg_array(attempts)])
    return cursor.rowcount


def cancel_runs(cursor, schema: str, run_ids: list, error: str, now: datetime) -> int:
    if not run_ids:
        return 0
    query = sql.SQL(
        """
        UPDATE {runs} SET status = {cancelled}, error = %s, finished_at = %s
        WHERE id = ANY(%s::uuid[]) AND status IN {cancellable}
        """
    ).format(runs=table(schema, "runs_run"), **STATUS)
    cursor.execute(query, [error, now, run_ids])
    return cursor.rowcount


def cancel_active_runs_of_jobs(
    cursor, schema: str, job_ids: list[int], error: str, now: datetime, admitting: list
) -> list[tuple[int, Any, int]]:
    """`replace` policy: the jobs' queued and running runs are cancelled, except the runs
    this decision queues (`admitting`): one a worker took meanwhile from an earlier message
    is active, and must not be cancelled as replaced by itself (an older one it holds is
    replaced as any other). Returns the (job id, run id,
    attempt) of each (their tenant's quota slots are free)."""
    if not job_ids:
        return []
    query = sql.SQL(
        """
        UPDATE {runs} SET status = {cancelled}, error = %s, finished_at = %s
        WHERE job_id = ANY(%s) AND status IN {active} AND NOT (id = ANY(%s::uuid[]))
        RETURNING job_id, id, attempt
        """
    ).format(runs=table(schema, "runs_run"), **STATUS)
    cursor.execute(query, [error, now, job_ids, pg_array(admitting)])
    return [tuple(row) for row in cursor.fetchall()]


@dataclass(frozen=True)
class RunRef:
    """What the leader needs to admit and publish one run."""

    run_id: Any
    job_id: int
    scheduled_for: datetime
    due_at: datetime
    attempt: int
    priority: str
    trigger: str
    timeout_seconds: int


REF_COLUMNS = (
    "r.id, r.job_id, r.scheduled_for, r.due_at, r.attempt, j.priority, r.trigger, j.timeout_seconds"
)


def _ref_query(where: str, tail: str = "") -> sql.Composed:
    return sql.SQL(
        "SELECT {cols} FROM {runs} r JOIN {jobs} j ON j.id = r.job_id WHERE " + where + tail
    )


def pending_runs(
    cursor, schema: str, *, until: datetime, limit: int = 10_000, after: tuple | None = None
) -> list[RunRef]:
    """Runs waiting for admission (scheduled or retrying) due by `until`, oldest first, a
    page at a time: `after` is the (due_at, id) of the last run of the page before."""
    where = "r.status IN {waiting} AND r.due_at <= %s AND NOT " + HELD_BY_PAUSE
    if after is not None:
        where += " AND (r.due_at, r.id) > (%s, %s)"
    query = _ref_query(where, " ORDER BY r.due_at, r.id LIMIT %s")
    query = query.format(
        cols=sql.SQL(REF_COLUMNS),
        runs=table(schema, "runs_run"),
        jobs=table(schema, "jobs_job"),
        **STATUS,
    )
    fast_times(cursor).execute(query, [until, *(after or ()), limit])
    return [RunRef(*row) for row in cursor.fetchall()]


def pending_runs_by_id(cursor, schema: str, *, until: datetime, run_ids: list) -> list[RunRef]:
    """The runs among `run_ids` that still wait for admission and are due by `until` (a
    paused job's dependency runs are held: see HELD_BY_PAUSE)."""
    query = _ref_query(
        "r.id = ANY(%s::uuid[]) AND r.status IN {waiting} AND r.due_at <= %s AND NOT "
        + HELD_BY_PAUSE
    )
    query = query.format(
        cols=sql.SQL(REF_COLUMNS),
        runs=table(schema, "runs_run"),
        jobs=table(schema, "jobs_job"),
        **STATUS,
    )
    fast_times(cursor).execute(query, [pg_array(run_ids), until])
    return [RunRef(*row) for row in cursor.fetchall()]


def queued_runs(
    cursor,
    schema: str,
    *,
    after: Any = None,
    limit: int = 10_000,
    queued_before: datetime | None = None,
) -> list[RunRef]:
    """Queued runs in id order, a page at a time (`after`: the last id of the page before);
    with `queued_before`, only those queued before that instant (the database's clock)."""
    where = "r.status = {queued}" + (" AND r.id > %s" if after is not None else "")
    params: list[Any] = [after] if after is not None else []
    if queued_before is not None:
        where += " AND (r.queued_at IS NULL OR r.queued_at < %s)"
        params.append(queued_before)
    query = _ref_query(where, " ORDER BY r.id LIMIT %s").format(
        cols=sql.SQL(REF_COLUMNS),
        runs=table(schema, "runs_run"),
        jobs=table(schema, "jobs_job"),
        **STATUS,
    )
    fast_times(cursor).execute(query, [*params, limit])
    return [RunRef(*row) for row in cursor.fetchall()]


def due_jobs(cursor, schema: str, *, until: datetime, limit: int) -> list[tuple[int, datetime]]:
    """Schedulable jobs due by `until`, soonest first (on job_schedulable_idx): what the
    index must hold for nothing to be missed."""
    query = sql.SQL(
        f"SELECT id, next_run_at FROM {{}} WHERE {SCHEDULABLE} AND next_run_at <= %s "
        "ORDER BY next_run_at LIMIT %s"
    ).format(table(schema, "jobs_job"))
    cursor.execute(query, [until, limit])
    return cursor.fetchall()
