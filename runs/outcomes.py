"""What an attempt's outcome means for its run: pure, shared by the worker (a finished
attempt) and the leader's reaper (a lost one), so both apply the same retry policy."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from . import states
from .retry import RetryPolicy, retry_delay, should_retry


@dataclass(frozen=True)
class Outcome:
    ok: bool
    error: str = ""
    output: str = ""
    permanent: bool = False  # retrying cannot help (target cannot be prepared)


@dataclass(frozen=True)
class Decision:
    status: str
    next_attempt: int
    due_at: datetime | None


class AttemptFacts(Protocol):
    """What the decision reads of a run's attempt."""

    attempt: int
    retry: RetryPolicy
    job_deleted: bool


def decide(facts: AttemptFacts, outcome: Outcome, now: datetime) -> Decision:
    """Succeeded; or retrying at now + backoff while attempts remain; or dead (the DLQ)."""
    if outcome.ok:
        return Decision(states.SUCCEEDED, facts.attempt, None)
    if not outcome.permanent and not facts.job_deleted and should_retry(facts.retry, facts.attempt):
        delay = retry_delay(facts.retry, facts.attempt)
        return Decision(states.RETRYING, facts.attempt + 1, now + timedelta(seconds=delay))
    return Decision(states.DEAD, facts.attempt, None)
