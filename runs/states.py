"""Run statuses and the transitions allowed between them: the one place that decides.

scheduled -> queued -> running -> succeeded | failed
failed -> retrying -> queued ; failed -> dead ; dead -> retrying (replay)
scheduled | queued | retrying | running -> cancelled ; scheduled -> skipped
"""

from __future__ import annotations

SCHEDULED = "scheduled"
QUEUED = "queued"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
RETRYING = "retrying"
DEAD = "dead"
SKIPPED = "skipped"
CANCELLED = "cancelled"

ALL = (SCHEDULED, QUEUED, RUNNING, SUCCEEDED, FAILED, RETRYING, DEAD, SKIPPED, CANCELLED)
TERMINAL = frozenset({SUCCEEDED, DEAD, SKIPPED, CANCELLED})
# Runs that hold a concurrency slot of their job.
ACTIVE = frozenset({QUEUED, RUNNING})
# Runs a worker may claim: `scheduled` too, because the leader publishes a run inside the
# transaction that marks it queued, and a fast worker may see the message first.
CLAIMABLE = frozenset({SCHEDULED, QUEUED})

TRANSITIONS: dict[str, frozenset[str]] = {
    SCHEDULED: frozenset({QUEUED, RUNNING, SKIPPED, CANCELLED}),
    QUEUED: frozenset({RUNNING, CANCELLED, SKIPPED}),
    RUNNING: frozenset({SUCCEEDED, FAILED, RETRYING, DEAD, CANCELLED}),
    FAILED: frozenset({RETRYING, DEAD, QUEUED}),
    RETRYING: frozenset({QUEUED, RUNNING, CANCELLED}),
    DEAD: frozenset({QUEUED, RETRYING}),  # replay: a new attempt awaits admission
    SUCCEEDED: frozenset(),
    SKIPPED: frozenset(),
    CANCELLED: frozenset(),
}

SKIP_OVERLAP = "overlap"
SKIP_MISFIRE = "misfire"
SKIP_DST = "dst"
SKIP_PAUSED = "paused"
SKIP_UPSTREAM_FAILED = "upstream_failed"
SKIP_REASONS = (SKIP_OVERLAP, SKIP_MISFIRE, SKIP_DST, SKIP_PAUSED, SKIP_UPSTREAM_FAILED)


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
