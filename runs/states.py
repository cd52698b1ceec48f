"""Run statuses and the transitions allowed between them: the one place that decides.

    scheduled ──▶ queued ──▶ running ──▶ succeeded
        │            │          │
        │            │          ├──▶ retrying ──▶ queued ──▶ running ...   (a new attempt)
        │            │          └──▶ dead ──(replay)──▶ retrying, ──(discard)──▶ cancelled
        └──▶ skipped └──▶ cancelled (from any status that has not ended)

- `scheduled`: created for a slot (or by a trigger) and waiting for the leader's admission.
- `retrying`: an attempt failed or was lost and the next one waits for its backoff (or a
  dead run was replayed); admitted by the leader like a scheduled run.
- `queued`: admitted; its message is in the broker. `running`: a worker claimed it.
- `succeeded`, `dead` (the DLQ: attempts exhausted, or a target that cannot be prepared),
  `skipped` (with a reason) and `cancelled` are where a run ends; only `dead` goes on,
  by a replay (back to `retrying`) or a discard (to `cancelled`, leaving the DLQ).

A failed attempt is recorded as an attempt (`runs.Attempt.outcome = failed`); the run itself
goes straight to `retrying` or `dead`, so there is no `failed` run status. Every status
filter and conditional UPDATE in the code is built from the names below (a test fails on a
status word written into SQL anywhere else).
"""

from __future__ import annotations

SCHEDULED = "scheduled"
QUEUED = "queued"
RUNNING = "running"
SUCCEEDED = "succeeded"
RETRYING = "retrying"
DEAD = "dead"
SKIPPED = "skipped"
CANCELLED = "cancelled"

ALL = (SCHEDULED, QUEUED, RUNNING, SUCCEEDED, RETRYING, DEAD, SKIPPED, CANCELLED)

TRANSITIONS: dict[str, frozenset[str]] = {
    # `running` straight from `scheduled`: the leader publishes a first attempt of an
    # `allow` job before it marks the run queued (beat/fire.py `publish_first`), and if
    # that write is lost, a worker still claims the attempt.
    # A retry is claimable only once admitted (its backoff is the leader's to decide).
    SCHEDULED: frozenset({QUEUED, RUNNING, SKIPPED, CANCELLED}),
    RETRYING: frozenset({QUEUED, SKIPPED, CANCELLED}),
    QUEUED: frozenset({RUNNING, CANCELLED}),
    RUNNING: frozenset({SUCCEEDED, RETRYING, DEAD, CANCELLED}),
    # replay: a new attempt awaits admission; discard: out of the DLQ for good
    DEAD: frozenset({RETRYING, CANCELLED}),
    SUCCEEDED: frozenset(),
    SKIPPED: frozenset(),
    CANCELLED: frozenset(),
}

TERMINAL = frozenset(s for s, targets in TRANSITIONS.items() if not targets or s == DEAD)
# Waiting for the leader's admission (its relay, rebuild and status read these).
WAITING = (SCHEDULED, RETRYING)
# Holding a concurrency slot of their job (and, with fair share, of their tenant).
ACTIVE = (QUEUED, RUNNING)
# What retention may delete once old enough (beat/retention.py): ended for good. A dead run
# ended too, but it stays in the DLQ until it is replayed or discarded.
PRUNABLE = tuple(sorted(TERMINAL - {DEAD}))

SKIP_OVERLAP = "overlap"
SKIP_MISFIRE = "misfire"
SKIP_DST = "dst"
SKIP_PAUSED = "paused"
SKIP_UPSTREAM_FAILED = "upstream_failed"
SKIP_EXCLUDED = "excluded"  # the slot's date is on one of the job's exclusion calendars
SKIP_REASONS = (
    SKIP_OVERLAP,
    SKIP_MISFIRE,
    SKIP_DST,
    SKIP_PAUSED,
    SKIP_UPSTREAM_FAILED,
    SKIP_EXCLUDED,
)


# A DAG run (runs.DagRun): `running` while any of its jobs has a run to come; then
# `succeeded` if every job's run succeeded, else `failed` (a replay inside it reopens it).
DAG_RUNNING = "running"
DAG_SUCCEEDED = "succeeded"
DAG_FAILED = "failed"
DAG_STATUSES = (DAG_RUNNING, DAG_SUCCEEDED, DAG_FAILED)


class IllegalTransition(ValueError):
    pass


def can_transition(current: str, new: str) -> bool:
    return new in TRANSITIONS.get(current, frozenset())


def check_transition(current: str, new: str) -> None:
    if not can_transition(current, new):
        raise IllegalTransition(f"a {current} run cannot become {new}")


def sources_of(new: str) -> tuple[str, ...]:
    """Statuses from which a run may move to `new`: the WHERE clause of a conditional UPDATE."""
    return tuple(status for status in ALL if new in TRANSITIONS[status])


# The sources of each transition the code writes, named for the statement that writes it.
CLAIMABLE = sources_of(RUNNING)  # a worker's claim
ADMITTABLE = sources_of(QUEUED)  # the leader's fire
SKIPPABLE = sources_of(SKIPPED)  # overlap, misfire, paused at admission
# a cancel, `replace`, a deleted job (a dead run leaves the DLQ by a discard instead)
CANCELLABLE = tuple(s for s in sources_of(CANCELLED) if s != DEAD)
DISCARDABLE = (DEAD,)  # a discard: a dead run the tenant gives up on becomes cancelled
REPLAYABLE = tuple(s for s in sources_of(RETRYING) if s != RUNNING)  # a replay: dead
FINISHABLE = (RUNNING,)  # a worker's finish, the reaper's lost attempt

# How one attempt ended (`runs.Attempt.outcome`): a failed attempt makes its run `retrying`
# or `dead`; a lost one was reaped after its worker went silent.
ATTEMPT_RUNNING = "running"
ATTEMPT_SUCCEEDED = "succeeded"
ATTEMPT_FAILED = "failed"
ATTEMPT_LOST = "lost"
ATTEMPT_CANCELLED = "cancelled"
ATTEMPT_OUTCOMES = (
    ATTEMPT_RUNNING,
    ATTEMPT_SUCCEEDED,
    ATTEMPT_FAILED,
    ATTEMPT_LOST,
    ATTEMPT_CANCELLED,
)
